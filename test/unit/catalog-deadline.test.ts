import { describe, expect, it } from 'vitest';
import { loadCatalogFile } from '../../config/catalog.ts';
import { CatalogError, validateCatalog } from '../../core/catalog/catalog.ts';

/**
 * A setting that is time the job takes (`job_time`, docs/catalog.md) may not allow more than
 * the model's deadline: such a job could never finish in time, so the catalog is refused at
 * load, naming the model and the setting.
 */
const providers = { local: { kind: 'local' } };
const model = (settings: Record<string, unknown>, extra: Record<string, unknown> = {}) => ({
  id: 'test/slow-image',
  name: 'Slow image',
  type: 'image',
  generation_types: ['text-to-image'],
  provider: { name: 'local', model: 'image' },
  settings,
  pricing: { base: 4 },
  ...extra,
});
const load = (...models: unknown[]) => () => validateCatalog({ providers, models }, 50n);

describe('a setting bound the deadline can never meet', () => {
  it('is refused at load, naming the model and the setting', () => {
    const tooLong = load(model({ delay_ms: { type: 'integer', min: 0, max: 600_000, default: 0, job_time: 'ms' } }, { deadline_seconds: 300 }));
    expect(tooLong).toThrow(CatalogError);
    expect(tooLong).toThrow(/^catalog: models\.0\.settings\.delay_ms\.max: /);
    expect(tooLong).toThrow(/'test\/slow-image'/);
    expect(tooLong).toThrow(/'delay_ms'/);
    expect(tooLong).toThrow(/deadline of 300 s/);
    // Equal to the deadline is never met either; in seconds too; and against the default deadline (600 s).
    expect(load(model({ delay_ms: { type: 'integer', min: 0, max: 300_000, default: 0, job_time: 'ms' } }, { deadline_seconds: 300 }))).toThrow(/'delay_ms'/);
    expect(load(model({ wait: { type: 'number', min: 0, max: 90, default: 0, job_time: 's' } }, { deadline_seconds: 60 }))).toThrow(/models\.0\.settings\.wait\.max: .*'test\/slow-image'.*'wait'/);
    expect(load(model({ delay_ms: { type: 'integer', min: 0, max: 600_000, default: 0, job_time: 'ms' } }))).toThrow(/deadline of 600 s/);
    // The second model is the one named.
    const fine = model({}, { id: 'test/fine' });
    expect(load(fine, { ...model({ pause: { type: 'integer', min: 0, max: 10, default: 0, job_time: 's' } }, { deadline_seconds: 10 }), id: 'test/other' })).toThrow(
      /^catalog: models\.1\.settings\.pause\.max: .*'test\/other'/,
    );
  });

  it('within the deadline, or a setting that is not job time, loads', () => {
    expect(load(model({ delay_ms: { type: 'integer', min: 0, max: 299_999, default: 0, job_time: 'ms' } }, { deadline_seconds: 300 }))()).toBeDefined();
    expect(load(model({ wait: { type: 'number', min: 0, max: 59.5, default: 0, job_time: 's' } }, { deadline_seconds: 60 }))()).toBeDefined();
    // A number that is not time the job takes (the seconds of audio it makes) is not bound by the deadline.
    expect(load(model({ duration: { type: 'integer', min: 1, max: 900, default: 3 } }, { deadline_seconds: 300 }))()).toBeDefined();
  });

  it('a job_time unit other than ms or s is refused', () => {
    expect(load(model({ delay: { type: 'integer', min: 0, max: 10, default: 0, job_time: 'minutes' } }, { deadline_seconds: 300 }))).toThrow(/models\.0\.settings\.delay\.job_time/);
  });

  it('the shipped catalog loads: its demo models keep delay_ms below their deadlines', async () => {
    const catalog = await loadCatalogFile('config/models.yaml', 50n);
    for (const m of catalog.parsed.models) {
      if (m.type === 'text' || !m.settings.delay_ms) continue;
      expect(m.settings.delay_ms, m.id).toMatchObject({ type: 'integer', job_time: 'ms' });
      expect((m.settings.delay_ms as { max: number }).max, m.id).toBeLessThan(m.deadline_seconds * 1000);
    }
  });
});

describe("a media model's expected duration (expected_seconds)", () => {
  it('is optional, a positive whole number of seconds within the deadline, and shown by the model view', async () => {
    const { modelView } = await import('../../core/catalog/views.ts');
    const plain = load(model({}))();
    expect(plain.parsed.models[0]).not.toHaveProperty('expected_seconds');
    expect(modelView(plain.parsed.models[0]!, 100n)).not.toHaveProperty('expected_seconds');
    const timed = load(model({}, { expected_seconds: 30, deadline_seconds: 30 }))();
    expect(timed.parsed.models[0]).toMatchObject({ expected_seconds: 30 });
    expect(modelView(timed.parsed.models[0]!, 100n)).toMatchObject({ deadline_seconds: 30, expected_seconds: 30 });
    expect(load(model({}, { expected_seconds: 31, deadline_seconds: 30 }))).toThrow(/models\.0\.expected_seconds: must not exceed deadline_seconds \(30\)/);
    for (const bad of [0, -5, 2.5, '10']) expect(load(model({}, { expected_seconds: bad })), String(bad)).toThrow(/expected_seconds/);
  });
});
