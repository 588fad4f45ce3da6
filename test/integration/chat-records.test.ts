import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type { MikroORM } from '@mikro-orm/postgresql';
import { countChatTokens } from '../../core/chat/tokens.ts';
import { useTestCatalog } from '../support/catalog.ts';
import { makeAccount, makeKey, openTestOrm, testDeps, walletInvariants } from '../support/db.ts';
import { bearer, createTestApp, getJson, serve } from '../support/http.ts';
import { capturedFor, expectSettledWallet } from '../support/ledger.ts';
import { startFakeUpstream, type FakeUpstream } from '../fakes/openai-upstream.ts';

/**
 * The cost afterwards: GET /chat/completions/{id} gives a past completion's model, usage, cost
 * and duration to the account that made it, the same as its answer said and its wallet lost,
 * streamed or not, through REST or MCP; to anyone else, the 404 of a made-up id.
 */
let orm: MikroORM;
let upstream: FakeUpstream;
let served: Awaited<ReturnType<typeof serve>>;

beforeAll(async () => {
  orm = await openTestOrm();
  upstream = await startFakeUpstream();
  const providers = await useTestCatalog(orm, upstream.url);
  served = await serve(createTestApp({ deps: testDeps(orm, { providers }) }));
});
afterAll(async () => {
  await served.close();
  await upstream.close();
  await orm.close();
});

const messages = [{ role: 'user' as const, content: 'Say hello' }];
const promptTokens = countChatTokens(messages);
/** API prices of the test catalog: 1 micro-coin per input token, 2 per output token. */
const cost = (input: number, output: number) => BigInt(input) + 2n * BigInt(output);

async function customer(coins = '10') {
  const account = await makeAccount(orm, { coins });
  const { key } = await makeKey(orm, account.id);
  const client = new OpenAI({ apiKey: key, baseURL: `${served.base}/api/v1`, maxRetries: 0 });
  return { account, key, client };
}
const spent = async (accountId: string, before: bigint) => before - (await expectSettledWallet(orm, accountId)).balance.purchased;
const record = (key: string, id: string) => getJson(`${served.base}/api/v1/chat/completions/${encodeURIComponent(id)}`, { headers: bearer(key) });

describe('GET /chat/completions/{id}', () => {
  it('a non-streamed completion: the record has the answer’s usage and cost, which is what the wallet lost', async () => {
    const { account, key, client } = await customer();
    const before = (await walletInvariants(orm, account.id)).balance.purchased;
    const completion = await client.chat.completions.create({ model: 'test/ok', messages, max_tokens: 50 });
    const lost = await spent(account.id, before);
    expect(lost).toBe(cost(promptTokens, 5));

    const res = await record(key, completion.id);
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body).toEqual({
      id: completion.id,
      object: 'chat.completion.record',
      created: completion.created,
      model: 'test/ok',
      finish_reason: 'stop',
      usage: completion.usage,
      duration_ms: expect.any(Number),
    });
    expect(res.body.usage.cost_coins).toBe(Number(lost) / 1e6);
    expect(res.body.duration_ms).toBeGreaterThanOrEqual(0);
  });

  it('a streamed completion: the record has the last chunk’s usage, equal to the balance drop', async () => {
    const { account, key, client } = await customer();
    const before = (await walletInvariants(orm, account.id)).balance.purchased;
    const stream = await client.chat.completions.create({ model: 'test/ok', messages, stream: true, stream_options: { include_usage: true } });
    let id = '';
    let usage: unknown;
    for await (const chunk of stream) {
      id = chunk.id;
      if (chunk.usage) usage = chunk.usage;
    }
    const lost = await spent(account.id, before);
    const res = await record(key, id);
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ id, object: 'chat.completion.record', model: 'test/ok', finish_reason: 'stop', usage });
    expect(res.body.usage.cost_coins).toBe(Number(lost) / 1e6);
    expect(lost).toBe(await capturedFor(orm, id));
  });

  it('another account’s id and a made-up id get the same 404, body for body', async () => {
    const owner = await customer();
    const other = await customer();
    const completion = await owner.client.chat.completions.create({ model: 'test/ok', messages });
    const theirs = await record(other.key, completion.id);
    const madeUp = await record(other.key, `chatcmpl-${'x'.repeat(24)}`);
    expect(theirs.status).toBe(404);
    expect(madeUp.status).toBe(404);
    expect(theirs.body).toEqual(madeUp.body);
    expect(theirs.body).toEqual({ error: { message: expect.any(String), type: 'not_found_error', param: null, code: 'completion_not_found' } });
    // And the SDK's generic GET sees a NotFoundError, not HTML.
    await expect(other.client.get(`/chat/completions/${completion.id}`)).rejects.toBeInstanceOf(OpenAI.NotFoundError);
    expect((await record(owner.key, completion.id)).status).toBe(200);
  });

  it('needs a key, and an id that is too long is a 400 naming it', async () => {
    const { key } = await customer();
    expect((await getJson(`${served.base}/api/v1/chat/completions/chatcmpl-abc`)).status).toBe(401);
    const long = await record(key, 'x'.repeat(101));
    expect(long.status).toBe(400);
    expect(long.body.error).toMatchObject({ code: 'invalid_value', param: 'id' });
  });

  it('a client that goes away mid-stream: recorded with what it was charged, and no finish reason', async () => {
    const { account, key } = await customer();
    const before = (await walletInvariants(orm, account.id)).balance.purchased;
    const controller = new AbortController();
    const res = await fetch(`${served.base}/api/v1/chat/completions`, {
      method: 'POST',
      signal: controller.signal,
      headers: { ...bearer(key), 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'test/slow', messages, stream: true, max_tokens: 100 }),
    });
    const reader = res.body!.getReader();
    let seen = '';
    while (seen.split('"content":" word"').length < 3) {
      const { done, value } = await reader.read();
      if (done) throw new Error(`stream ended early: ${seen}`);
      seen += new TextDecoder().decode(value);
    }
    const id = /"id":"(chatcmpl-[^"]+)"/.exec(seen)![1]!;
    controller.abort();
    await vi.waitFor(async () => expect((await walletInvariants(orm, account.id)).openHolds).toBe(0n));
    const charged = await capturedFor(orm, id);
    expect(charged).toBeGreaterThan(0n);
    const got = await vi.waitFor(async () => {
      const r = await record(key, id);
      expect(r.status).toBe(200);
      return r;
    });
    expect(got.body).toMatchObject({ id, finish_reason: null, usage: { prompt_tokens: promptTokens, cost_coins: Number(charged) / 1e6 } });
    // The tokens shown price to the charge, as in an answer.
    expect(cost(got.body.usage.prompt_tokens, got.body.usage.completion_tokens)).toBe(charged);
    expect(await spent(account.id, before)).toBe(charged);
  });

  it('a stream the upstream breaks after output began: recorded with what was delivered; one that failed before any output has no record', async () => {
    const { account, key } = await customer();
    const before = (await walletInvariants(orm, account.id)).balance.purchased;
    const res = await fetch(`${served.base}/api/v1/chat/completions`, {
      method: 'POST',
      headers: { ...bearer(key), 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'test/fail-mid', messages, stream: true }),
    });
    const text = await res.text();
    const id = /"id":"(chatcmpl-[^"]+)"/.exec(text)![1]!;
    const charged = await capturedFor(orm, id);
    expect(await spent(account.id, before)).toBe(charged);
    const got = await record(key, id);
    expect(got.body).toMatchObject({ id, finish_reason: null, usage: { cost_coins: Number(charged) / 1e6 } });
    expect(cost(got.body.usage.prompt_tokens, got.body.usage.completion_tokens)).toBe(charged);

    // Not streamed, the same failure charges nothing and leaves nothing to read.
    const plain = await getJson(`${served.base}/api/v1/chat/completions`, {
      method: 'POST',
      headers: { ...bearer(key), 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'test/fail-mid', messages }),
    });
    expect(plain.status).toBe(502);
    const [row] = await orm.em.fork().execute<{ n: string }[]>('select count(*)::text as n from completion_records where account_id = ?', [account.id]);
    expect(row!.n).toBe('1');
  });

  it('many completions at once: each recorded, each with its own usage', async () => {
    const clients = await Promise.all(Array.from({ length: 30 }, () => customer()));
    // Short prompts of different lengths: each is counted (and charged) differently.
    const answers = await Promise.all(clients.map((c, i) => c.client.chat.completions.create({ model: 'test/ok', messages: [{ role: 'user', content: 'hi'.repeat(i % 3 + 1) }], max_tokens: 50 })));
    for (const [i, answer] of answers.entries()) {
      const got = await record(clients[i]!.key, answer.id);
      expect(got.body).toMatchObject({ id: answer.id, usage: answer.usage });
      expect(got.body.usage.cost_coins).toBe(Number(await capturedFor(orm, answer.id)) / 1e6);
    }
  });

  it('the MCP chat tool goes through the same core: its completion is recorded too', async () => {
    const { account, key } = await customer();
    const before = (await walletInvariants(orm, account.id)).balance.purchased;
    const mcp = new Client({ name: 'mas-test', version: '1.0.0' });
    await mcp.connect(new StreamableHTTPClientTransport(new URL(`${served.base}/api/v1/mcp`), { requestInit: { headers: { Authorization: `Bearer ${key}` } } }));
    try {
      const result = await mcp.callTool({ name: 'chat', arguments: { model: 'test/ok', prompt: 'Say hello' } });
      const answer = result.structuredContent as { id: string; usage: Record<string, number>; finish_reason: string };
      const lost = await spent(account.id, before);
      const got = await record(key, answer.id);
      expect(got.status).toBe(200);
      expect(got.body).toMatchObject({ id: answer.id, finish_reason: answer.finish_reason, usage: answer.usage });
      expect(got.body.usage.cost_coins).toBe(Number(lost) / 1e6);
    } finally {
      await mcp.close();
    }
  });

  it('a failed write of the record changes neither the answer nor the charge', async () => {
    const { account, key, client } = await customer();
    const before = (await walletInvariants(orm, account.id)).balance.purchased;
    // The record cannot be written while its table refuses inserts for this account.
    await orm.em.fork().execute(`create or replace function test_refuse_record() returns trigger language plpgsql as $$ begin raise exception 'refused'; end $$`);
    await orm.em.fork().execute(
      `create trigger test_refuse_record before insert on completion_records for each row when (new.account_id = '${account.id}') execute function test_refuse_record()`,
    );
    const neighbours = await Promise.all(Array.from({ length: 5 }, () => customer()));
    try {
      // Records are written in batches: the refused one must not take its neighbours' with it.
      const [completion, ...others] = await Promise.all([client, ...neighbours.map((n) => n.client)].map((c) => c.chat.completions.create({ model: 'test/ok', messages })));
      expect(completion!.usage).toMatchObject({ prompt_tokens: promptTokens, completion_tokens: 5 });
      expect(await spent(account.id, before)).toBe(cost(promptTokens, 5));
      expect((await record(key, completion!.id)).status).toBe(404);
      for (const [i, other] of others.entries()) expect((await record(neighbours[i]!.key, other.id)).body.usage).toEqual(other.usage);
    } finally {
      await orm.em.fork().execute('drop trigger test_refuse_record on completion_records');
    }
  });
});
