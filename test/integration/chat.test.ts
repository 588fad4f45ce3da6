import OpenAI from 'openai';
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import type { MikroORM } from '@mikro-orm/postgresql';
import { parseCoins } from '../../core/money/coins.ts';
import { countChatTokens } from '../../core/chat/tokens.ts';
import { seedModels, validateCatalog } from '../../core/catalog/catalog.ts';
import { TEST_CATALOG, useTestCatalog } from '../support/catalog.ts';
import { makeAccount, makeKey, openTestOrm, walletInvariants } from '../support/db.ts';
import { bearer, getJson, startTestApi } from '../support/http.ts';
import { capturedFor, expectSettledWallet } from '../support/ledger.ts';
import { startFakeUpstream, type FakeUpstream } from '../fakes/openai-upstream.ts';

/**
 * Chat completions through the real REST app over HTTP, driven by the official `openai`
 * client where it applies, against a fake upstream that speaks the OpenAI protocol.
 */
let orm: MikroORM;
let upstream: FakeUpstream;
let api: Awaited<ReturnType<typeof startTestApi>>;

beforeAll(async () => {
  orm = await openTestOrm();
  upstream = await startFakeUpstream();
  const providers = await useTestCatalog(orm, upstream.url);
  api = await startTestApi(orm, { providers });
});
afterAll(async () => {
  await api.close();
  await upstream.close();
  await orm.close();
});

let account: { id: string };
let key: string;
let client: OpenAI;
beforeEach(async () => {
  account = await makeAccount(orm, { coins: '10' });
  key = (await makeKey(orm, account.id)).key;
  client = new OpenAI({ apiKey: key, baseURL: `${api.url}/api/v1`, maxRetries: 0 });
});

const messages = [{ role: 'user' as const, content: 'Say hello' }];
const promptTokens = countChatTokens(messages);
/** API prices of the test catalog: 1 micro-coin per input token, 2 per output token. */
const cost = (input: number, output: number) => BigInt(input) + 2n * BigInt(output);

function post(body: unknown, headers: Record<string, string> = {}) {
  return getJson(`${api.url}/api/v1/chat/completions`, {
    method: 'POST',
    headers: { ...bearer(key), 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
}

describe('the official openai client, unchanged', () => {
  it('lists models', async () => {
    const page = await client.models.list();
    const ids = page.data.map((m) => m.id);
    expect(ids).toEqual(expect.arrayContaining(['test/ok', 'test/vendor/deep/model', 'test/image']));
    expect(page.data.find((m) => m.id === 'test/ok')).toMatchObject({ object: 'model', owned_by: 'test' });
  });

  it('creates a completion whose usage.cost_coins equals the API usage in the ledger', async () => {
    const completion = await client.chat.completions.create({ model: 'test/ok', messages, max_tokens: 50 });
    expect(completion.choices[0]!.message.content).toBe('Hello from upstream');
    // The fake reports 11 prompt tokens; usage is clamped to what we counted and reserved.
    expect(completion.usage).toMatchObject({ prompt_tokens: promptTokens, completion_tokens: 5, total_tokens: promptTokens + 5 });
    const charged = await capturedFor(orm, completion.id);
    expect(charged).toBe(cost(promptTokens, 5));
    expect((completion.usage as unknown as { cost_coins: number }).cost_coins).toBe(Number(charged) / 1e6);
    const state = await expectSettledWallet(orm, account.id);
    expect(state.balance.purchased).toBe(parseCoins('10') - charged);
    // The upstream was asked for a stream with usage, and for our output limit.
    expect(upstream.requests.at(-1)).toMatchObject({ model: 'ok', max_tokens: 50, stream: true, stream_options: { include_usage: true } });
  });

  it('streams chunks and puts usage with cost_coins in the last chunk', async () => {
    const stream = await client.chat.completions.create({ model: 'test/ok', messages, stream: true });
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    expect(chunks.map((c) => c.choices[0]?.delta.content ?? '').join('')).toBe('Hello from upstream');
    expect(chunks[0]!.choices[0]!.delta.role).toBe('assistant');
    const last = chunks.at(-1)!;
    expect(last.choices[0]!.finish_reason).toBe('stop');
    const usage = last.usage as unknown as { cost_coins: number; completion_tokens: number };
    expect(usage.completion_tokens).toBe(5);
    expect(usage.cost_coins).toBe(Number(await capturedFor(orm, last.id)) / 1e6);
    await expectSettledWallet(orm, account.id);
  });

  it('honours stream_options.include_usage with a final usage chunk without choices', async () => {
    const stream = await client.chat.completions.create({ model: 'test/ok', messages, stream: true, stream_options: { include_usage: true } });
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    const last = chunks.at(-1)!;
    expect(last.choices).toEqual([]);
    expect(last.usage).toMatchObject({ prompt_tokens: promptTokens, completion_tokens: 5 });
    expect(chunks.at(-2)!.choices[0]!.finish_reason).toBe('stop');
  });

  it('reuses connections to the upstream (keep-alive)', async () => {
    await client.chat.completions.create({ model: 'test/ok', messages });
    const before = upstream.connections;
    for (let i = 0; i < 5; i++) await client.chat.completions.create({ model: 'test/ok', messages });
    expect(upstream.connections).toBe(before);
  });

  it('surfaces our errors as typed client errors', async () => {
    await expect(client.chat.completions.create({ model: 'nope/nothing', messages })).rejects.toMatchObject({ status: 404, code: 'model_not_found' });
    await expect(client.chat.completions.create({ model: 'test/error', messages })).rejects.toMatchObject({ status: 502 });
  });
});

describe('billing edge cases: nothing left open, the ledger always sums', () => {
  it('upstream error before any output: 502, nothing charged', async () => {
    const res = await post({ model: 'test/error', messages });
    expect(res.status).toBe(502);
    expect(res.body.error).toMatchObject({ type: 'upstream_error', code: 'upstream_error' });
    // In our words: the upstream's own message goes to the operator's log, not to the customer.
    expect(res.body.error.message).toBe("The provider of 'test/error' failed: it answered with an error (500)");
    expect(res.body.error.message).not.toContain('the upstream exploded');
    const state = await expectSettledWallet(orm, account.id);
    expect(state.balance.purchased).toBe(parseCoins('10'));
  });

  it('upstream timeout: 504, nothing charged, streaming or not', async () => {
    for (const stream of [false, true]) {
      const res = await post({ model: 'test/hang', messages, stream });
      expect(res.status).toBe(504);
      expect(res.body.error.code).toBe('upstream_timeout');
    }
    expect((await expectSettledWallet(orm, account.id)).balance.purchased).toBe(parseCoins('10'));
  });

  it('a failure after streaming began ends the stream with an error event; only what was delivered is charged', async () => {
    for (const model of ['test/stall', 'test/fail-mid']) {
      const res = await fetch(`${api.url}/api/v1/chat/completions`, {
        method: 'POST',
        headers: { ...bearer(key), 'content-type': 'application/json' },
        body: JSON.stringify({ model, messages, stream: true }),
      });
      expect(res.status).toBe(200);
      const text = await res.text();
      const events = text.split('\n\n').filter(Boolean).map((e) => e.replace(/^data: /, ''));
      expect(events).not.toContain('[DONE]');
      const last = JSON.parse(events.at(-1)!);
      expect(last.error.type).toBe('upstream_error');
      const delivered = events.slice(0, -1).map((e) => JSON.parse(e).choices[0].delta.content).join('');
      const id = JSON.parse(events[0]!).id as string;
      const { countTextTokens } = await import('../../core/chat/tokens.ts');
      expect(await capturedFor(orm, id)).toBe(cost(promptTokens, countTextTokens(delivered)));
    }
    await expectSettledWallet(orm, account.id);
  });

  it('a failure after some output of a non-streamed request charges nothing', async () => {
    const res = await post({ model: 'test/fail-mid', messages });
    expect(res.status).toBe(502);
    expect((await expectSettledWallet(orm, account.id)).balance.purchased).toBe(parseCoins('10'));
  });

  it('a client that disconnects mid-stream pays for what the upstream produced, the hold ends, the upstream call stops', async () => {
    const abortedBefore = upstream.aborted;
    const controller = new AbortController();
    const res = await fetch(`${api.url}/api/v1/chat/completions`, {
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
    await vi.waitFor(async () => {
      const state = await walletInvariants(orm, account.id);
      expect(state.openHolds).toBe(0n);
    });
    const charged = await capturedFor(orm, id);
    expect(charged).toBeGreaterThanOrEqual(cost(promptTokens, 3));
    // Never more than the hold: input plus the 100-token limit, and far less than the full 30 words.
    expect(charged).toBeLessThan(cost(promptTokens, 30));
    await vi.waitFor(() => expect(upstream.aborted).toBeGreaterThan(abortedBefore));
    await expectSettledWallet(orm, account.id);
  });

  it('missing usage: charged on our own count of the output', async () => {
    const completion = await client.chat.completions.create({ model: 'test/no-usage', messages });
    const { countTextTokens } = await import('../../core/chat/tokens.ts');
    const expected = cost(promptTokens, countTextTokens('Hello from upstream'));
    expect(await capturedFor(orm, completion.id)).toBe(expected);
    expect(completion.usage!.prompt_tokens).toBe(promptTokens);
    await expectSettledWallet(orm, account.id);
  });

  it('usage above the request’s limit, yet possible for the model: clamped to the output limit', async () => {
    const completion = await client.chat.completions.create({ model: 'test/over-limit', messages, max_tokens: 40 });
    expect(completion.usage!.completion_tokens).toBe(40);
    expect(completion.usage!.prompt_tokens).toBe(promptTokens);
    expect(await capturedFor(orm, completion.id)).toBe(cost(promptTokens, 40));
    await expectSettledWallet(orm, account.id);
  });

  it('a price edit does not change a request in flight: the hold keeps the prices it was made at', async () => {
    const pending = client.chat.completions.create({ model: 'test/slow', messages, max_tokens: 100 });
    await vi.waitFor(async () => {
      const [row] = await orm.em.fork().execute<{ n: number }[]>(`select count(*)::int as n from holds where account_id = ? and status = 'open'`, [account.id]);
      expect(row!.n).toBe(1);
    });
    const em = orm.em.fork();
    await em.execute(`update models set definition = jsonb_set(definition, '{pricing}', '{"input_per_million": 2000, "output_per_million": 4000}') where id = 'test/slow'`);
    try {
      const completion = await pending;
      expect(await capturedFor(orm, completion.id)).toBe(cost(promptTokens, 30));
    } finally {
      await em.execute(`update models set definition = jsonb_set(definition, '{pricing}', '{"input_per_million": 2, "output_per_million": 4}') where id = 'test/slow'`);
    }
  });
});

describe("the provider's reported usage, billed as docs/chat.md says: clamped to what was reserved", () => {
  // Prices written out by hand: in-app 3 and 7 coins per million tokens; at API_PRICE_PERCENT
  // 50 that is 1_500_000 and 3_500_000 micro-coins per million tokens (1.5 and 3.5 a token),
  // so most charges have half a micro-coin, which is rounded up once per request.
  const INPUT_PER_MILLION = 1_500_000n;
  const OUTPUT_PER_MILLION = 3_500_000n;
  const charge = (input: number, output: number) => {
    const millionths = BigInt(input) * INPUT_PER_MILLION + BigInt(output) * OUTPUT_PER_MILLION;
    return (millionths + 999_999n) / 1_000_000n;
  };
  const priced = (id: string, upstream: string) => ({
    id,
    name: id,
    type: 'text',
    generation_types: ['chat'],
    provider: { name: 'fake', model: upstream },
    pricing: { input_per_million: 3, output_per_million: 7 },
    context_window: 4096,
    max_output_tokens: 1000,
    default_max_tokens: 100,
  });
  beforeAll(async () => {
    const models = [priced('test/reports-fewer', 'usage:4:3'), priced('test/reports-more', 'usage:1000:4')];
    await seedModels(orm.em.fork(), validateCatalog({ providers: TEST_CATALOG.providers, models }, 50n));
  });

  it('fewer prompt tokens than our count: the reported count is charged', async () => {
    // Our count of "Say hello": 3 for the message, 1 for the role, 2 for the text, 3 to prime the reply.
    expect(promptTokens).toBe(9);
    const completion = await client.chat.completions.create({ model: 'test/reports-fewer', messages, max_tokens: 50 });
    // 4 x 1.5 + 3 x 3.5 = 16.5 -> 17 micro-coins (on our count of 9 it would be 24).
    const expected = charge(4, 3);
    expect(expected).toBe(17n);
    expect(await capturedFor(orm, completion.id)).toBe(expected);
    expect(completion.usage).toMatchObject({ prompt_tokens: 4, completion_tokens: 3, total_tokens: 7, cost_coins: 0.000017 });
    const state = await expectSettledWallet(orm, account.id);
    expect(state.balance.purchased).toBe(10_000_000n - expected);
  });

  it('more prompt tokens than our count: clamped to our count, which is what was reserved', async () => {
    const stream = await client.chat.completions.create({ model: 'test/reports-more', messages, max_tokens: 50, stream: true, stream_options: { include_usage: true } });
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    const last = chunks.at(-1)!;
    // 9 x 1.5 + 4 x 3.5 = 27.5 -> 28 micro-coins, not 1000 x 1.5 + 14.
    const expected = charge(9, 4);
    expect(expected).toBe(28n);
    expect(await capturedFor(orm, last.id)).toBe(expected);
    expect(last.usage).toMatchObject({ prompt_tokens: 9, completion_tokens: 4, total_tokens: 13, cost_coins: 0.000028 });
    // What was reserved, and released but for the charge: 9 x 1.5 + 50 x 3.5 = 188.5 -> 189.
    const [hold] = await orm.em.fork().execute<{ amount: string; captured: string }[]>(
      `select amount_micro::text as amount, captured_micro::text as captured from holds where reference = ?`,
      [last.id],
    );
    expect(hold).toEqual({ amount: String(charge(9, 50)), captured: String(expected) });
    expect(charge(9, 50)).toBe(189n);
    const state = await expectSettledWallet(orm, account.id);
    expect(state.balance.purchased).toBe(10_000_000n - expected);
  });
});

describe('chat request validation: a clear 4xx naming the field, nothing charged', () => {
  const cases: [string, Record<string, unknown>, number, RegExp][] = [
    ['no model', { messages }, 400, /'model'/],
    ['no messages', { model: 'test/ok' }, 400, /'messages'/],
    ['empty messages', { model: 'test/ok', messages: [] }, 400, /'messages'/],
    ['function role', { model: 'test/ok', messages: [{ role: 'function', content: 'x' }] }, 400, /'messages\.0\.role'/],
    ['a tool message without tool_call_id', { model: 'test/ok', messages: [{ role: 'tool', content: 'x' }] }, 400, /'messages\.0\.tool_call_id'/],
    ['an image part', { model: 'test/ok', messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'https://x/y.png' } }] }] }, 400, /images are not supported/],
    ['both output limits', { model: 'test/ok', messages, max_tokens: 5, max_completion_tokens: 5 }, 400, /max_tokens or max_completion_tokens/],
    ['n > 1', { model: 'test/ok', messages, n: 2 }, 400, /'n'/],
    ['legacy functions', { model: 'test/ok', messages, functions: [{ name: 'f' }] }, 400, /'functions'.*use tools/],
    ['legacy function_call', { model: 'test/ok', messages, function_call: 'auto' }, 400, /'function_call'/],
    ['a tool that is not a function', { model: 'test/ok', messages, tools: [{ type: 'custom', custom: { name: 'f' } }] }, 400, /'tools\.0\.type'/],
    ['tools on a model without them', { model: 'test/plain', messages, tools: [{ type: 'function', function: { name: 'f' } }] }, 400, /'test\/plain' does not support 'tools'/],
    ['response_format on a model without it', { model: 'test/plain', messages, response_format: { type: 'json_object' } }, 400, /'test\/plain' does not support 'response_format'/],
    ['temperature out of range', { model: 'test/ok', messages, temperature: 3 }, 400, /'temperature'/],
    ['limit above the model maximum', { model: 'test/ok', messages, max_completion_tokens: 5000 }, 400, /'max_completion_tokens'/],
    ['a media model', { model: 'test/image', messages }, 400, /\/generations/],
    ['an unknown model', { model: 'nobody/nothing', messages }, 404, /nobody\/nothing/],
  ];
  for (const [name, body, status, message] of cases) {
    it(name, async () => {
      const res = await post(body);
      expect(res.status).toBe(status);
      expect(Object.keys(res.body.error).sort()).toEqual(['code', 'message', 'param', 'type']);
      expect(res.body.error.message).toMatch(message);
      // The field named in the message is the one in `param` (OpenAI's error field).
      expect(res.body.error.message).toContain(res.body.error.param.split('.')[0]);
      expect((await expectSettledWallet(orm, account.id)).balance.purchased).toBe(parseCoins('10'));
    });
  }

  it('text parts are accepted, harmless fields are passed on', async () => {
    const res = await post({
      model: 'test/echo-body',
      messages: [{ role: 'developer', content: [{ type: 'text', text: 'Be ' }, { type: 'text', text: 'brief.' }] }, ...messages],
      seed: 7,
      stop: ['\n'],
      user: 'u-1',
      metadata: { a: 'b' },
      store: false,
    });
    expect(res.status).toBe(200);
    const sent = JSON.parse(res.body.choices[0].message.content);
    expect(sent).toMatchObject({ seed: 7, stop: ['\n'], user: 'u-1', messages: [{ role: 'developer', content: 'Be brief.' }, { role: 'user', content: 'Say hello' }] });
    expect(sent).not.toHaveProperty('metadata');
  });

  it('402 when the reservation does not fit the balance', async () => {
    const poor = await makeAccount(orm, { coins: '0.0001' });
    const poorKey = (await makeKey(orm, poor.id)).key;
    const res = await post({ model: 'test/ok', messages, max_tokens: 1000 }, bearer(poorKey));
    expect(res.status).toBe(402);
    expect(res.body.error).toMatchObject({ type: 'billing_error', code: 'insufficient_balance' });
    expect((await expectSettledWallet(orm, poor.id)).balance.purchased).toBe(parseCoins('0.0001'));
  });

  it('403 for a paid-only model on an unpaid account; allowed once paid', async () => {
    const unpaid = await makeAccount(orm);
    const unpaidKey = (await makeKey(orm, unpaid.id)).key;
    const res = await post({ model: 'test/premium', messages }, bearer(unpaidKey));
    expect(res.status).toBe(403);
    expect(res.body.error).toMatchObject({ type: 'permission_error', code: 'paid_account_required' });
    expect((await post({ model: 'test/premium', messages })).status).toBe(200);
  });
});

describe('keys on the chat path, which remembers recent keys', () => {
  const revoke = (keyId: string) => orm.em.fork().execute('update api_keys set revoked_at = now() where id = ?', [keyId]);

  it('refuses a key revoked after its last request at once: 401, nothing reserved, the upstream not called', async () => {
    const k = await makeKey(orm, account.id);
    expect((await post({ model: 'test/ok', messages }, bearer(k.key))).status).toBe(200);
    const charged = (await expectSettledWallet(orm, account.id)).balance.purchased;
    await revoke(k.id);
    const calls = upstream.requests.length;
    for (const stream of [false, true]) {
      const res = await post({ model: 'test/ok', messages, stream }, bearer(k.key));
      expect(res.status).toBe(401);
      expect(res.body.error).toMatchObject({ type: 'authentication_error', code: 'invalid_api_key' });
    }
    expect(upstream.requests.length).toBe(calls);
    expect((await expectSettledWallet(orm, account.id)).balance.purchased).toBe(charged);
    const [row] = await orm.em.fork().execute<{ n: number }[]>(
      `select count(*)::int as n from holds where account_id = ? and metadata->>'key_id' = ?`,
      [account.id, k.id],
    );
    expect(row!.n).toBe(1);
  });

  it('answers a revoked key 401 whatever else is wrong with the request', async () => {
    const k = await makeKey(orm, account.id);
    expect((await post({ model: 'test/ok', messages }, bearer(k.key))).status).toBe(200);
    await revoke(k.id);
    for (const body of [{ model: 'test/ok' }, { model: 'nobody/nothing', messages }, { model: 'test/ok', messages, max_completion_tokens: 5000 }]) {
      const res = await post(body, bearer(k.key));
      expect(res.status).toBe(401);
    }
  });
});

describe('models', () => {
  it('filters by type and finds ids with slashes, with an example', async () => {
    const images = await getJson(`${api.url}/api/v1/models?type=image`, { headers: bearer(key) });
    expect(images.body.data.length).toBeGreaterThan(0);
    expect(images.body.data.every((m: { type: string }) => m.type === 'image')).toBe(true);
    const testImage = images.body.data.find((m: { id: string }) => m.id === 'test/image');
    expect(testImage.pricing).toMatchObject({ currency: 'coins', from: 5, base: 5 });
    const deep = await getJson(`${api.url}/api/v1/models/test/vendor/deep/model`, { headers: bearer(key) });
    expect(deep.status).toBe(200);
    expect(deep.body).toMatchObject({ id: 'test/vendor/deep/model', object: 'model', type: 'text', pricing: { input: 1, output: 2 } });
    expect(deep.body.example).toMatchObject({ model: 'test/vendor/deep/model', messages: expect.any(Array) });
    const missing = await getJson(`${api.url}/api/v1/models/test/none`, { headers: bearer(key) });
    expect(missing.status).toBe(404);
    expect(missing.body.error.code).toBe('model_not_found');
    const bad = await getJson(`${api.url}/api/v1/models?type=spaceship`, { headers: bearer(key) });
    expect(bad.status).toBe(400);
    expect(bad.body.error.message).toMatch(/'type'/);
  });
});
