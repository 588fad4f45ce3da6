import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { runCli, type CliConnection } from '../../adapters/cli/mas.ts';
import type { MikroORM } from '@mikro-orm/postgresql';
import { createContext } from '../../core/context.ts';
import { createCaller } from '../../core/router.ts';
import { keyInfoSchema, updateKey } from '../../core/keys/keys.ts';
import { toCoreError } from '../../core/trpc.ts';
import { countChatTokens } from '../../core/chat/tokens.ts';
import { useTestCatalog } from '../support/catalog.ts';
import { makeAccount, openTestOrm, testDeps, walletInvariants } from '../support/db.ts';
import { bearer, getJson, startTestApi } from '../support/http.ts';
import { startFakeUpstream, type FakeUpstream } from '../fakes/openai-upstream.ts';

/**
 * Limits on a standard API key (issue 34, "Keys with limits"): a spend limit enforced inside the
 * reservation (no overspend under concurrency), an expiry date, and a list of allowed models,
 * through REST, MCP and core, on real PostgreSQL, against the fake OpenAI-compatible upstream.
 */
let orm: MikroORM;
let upstream: FakeUpstream;
let api: Awaited<ReturnType<typeof startTestApi>>;
let deps: ReturnType<typeof testDeps>;

beforeAll(async () => {
  orm = await openTestOrm(20);
  upstream = await startFakeUpstream();
  const providers = await useTestCatalog(orm, upstream.url);
  deps = testDeps(orm, { providers });
  api = await startTestApi(orm, { providers });
});
afterAll(async () => {
  await api.close();
  await upstream.close();
  await orm.close();
});

const operator = () => createCaller(createContext(deps, { kind: 'internal' }));
/** A key made by an operator with these limits, on a funded account. */
async function limitedKey(limits: Record<string, unknown>, coins = '10') {
  const account = await makeAccount(orm, { coins });
  const key = await operator().keys.create({ account: account.id, name: 'limited', ...limits });
  return { account, key };
}

const messages = [{ role: 'user' as const, content: 'Say hello' }];
/** The test catalog's prices: 1 micro-coin per input token, 2 per output token; the fake answers 5 tokens, and we ask for at most 20. */
const reserved = BigInt(countChatTokens(messages)) + 2n * 20n;
const charged = BigInt(countChatTokens(messages)) + 2n * 5n;
const coins = (micro: bigint) => Number(micro) / 1e6;
/** A chat of the test catalog. */
const chat = (key: string, body: Record<string, unknown> = {}) =>
  getJson(`${api.url}/api/v1/chat/completions`, {
    method: 'POST',
    headers: { ...bearer(key), 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'test/ok', messages, max_tokens: 20, ...body }),
  });

/** Everything the key was charged: its settled holds' captures. */
async function chargedTo(keyId: string): Promise<bigint> {
  const [row] = await orm.em.fork().execute<{ c: string }[]>(
    `select coalesce(sum(captured_micro), 0)::text as c from holds where metadata->>'key_id' = ? and status = 'settled'`,
    [keyId],
  );
  return BigInt(row!.c);
}

async function mcpClient(key: string): Promise<Client> {
  const client = new Client({ name: 'mas-test', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(`${api.url}/api/v1/mcp`), { requestInit: { headers: { Authorization: `Bearer ${key}` } } }));
  return client;
}
const toolError = (r: CallToolResult) => {
  expect(r.isError).toBe(true);
  const json = r.content.flatMap((c) => (c.type === 'text' && c.text.startsWith('{"error"') ? [c.text] : []))[0];
  return (JSON.parse(json!) as { error: { message: string; type: string; code: string } }).error;
};

describe('spend limit', () => {
  it('refuses the chat that would pass the limit with 402, charging nothing for it', async () => {
    // 100 micro-coins: three chats fit (each reserves about 50 and is charged about 20), the fourth would pass the limit.
    expect(3n * charged + reserved > 100n && 2n * charged + reserved <= 100n).toBe(true);
    const { account, key } = await limitedKey({ spend_limit_coins: '0.0001', spend_limit_period: 'total' });
    expect(key).toMatchObject({ spend_limit_coins: 0.0001, spend_limit_period: 'total', remaining_coins: 0.0001 });
    const answers = [];
    for (let i = 0; i < 4; i++) answers.push(await chat(key.key));
    expect(answers.map((a) => a.status)).toEqual([200, 200, 200, 402]);
    expect(answers[3]!.body.error).toMatchObject({ type: 'billing_error', code: 'key_spend_limit_reached', param: null });
    expect(answers[3]!.body.error.message).toMatch(/API key's spend limit/);
    expect(await chargedTo(key.id)).toBe(3n * charged);
    const state = await walletInvariants(orm, account.id);
    expect(state.balance.purchased).toBe(10_000_000n - 3n * charged);
    expect(state.openHolds).toBe(0n);

    // The key's view: what it spent and what is left.
    const info = await getJson(`${api.url}/api/v1/key`, { headers: bearer(key.key) });
    expect(info.status).toBe(200);
    expect(info.body).toMatchObject({ id: key.id, object: 'key', usage_coins: coins(3n * charged), total_spent_coins: coins(3n * charged), held_coins: 0, remaining_coins: coins(100n - 3n * charged) });
  });

  it('never overspends under 50 concurrent chat completions (official openai client)', async () => {
    const limit = 500n; // 0.0005 coins: fewer than 11 reservations fit at once, about 25 chats in all
    const { key } = await limitedKey({ spend_limit_coins: '0.0005' });
    const client = new OpenAI({ apiKey: key.key, baseURL: `${api.url}/api/v1`, maxRetries: 0 });
    const results = await Promise.allSettled(Array.from({ length: 50 }, () => client.chat.completions.create({ model: 'test/ok', messages, max_tokens: 20 })));
    const ok = results.filter((r) => r.status === 'fulfilled');
    const refused = results.filter((r): r is PromiseRejectedResult => r.status === 'rejected');
    expect(ok.length).toBeGreaterThan(0);
    expect(refused.length).toBeGreaterThan(0);
    for (const r of refused) {
      expect(r.reason).toBeInstanceOf(OpenAI.APIError);
      expect((r.reason as InstanceType<typeof OpenAI.APIError>).status).toBe(402);
      expect((r.reason as InstanceType<typeof OpenAI.APIError>).code).toBe('key_spend_limit_reached');
    }
    const total = await chargedTo(key.id);
    expect(total).toBe(charged * BigInt(ok.length));
    expect(total).toBeLessThanOrEqual(limit);
  });

  it('a monthly limit counts only this calendar month (UTC): last month’s spend does not count', async () => {
    const { account, key } = await limitedKey({ spend_limit_coins: '0.0001', spend_limit_period: 'monthly' });
    // 90 micro-coins settled on the last day of the previous month, as mas_end_hold leaves a hold.
    await orm.em.fork().execute(
      `insert into holds (id, account_id, amount_micro, from_subscription_micro, from_purchased_micro, status, captured_micro, reference, metadata, expires_at, created_at, ended_at)
       values (?, ?, 90, 0, 90, 'settled', 90, 'last-month', ?::jsonb, now(), date_trunc('month', now(), 'UTC') - interval '1 hour', date_trunc('month', now(), 'UTC') - interval '1 hour')`,
      [`hold_lastmonth_${key.id}`, account.id, JSON.stringify({ kind: 'chat', key_id: key.id })],
    );
    expect((await chat(key.key)).status).toBe(200);
    const info = keyInfoSchema.parse((await getJson(`${api.url}/api/v1/key`, { headers: bearer(key.key) })).body);
    expect(info).toMatchObject({ spend_limit_period: 'monthly', usage_coins: coins(charged), total_spent_coins: coins(90n + charged), remaining_coins: coins(100n - charged) });

    // The same spend made this month counts: the key is refused at once.
    const total = await limitedKey({ spend_limit_coins: '0.0001', spend_limit_period: 'monthly' });
    await orm.em.fork().execute(
      `insert into holds (id, account_id, amount_micro, from_subscription_micro, from_purchased_micro, status, captured_micro, reference, metadata, expires_at, ended_at)
       values (?, ?, 90, 0, 90, 'settled', 90, 'this-month', ?::jsonb, now(), now())`,
      [`hold_thismonth_${total.key.id}`, total.account.id, JSON.stringify({ kind: 'chat', key_id: total.key.id })],
    );
    expect((await chat(total.key.key)).status).toBe(402);
  });

  it('an owner raises the limit and the key works again; removing it lifts it', async () => {
    const { key } = await limitedKey({ spend_limit_coins: '0.00005' });
    expect((await chat(key.key)).status).toBe(200);
    expect((await chat(key.key)).status).toBe(402);
    // The owner's update (account.keys.update calls this with the session's account).
    const [row] = await orm.em.fork().execute<{ account_id: string }[]>('select account_id from api_keys where id = ?', [key.id]);
    const checks = { now: new Date(), knownModel: () => Promise.resolve(true) };
    expect(await updateKey(orm.em.fork(), row!.account_id, { id: key.id, spend_limit_coins: '1' }, checks)).toMatchObject({ spend_limit_coins: 1, spend_limit_period: 'total' });
    expect((await chat(key.key)).status).toBe(200);
    expect(await updateKey(orm.em.fork(), row!.account_id, { id: key.id, spend_limit_coins: null }, checks)).toMatchObject({ spend_limit_coins: null, spend_limit_period: null, remaining_coins: null });
    expect((await chat(key.key)).status).toBe(200);
    // Another account's key is unknown to it.
    const stranger = await makeAccount(orm);
    await expect(updateKey(orm.em.fork(), stranger.id, { id: key.id, spend_limit_coins: '5' }, checks)).rejects.toMatchObject({ code: 'not_found' });
  });
});

describe('expiry', () => {
  it('an expired key gets 401 on REST and at the MCP door, saying it expired', async () => {
    const { key } = await limitedKey({ expires_at: new Date(Date.now() + 3_600_000).toISOString() });
    expect((await getJson(`${api.url}/api/v1/balance`, { headers: bearer(key.key) })).status).toBe(200);
    await orm.em.fork().execute(`update api_keys set expires_at = now() - interval '1 second' where id = ?`, [key.id]);

    const rest = await chat(key.key);
    expect(rest.status).toBe(401);
    expect(rest.body.error).toMatchObject({ type: 'authentication_error', code: 'api_key_expired' });
    expect(rest.body.error.message).toMatch(/expired/);
    expect((await getJson(`${api.url}/api/v1/key`, { headers: bearer(key.key) })).status).toBe(401);

    const mcp = await fetch(`${api.url}/api/v1/mcp`, {
      method: 'POST',
      headers: { ...bearer(key.key), 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 't', version: '1' } } }),
    });
    expect(mcp.status).toBe(401);
    expect(((await mcp.json()) as { error: { code: string; message: string } }).error).toMatchObject({ code: 'api_key_expired', message: expect.stringMatching(/expired/) });
    await expect(mcpClient(key.key)).rejects.toThrow();
  });
});

describe('allowed models', () => {
  it('a model not on the key’s list gets 403 on chat, responses and generations, and an isError on MCP', async () => {
    const { key } = await limitedKey({ allowed_models: ['test/ok'] });
    expect((await chat(key.key)).status).toBe(200);

    const refused = await chat(key.key, { model: 'test/plain' });
    expect(refused.status).toBe(403);
    expect(refused.body.error).toMatchObject({ type: 'permission_error', code: 'model_not_allowed', param: 'model' });
    expect(refused.body.error.message).toMatch(/test\/plain/);

    const responses = await getJson(`${api.url}/api/v1/responses`, {
      method: 'POST',
      headers: { ...bearer(key.key), 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'test/plain', input: 'hello' }),
    });
    expect(responses.status).toBe(403);

    const generation = await getJson(`${api.url}/api/v1/generations`, {
      method: 'POST',
      headers: { ...bearer(key.key), 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'test/image', prompt: 'a lighthouse' }),
    });
    expect(generation.status).toBe(403);
    expect(generation.body.error).toMatchObject({ code: 'model_not_allowed', param: 'model' });

    const client = await mcpClient(key.key);
    try {
      const tool = (await client.callTool({ name: 'chat', arguments: { model: 'test/plain', prompt: 'hello', max_tokens: 20 } })) as CallToolResult;
      expect(toolError(tool)).toMatchObject({ type: 'permission_error', code: 'model_not_allowed' });
      const allowed = (await client.callTool({ name: 'chat', arguments: { model: 'test/ok', prompt: 'hello', max_tokens: 20 } })) as CallToolResult;
      expect(allowed.isError).toBeFalsy();
    } finally {
      await client.close();
    }
  });

  it('an MCP chat past the spend limit is an isError result with the 402 reason', async () => {
    const { key } = await limitedKey({ spend_limit_coins: '0.00005' });
    const client = await mcpClient(key.key);
    try {
      const first = (await client.callTool({ name: 'chat', arguments: { model: 'test/ok', prompt: 'Say hello', max_tokens: 20 } })) as CallToolResult;
      expect(first.isError).toBeFalsy();
      const second = (await client.callTool({ name: 'chat', arguments: { model: 'test/ok', prompt: 'Say hello', max_tokens: 20 } })) as CallToolResult;
      expect(toolError(second)).toMatchObject({ type: 'billing_error', code: 'key_spend_limit_reached' });
    } finally {
      await client.close();
    }
  });
});

describe('GET /api/v1/key and validation', () => {
  it('shows the calling key: limits, usage, remaining, expiry and models', async () => {
    const expires = new Date(Date.now() + 86_400_000).toISOString();
    const { key } = await limitedKey({ spend_limit_coins: '2.5', spend_limit_period: 'monthly', expires_at: expires, allowed_models: ['test/ok', 'test/image', 'test/ok'] });
    const res = await getJson(`${api.url}/api/v1/key`, { headers: bearer(key.key) });
    expect(res.status).toBe(200);
    expect(keyInfoSchema.parse(res.body)).toEqual({
      id: key.id,
      object: 'key',
      name: 'limited',
      prefix: key.prefix,
      created_at: key.created_at,
      spend_limit_coins: 2.5,
      spend_limit_period: 'monthly',
      expires_at: expires,
      allowed_models: ['test/image', 'test/ok'],
      usage_coins: 0,
      total_spent_coins: 0,
      held_coins: 0,
      remaining_coins: 2.5,
    });
    expect(JSON.stringify(res.body)).not.toContain(key.key);
    const plain = await makeAccount(orm);
    const unlimited = await operator().keys.create({ account: plain.id });
    expect((await getJson(`${api.url}/api/v1/key`, { headers: bearer(unlimited.key) })).body).toMatchObject({ spend_limit_coins: null, remaining_coins: null, expires_at: null, allowed_models: null });
  });

  it.each([
    [{ spend_limit_coins: '0' }, 'spend_limit_coins'],
    [{ spend_limit_coins: '-1' }, 'spend_limit_coins'],
    [{ spend_limit_coins: 'lots' }, 'spend_limit_coins'],
    [{ spend_limit_coins: '1.0000001' }, 'spend_limit_coins'],
    [{ spend_limit_period: 'weekly', spend_limit_coins: '1' }, 'spend_limit_period'],
    [{ spend_limit_period: 'monthly' }, 'spend_limit_period'],
    [{ expires_at: '2020-01-01' }, 'expires_at'],
    [{ expires_at: 'tomorrow' }, 'expires_at'],
    [{ expires_at: '2027-02-30' }, 'expires_at'],
    [{ allowed_models: ['test/ok', 'no/such-model'] }, 'allowed_models.1'],
  ])('refuses %j with 400 naming %s', async (input, param) => {
    const account = await makeAccount(orm);
    const err = await operator()
      .keys.create({ account: account.id, ...(input as Record<string, string>) })
      .then(() => undefined, (e: unknown) => toCoreError(e));
    expect(err).toMatchObject({ code: 'invalid_request', param });
    expect((await operator().keys.list({ account: account.id })).data).toHaveLength(0);
  });
});

describe('mas key create', () => {
  it('makes a key with the limits its usage names: --spend-limit-coins, --spend-limit-period, --expires-at, --allowed-models', async () => {
    const account = await makeAccount(orm);
    const connection: CliConnection = { core: operator(), readCatalogFile: () => Promise.resolve({}), publicBaseUrl: 'https://mas.example.com', close: () => Promise.resolve() };
    let out = '';
    const write = vi.spyOn(process.stdout, 'write').mockImplementation((chunk: string | Uint8Array) => {
      out += String(chunk);
      return true;
    });
    try {
      await runCli(
        ['key', 'create', '--account', account.email, '--name', 'ci', '--spend-limit-coins', '12.5', '--spend-limit-period', 'monthly', '--expires-at', '2099-01-31', '--allowed-models', 'test/ok, test/image', '--json'],
        () => Promise.resolve(connection),
      );
    } finally {
      write.mockRestore();
    }
    const made = JSON.parse(out) as { id: string; key: string };
    const [listed] = (await operator().keys.list({ account: account.id })).data;
    expect(listed).toMatchObject({
      id: made.id,
      name: 'ci',
      spend_limit_coins: 12.5,
      spend_limit_period: 'monthly',
      expires_at: '2099-01-31T23:59:59.999Z',
      allowed_models: ['test/image', 'test/ok'],
    });
  });
});
