import { randomBytes } from 'node:crypto';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createContext } from '../../core/context.ts';
import { createCaller } from '../../core/router.ts';
import { makeAccount, makeKey } from '../support/db.ts';
import { bearer, getJson } from '../support/http.ts';
import { startJobHarness, type JobHarness } from '../support/jobs.ts';
import { refusal } from '../support/refusal.ts';

/**
 * A setting value the model's deadline can never meet (a `delay_ms` of 400 s on a model that
 * must finish within 300 s) is refused at submit, by core, on every surface: REST answers 400
 * naming the setting, MCP's generate tool an isError result; nothing is reserved, no job made.
 */
let h: JobHarness;
/** A model stored before the catalog refused such bounds: its setting still allows more than its deadline. */
const legacy = `test/legacy-slow-${randomBytes(3).toString('hex')}`;

beforeAll(async () => {
  // No worker: nothing here may start a job.
  h = await startJobHarness({ worker: false });
  const definition = {
    id: legacy,
    name: 'Stored with a delay its deadline cannot meet',
    type: 'image',
    generation_types: ['text-to-image'],
    provider: { name: 'local', model: 'image' },
    settings: { delay_ms: { type: 'integer', min: 0, max: 600000, default: 0, job_time: 'ms' }, size: { type: 'enum', options: [64], default: 64 } },
    pricing: { base: 4 },
    deadline_seconds: 300,
  };
  await h.orm.em.fork().execute('insert into models (id, type, definition) values (?, ?, ?::jsonb)', [legacy, 'image', JSON.stringify(definition)]);
});
afterAll(async () => {
  await h.orm.em.fork().execute('delete from models where id = ?', [legacy]);
  await h.close();
});

async function customer() {
  const account = await makeAccount(h.orm, { coins: '100' });
  const { key } = await makeKey(h.orm, account.id);
  return { account, key };
}

/** Nothing moved: the whole balance spendable, no hold, no job, only the top-up in the ledger. */
async function expectUntouched(accountId: string) {
  const em = h.orm.em.fork();
  const [wallet] = await em.execute<{ purchased: string; held: string }[]>('select purchased_micro::text as purchased, held_micro::text as held from wallets where account_id = ?', [accountId]);
  expect(wallet).toEqual({ purchased: String(100 * 1e6), held: '0' });
  const [counts] = await em.execute<{ jobs: number; holds: number; entries: number }[]>(
    `select (select count(*)::int from generations where account_id = ?) as jobs,
            (select count(*)::int from holds where account_id = ?) as holds,
            (select count(*)::int from ledger_entries where account_id = ?) as entries`,
    [accountId, accountId, accountId],
  );
  expect(counts).toEqual({ jobs: 0, holds: 0, entries: 1 });
}

describe('a setting the deadline can never meet', () => {
  it('REST: 400 naming settings.delay_ms, nothing reserved, no job', async () => {
    const { account, key } = await customer();
    const post = (body: unknown) =>
      getJson(`${h.base}/api/v1/generations`, { method: 'POST', headers: { ...bearer(key), 'content-type': 'application/json' }, body: JSON.stringify(body) });
    // The request, on the shipped demo model (deadline 300 s).
    const demo = await post({ model: 'mas/image-demo', prompt: 'x', settings: { delay_ms: 400000 } });
    expect(demo.status, JSON.stringify(demo.body)).toBe(400);
    expect(demo.body).toEqual({ error: { type: 'invalid_request_error', param: 'settings.delay_ms', code: 'invalid_value', message: expect.stringContaining("'settings.delay_ms'") } });
    // A model whose stored bound allows it: the deadline still refuses it, and says why.
    const stored = await post({ model: legacy, prompt: 'x', settings: { delay_ms: 400000 } });
    expect(stored.status, JSON.stringify(stored.body)).toBe(400);
    expect(stored.body.error).toMatchObject({ type: 'invalid_request_error', code: 'invalid_value' });
    expect(stored.body.error.message).toMatch(/^Invalid value for 'settings\.delay_ms': .*deadline of 300 s.*below 300000/);
    // Exactly the deadline is never met either.
    expect((await post({ model: legacy, prompt: 'x', settings: { delay_ms: 300000 } })).status).toBe(400);
    await expectUntouched(account.id);
  });

  it('core refuses it with param settings.delay_ms, whoever calls', async () => {
    const { account, key } = await customer();
    const core = createCaller(createContext(h.deps, { kind: 'bearer', token: key }));
    expect(await refusal(core.generations.create({ model: legacy, prompt: 'x', settings: { delay_ms: 400000 } }))).toMatchObject({
      code: 'invalid_request',
      reason: 'invalid_value',
      param: 'settings.delay_ms',
    });
    await expectUntouched(account.id);
  });

  it('MCP: the generate tool answers isError, nothing reserved', async () => {
    const { account, key } = await customer();
    const client = new Client({ name: 'mas-test', version: '1.0.0' });
    await client.connect(new StreamableHTTPClientTransport(new URL(`${h.base}/api/v1/mcp`), { requestInit: { headers: { Authorization: `Bearer ${key}` } } }));
    try {
      for (const model of ['mas/image-demo', legacy]) {
        const result = (await client.callTool({ name: 'generate', arguments: { model, prompt: 'x', settings: { delay_ms: 400000 }, wait_seconds: 0 } })) as CallToolResult;
        expect(result.isError, JSON.stringify(result)).toBe(true);
        const json = result.content.flatMap((c) => (c.type === 'text' && c.text.startsWith('{"error"') ? [c.text] : []))[0];
        expect(JSON.parse(json!)).toMatchObject({ error: { type: 'invalid_request_error', code: 'invalid_value', message: expect.stringContaining('settings.delay_ms') }, status: 400 });
      }
    } finally {
      await client.close();
    }
    await expectUntouched(account.id);
  });

  it("an operator's new model is checked as the catalog file's entries are", async () => {
    const admin = createCaller(createContext(h.deps, { kind: 'internal' }));
    const id = `test/admin-slow-${randomBytes(3).toString('hex')}`;
    const entry = (max: number) => ({
      id,
      name: 'Slow',
      type: 'image',
      generation_types: ['text-to-image'],
      provider: { name: 'local', model: 'image' },
      settings: { delay_ms: { type: 'integer', min: 0, max, default: 0, job_time: 'ms' } },
      pricing: { base: 4 },
      deadline_seconds: 300,
    });
    const refused = await refusal(admin.admin.models.create({ model: entry(600000), reason: 'test' }));
    expect(refused).toMatchObject({ code: 'invalid_request', param: 'model.settings.delay_ms.max' });
    expect(refused.message).toMatch(/'delay_ms'.*deadline of 300 s/);
    await admin.admin.models.create({ model: entry(240000), reason: 'test' });
    await h.orm.em.fork().execute('delete from models where id = ?', [id]);
  });

  it('a value within the deadline is still accepted', async () => {
    const { key } = await customer();
    const core = createCaller(createContext(h.deps, { kind: 'bearer', token: key }));
    // Accepted and reserved (no worker runs here: the job stays queued, then is canceled and refunded).
    const { generation } = await core.generations.create({ model: legacy, prompt: 'x', settings: { delay_ms: 299000 } });
    expect(generation.status).toBe('queued');
    await core.generations.cancel({ id: generation.id });
  });
});
