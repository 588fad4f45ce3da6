import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { MikroORM } from '@mikro-orm/postgresql';
import { seedModels, validateCatalog } from '../../core/catalog/catalog.ts';
import { createContext, type CoreDeps } from '../../core/context.ts';
import { createInternalCaller } from '../../core/internal/router.ts';
import { openOrm } from '../../core/orm.ts';
import { createCaller } from '../../core/router.ts';
import { toCoreError } from '../../core/trpc.ts';
import { TEST_CATALOG, useTestCatalog } from '../support/catalog.ts';
import { makeAccount, makeKey, migratedFreshDatabase, openTestOrm, testDeps } from '../support/db.ts';
import { capturedFor } from '../support/ledger.ts';

/**
 * Operators change the catalog at run time (admin.models), through the core caller as every
 * adapter does: the internal caller, an operator admin token and a viewer token. The deps'
 * clock is the test's, so scheduled prices can be reached without waiting.
 */
let orm: MikroORM;
let deps: CoreDeps;
let now = new Date();
let operator: string;
let viewer: string;

const tag = randomBytes(4).toString('hex');
const textId = `admin-test/${tag}/chat`;
const imageId = `admin-test/${tag}/image`;
const textEntry = (id = textId) => ({
  id,
  name: 'Operator chat',
  type: 'text',
  generation_types: ['chat'],
  provider: { name: 'local', model: 'echo' },
  // API prices (50%): 1 micro-coin per input token, 2 per output token.
  pricing: { input_per_million: 2, output_per_million: 4 },
  context_window: 4096,
  max_output_tokens: 1000,
  default_max_tokens: 100,
});
const imageEntry = {
  id: imageId,
  name: 'Operator image',
  type: 'image',
  generation_types: ['text-to-image'],
  provider: { name: 'local', model: 'image' },
  settings: { size: { type: 'enum', options: [64, 128], default: 64 } },
  pricing: { base: 10 },
};

const internal = () => createCaller(createContext(deps, { kind: 'internal' }));
const asAdmin = (token: string) => createCaller(createContext(deps, { kind: 'admin', token }));
const withKey = (key: string) => createCaller(createContext(deps, { kind: 'bearer', token: key }));
const refusal = (p: Promise<unknown>) =>
  p.then(
    () => expect.unreachable('expected a refusal'),
    (err: unknown) => toCoreError(err)!,
  );
const audit = (targetId: string) =>
  orm.em
    .fork()
    .execute<{ action: string; actor_type: string; actor_id: string | null; reason: string | null; before: unknown; after: unknown }[]>(
      'select action, actor_type, actor_id, reason, before, after from admin_audit_log where target_type = ? and target_id = ? order by id',
      ['model', targetId],
    );
const chat = async (key: string, model: string) => {
  const answer = await withKey(key).chat.complete({ model, messages: [{ role: 'user', content: 'Hello there' }], max_tokens: 20 });
  if (answer.stream) throw new Error('expected a completion');
  return answer.completion;
};

beforeAll(async () => {
  orm = await openTestOrm();
  const providers = await useTestCatalog(orm, 'http://127.0.0.1:9/v1');
  // A long catalog cache: a scheduled price must apply at its date without a reload.
  const wired = testDeps(orm, { providers, catalogTtlMs: 60_000, generations: { start: async () => undefined, cancel: async () => undefined, state: async () => ({ state: 'open' }), deliverWebhook: async () => undefined } });
  deps = { ...wired, clock: () => now };
  operator = (await internal().admins.createToken({ name: `models-${tag}`, role: 'operator' })).token;
  viewer = (await internal().admins.createToken({ name: `models-viewer-${tag}`, role: 'viewer' })).token;
});
afterAll(async () => {
  await orm.close();
});

describe('admin.models', () => {
  it('creates a model that API keys then list and use; the viewer role may read but not change it', async () => {
    expect(await refusal(asAdmin(viewer).admin.models.create({ model: textEntry() }))).toMatchObject({ code: 'forbidden' });
    const created = await asAdmin(operator).admin.models.create({ model: textEntry(), reason: 'new chat model' });
    expect(created).toMatchObject({ object: 'admin_model', id: textId, enabled: true, prices_in_force: { effective_from: null, pricing: { input_per_million: 2 } } });
    expect(created.api).toMatchObject({ pricing: { input: 1, output: 2 } });
    expect(await asAdmin(viewer).admin.models.get({ id: textId })).toMatchObject({ id: textId, enabled: true });

    const account = await makeAccount(orm, { coins: '10' });
    const { key } = await makeKey(orm, account.id);
    expect((await withKey(key).models.list({})).data.map((m) => m.id)).toContain(textId);
    expect((await chat(key, textId)).usage.cost_coins).toBeGreaterThan(0);

    const [entry] = await audit(textId);
    expect(entry).toMatchObject({ action: 'model.create', actor_type: 'admin_token', reason: 'new chat model', after: { enabled: true, definition: { id: textId } } });
    expect(entry!.actor_id).toMatch(/^adm_/);
  });

  it('refuses an invalid entry as the catalog file would, and an id that exists', async () => {
    expect(await refusal(internal().admin.models.create({ model: { ...textEntry(`${textId}-bad`), default_max_tokens: 5000 } }))).toMatchObject({
      code: 'invalid_request',
      param: 'model.default_max_tokens',
    });
    expect(await refusal(internal().admin.models.create({ model: { ...textEntry(`${textId}-bad`), provider: { name: 'nowhere', model: 'x' } } }))).toMatchObject({
      param: 'model.provider.name',
      reason: 'unknown_provider',
    });
    // Every route's provider is checked, and named by its place in the list.
    const { provider: _one, ...routed } = textEntry(`${textId}-bad`);
    expect(await refusal(internal().admin.models.create({ model: { ...routed, routes: [{ provider: 'local', model: 'echo' }, { provider: 'nowhere', model: 'x' }] } }))).toMatchObject({
      param: 'model.routes.1.provider',
      reason: 'unknown_provider',
    });
    expect(await refusal(internal().admin.models.create({ model: { ...textEntry(`${textId}-bad`), pricing: { input_per_million: '0.000001', output_per_million: 1 } } }))).toMatchObject({
      param: 'model.pricing.input_per_million',
    });
    expect(await refusal(internal().admin.models.create({ model: textEntry() }))).toMatchObject({ code: 'conflict', reason: 'model_exists' });
  });

  it('disables a model: new chats and jobs are refused as for an unknown model, a job already accepted runs on; enabling restores it', async () => {
    await internal().admin.models.create({ model: imageEntry });
    const account = await makeAccount(orm, { coins: '100' });
    const { key } = await makeKey(orm, account.id);
    const accepted = await withKey(key).generations.create({ model: imageId, prompt: 'a lighthouse' });

    expect(await refusal(asAdmin(viewer).admin.models.disable({ id: textId }))).toMatchObject({ code: 'forbidden' });
    await asAdmin(operator).admin.models.disable({ id: textId, reason: 'upstream outage' });
    await asAdmin(operator).admin.models.disable({ id: imageId });
    const unknown = await refusal(chat(key, `admin-test/${tag}/never`));
    expect(await refusal(chat(key, textId))).toMatchObject({ code: 'not_found', reason: 'model_not_found', message: unknown.message.replace('never', 'chat') });
    expect(await refusal(withKey(key).generations.create({ model: imageId, prompt: 'a lighthouse' }))).toMatchObject({ code: 'not_found', reason: 'model_not_found' });
    expect(await refusal(withKey(key).models.get({ id: textId }))).toMatchObject({ reason: 'model_not_found' });
    expect((await withKey(key).models.list({})).data.map((m) => m.id)).not.toContain(textId);
    expect(await internal().admin.models.list({ enabled: false })).toMatchObject({ data: expect.arrayContaining([expect.objectContaining({ id: textId, enabled: false })]) });
    // The workflow's first step still finds the model of the job accepted before.
    expect(await createInternalCaller(createContext(deps, { kind: 'internal' })).jobs.begin({ id: accepted.generation.id })).toMatchObject({ ended: false, missingModel: false });

    await asAdmin(operator).admin.models.enable({ id: textId });
    await asAdmin(operator).admin.models.enable({ id: imageId });
    expect((await chat(key, textId)).usage.cost_coins).toBeGreaterThan(0);
    expect((await withKey(key).generations.create({ model: imageId, prompt: 'a lighthouse' })).generation.status).toBe('queued');

    const entries = await audit(textId);
    expect(entries.filter((e) => e.action.startsWith('model.') && e.action !== 'model.create').map((e) => [e.action, e.before, e.after, e.reason])).toEqual([
      ['model.disable', { enabled: true, disabled_at: null }, { enabled: false, disabled_at: now.toISOString() }, 'upstream outage'],
      ['model.enable', { enabled: false, disabled_at: now.toISOString() }, { enabled: true, disabled_at: null }, null],
    ]);
  });

  it('prices from a future date: nothing changes until then, then chats and jobs pay them; earlier prices stay as history', async () => {
    const account = await makeAccount(orm, { coins: '100' });
    const { key } = await makeKey(orm, account.id);
    const start = now;
    const from = new Date(start.getTime() + 3_600_000);

    expect(await refusal(asAdmin(viewer).admin.models.setPrices({ id: textId, prices: { input_per_million: 4, output_per_million: 8 } }))).toMatchObject({ code: 'forbidden' });
    expect(
      await refusal(internal().admin.models.setPrices({ id: textId, prices: { input_per_million: 4, output_per_million: 8 }, effective_from: new Date(start.getTime() - 3_600_000).toISOString() })),
    ).toMatchObject({ code: 'invalid_request', param: 'effective_from', reason: 'in_the_past' });
    expect(await refusal(internal().admin.models.setPrices({ id: textId, prices: { input_per_million: 4 } }))).toMatchObject({ param: 'prices.output_per_million' });
    expect(await refusal(internal().admin.models.setPrices({ id: imageId, prices: { base: 10, per_unit: { steps: 1 } } }))).toMatchObject({ param: 'prices' });

    const scheduled = await asAdmin(operator).admin.models.setPrices({ id: textId, prices: { input_per_million: 4, output_per_million: 8 }, effective_from: from.toISOString(), reason: 'upstream raised prices' });
    expect(scheduled.price_schedule.at(-1)).toMatchObject({ effective_from: from.toISOString(), pricing: { input_per_million: 4 }, created_by: expect.stringMatching(/^admin_token:adm_/) });
    // From then the image's price also depends on its size.
    await internal().admin.models.setPrices({ id: imageId, prices: { base: 20, factors: { size: { '64': 1, '128': 2 } } }, effective_from: from.toISOString() });

    // Before the date: the base prices, for the list, a chat's charge and a job's price.
    expect((await withKey(key).models.get({ id: textId })).pricing).toMatchObject({ input: 1, output: 2 });
    const before = await chat(key, textId);
    expect(before.usage.cost_coins * 1e6).toBe(before.usage.prompt_tokens + 2 * before.usage.completion_tokens);
    expect(await capturedFor(orm, before.id)).toBe(BigInt(before.usage.prompt_tokens + 2 * before.usage.completion_tokens));
    expect((await withKey(key).generations.create({ model: imageId, prompt: 'x', settings: { size: 128 } })).generation.price_coins).toBe(5);

    // From the date (the cache was not reloaded: its TTL is a minute): the scheduled prices.
    now = new Date(from.getTime() + 1000);
    expect((await withKey(key).models.get({ id: textId })).pricing).toMatchObject({ input: 2, output: 4 });
    const after = await chat(key, textId);
    expect(await capturedFor(orm, after.id)).toBe(BigInt(2 * after.usage.prompt_tokens + 4 * after.usage.completion_tokens));
    expect((await withKey(key).generations.create({ model: imageId, prompt: 'x', settings: { size: 128 } })).generation.price_coins).toBe(20);

    const model = await internal().admin.models.get({ id: textId });
    expect(model.prices_in_force).toEqual({ effective_from: from.toISOString(), pricing: { input_per_million: 4, output_per_million: 8 } });
    expect(model.definition.pricing).toEqual({ input_per_million: 2, output_per_million: 4 });
    const entry = (await audit(textId)).find((e) => e.action === 'model.prices.schedule');
    expect(entry).toMatchObject({
      reason: 'upstream raised prices',
      before: { effective_from: from.toISOString(), pricing: { input_per_million: 2, output_per_million: 4 } },
      after: { effective_from: from.toISOString(), pricing: { input_per_million: 4, output_per_million: 8 } },
    });
  });

  it('cancels a change still to come, never one in force', async () => {
    const later = new Date(now.getTime() + 86_400_000);
    await internal().admin.models.setPrices({ id: textId, prices: { input_per_million: 6, output_per_million: 12 }, effective_from: later.toISOString() });
    const inForce = (await internal().admin.models.get({ id: textId })).prices_in_force.effective_from!;
    expect(await refusal(internal().admin.models.cancelPrices({ id: textId, effective_from: inForce }))).toMatchObject({ reason: 'price_change_started' });
    const cancelled = await internal().admin.models.cancelPrices({ id: textId, effective_from: later.toISOString(), reason: 'announced by mistake' });
    expect(cancelled.price_schedule.map((p) => p.effective_from)).not.toContain(later.toISOString());
    expect((await audit(textId)).at(-1)).toMatchObject({ action: 'model.prices.cancel', actor_type: 'internal', before: { pricing: { input_per_million: 6 } }, after: { pricing: { input_per_million: 4 } } });
  });

  it('updates fields of the entry, never id, type or prices, and keeps scheduled prices fitting the model', async () => {
    expect(await refusal(asAdmin(viewer).admin.models.update({ id: textId, changes: { description: 'x' } }))).toMatchObject({ code: 'forbidden' });
    expect(await refusal(internal().admin.models.update({ id: textId, changes: { type: 'image' } }))).toMatchObject({ param: 'changes.type' });
    expect(await refusal(internal().admin.models.update({ id: textId, changes: { pricing: { input_per_million: 1, output_per_million: 1 } } }))).toMatchObject({ param: 'changes.pricing' });
    expect(await refusal(internal().admin.models.update({ id: `admin-test/${tag}/never`, changes: { description: 'x' } }))).toMatchObject({ reason: 'model_not_found' });
    expect(await refusal(internal().admin.models.update({ id: textId, changes: { max_output_tokens: 10 } }))).toMatchObject({ param: 'changes.default_max_tokens' });

    const updated = await asAdmin(operator).admin.models.update({ id: textId, changes: { description: 'Now with a description', max_output_tokens: 500 }, reason: 'docs' });
    expect(updated.definition).toMatchObject({ description: 'Now with a description', max_output_tokens: 500, pricing: { input_per_million: 2 } });
    const account = await makeAccount(orm, { coins: '1' });
    const { key } = await makeKey(orm, account.id);
    expect(await withKey(key).models.get({ id: textId })).toMatchObject({ description: 'Now with a description', max_output_tokens: 500 });
    expect((await audit(textId)).at(-1)).toMatchObject({
      action: 'model.update',
      before: { description: null, max_output_tokens: 1000 },
      after: { description: 'Now with a description', max_output_tokens: 500 },
    });

    // A scheduled price factors by `size`: the setting cannot go while the price is in force or to come.
    expect(await refusal(internal().admin.models.update({ id: imageId, changes: { settings: {} } }))).toMatchObject({ param: 'changes', reason: 'scheduled_prices_conflict' });
  });
});

describe('catalog sync and start-up seeding, with operators’ changes', () => {
  let db: Awaited<ReturnType<typeof migratedFreshDatabase>>;
  let own: MikroORM;
  let ownDeps: CoreDeps;
  beforeAll(async () => {
    db = await migratedFreshDatabase();
    own = await openOrm({ url: db.url });
    const providers = await useTestCatalog(own, 'http://127.0.0.1:9/v1');
    ownDeps = { ...testDeps(own, { providers }), clock: () => now };
  });
  afterAll(async () => {
    await own.close();
    await db.drop();
  });
  const ops = () => createCaller(createContext(ownDeps, { kind: 'internal' }));
  const log = () => own.em.fork().execute<{ action: string; before: { models: Record<string, unknown> }; after: Record<string, unknown> }[]>(`select action, before, after from admin_audit_log where action = 'catalog.sync' order by id`);

  it('start-up keeps what operators did; a sync keeps enabled state and scheduled prices, applies the file’s price changes, and is audited', async () => {
    await ops().admin.models.create({ model: textEntry('ops/only') });
    await ops().admin.models.disable({ id: 'test/ok' });
    await ops().admin.models.setPrices({ id: 'test/local', prices: { input_per_million: 8, output_per_million: 8 } });
    await ops().admin.models.update({ id: 'test/no-usage', changes: { description: 'edited' } });

    // A restart seeds the file again: it only adds missing models.
    expect(await seedModels(own.em.fork(), validateCatalog(TEST_CATALOG, 50n))).toEqual([]);
    expect((await ops().admin.models.get({ id: 'test/no-usage' })).definition.description).toBe('edited');
    expect((await ops().admin.models.get({ id: 'ops/only' })).enabled).toBe(true);

    // The file changes test/local's prices and test/premium's name.
    now = new Date(now.getTime() + 1000);
    const file = {
      ...TEST_CATALOG,
      models: TEST_CATALOG.models.map((m) =>
        m.id === 'test/local' ? { ...m, pricing: { input_per_million: 6, output_per_million: 6 } } : m.id === 'test/premium' ? { ...m, name: 'Premium' } : m,
      ),
    };
    const result = await ops().catalog.sync({ catalog: file });
    expect(result).toMatchObject({ added: [], removed: ['ops/only'], repriced: ['test/local'] });
    expect(result.updated.sort()).toEqual(['test/local', 'test/no-usage', 'test/premium']);
    expect((await ops().admin.models.get({ id: 'test/ok' })).enabled).toBe(false);
    const local = await ops().admin.models.get({ id: 'test/local' });
    expect(local.prices_in_force.pricing).toEqual({ input_per_million: 6, output_per_million: 6 });
    expect(local.price_schedule.map((p) => p.pricing)).toEqual([{ input_per_million: 8, output_per_million: 8 }, { input_per_million: 6, output_per_million: 6 }]);

    const [entry] = await log();
    expect(entry!.before.models['ops/only']).toMatchObject({ id: 'ops/only' });
    expect(entry!.before.models['test/no-usage']).toMatchObject({ description: 'edited' });
    expect(entry!.after).toMatchObject({ removed: ['ops/only'], repriced: ['test/local'], models: { 'test/premium': { name: 'Premium' } } });

    // Unchanged file: nothing to do, operators' prices stay.
    await ops().admin.models.setPrices({ id: 'test/local', prices: { input_per_million: 10, output_per_million: 10 }, effective_from: new Date(now.getTime() + 10).toISOString() });
    now = new Date(now.getTime() + 1000);
    expect(await ops().catalog.sync({ catalog: file })).toMatchObject({ updated: [], repriced: [] });
    expect((await ops().admin.models.get({ id: 'test/local' })).prices_in_force.pricing).toEqual({ input_per_million: 10, output_per_million: 10 });
  });
});
