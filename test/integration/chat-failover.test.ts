import { randomBytes } from 'node:crypto';
import type { Server } from 'node:http';
import OpenAI from 'openai';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { MikroORM } from '@mikro-orm/postgresql';
import { createProviderRegistry } from '../../adapters/providers/registry.ts';
import { seedModels, validateCatalog } from '../../core/catalog/catalog.ts';
import { countChatTokens, countTextTokens } from '../../core/chat/tokens.ts';
import { createContext } from '../../core/context.ts';
import { parseCoins } from '../../core/money/coins.ts';
import { historyInput, listHistory } from '../../core/money/history.ts';
import { createCaller } from '../../core/router.ts';
import { startFakeUpstream, type FakeUpstream } from '../fakes/openai-upstream.ts';
import { chargesWritten, makeAccount, makeKey, openTestOrm, testDeps } from '../support/db.ts';
import { bearer, createTestApp, getJson } from '../support/http.ts';
import { capturedFor, expectSettledWallet } from '../support/ledger.ts';
import { freePort } from '../support/process.ts';
import { startRedis, type RunningRedis } from '../support/tools.ts';

/**
 * A model with several routes, through the real REST app over HTTP with the official `openai`
 * client, against two fake upstreams speaking the OpenAI protocol (`a` and `b`) and a route
 * whose port refuses connections (`down`): which failures fall back, which do not, what is
 * charged (the model's price, whichever route served), what the completion record names, and
 * the breakers seen in the GraphQL admin and /metrics (docs/providers.md, "Routes, fallback and
 * breakers"). Upstream model names pick the fake's behaviour (test/fakes/openai-upstream.ts);
 * `usage:11:N` behaves as `ok`, so N gives each test its own route and breaker.
 */
let orm: MikroORM;
let a: FakeUpstream;
let b: FakeUpstream;
let providers: ReturnType<typeof createProviderRegistry>;
const servers: Server[] = [];
const closers: (() => Promise<void>)[] = [];
const P = `fo${randomBytes(4).toString('hex')}`;

const route = (provider: string, model: string, extra: Record<string, unknown> = {}) => ({ provider, model, ...extra });
const model = (id: string, routes: unknown[], extra: Record<string, unknown> = {}) => ({
  id: `${P}/${id}`,
  name: id,
  type: 'text',
  generation_types: ['chat'],
  routes,
  pricing: { input_per_million: 2, output_per_million: 4 },
  context_window: 4096,
  max_output_tokens: 1000,
  default_max_tokens: 100,
  ...extra,
});
/** Usage an upstream may report that no answer of a 4096 + 1000 token model can have. */
const IMPOSSIBLE_USAGE = [
  ['negative', 'usage:-5:-3'],
  ['fractional', 'usage:3.7:2.5'],
  ['huge', 'usage:1e300:1e300'],
] as const;
/** b's price to the operator: 0.15 and 0.6 coins per million tokens. */
const B_COST = { input_per_million: 0.15, output_per_million: 0.6 };

beforeAll(async () => {
  orm = await openTestOrm();
  [a, b] = await Promise.all([startFakeUpstream(), startFakeUpstream()]);
  const closed = await freePort();
  const upstream = (url: string) => ({ kind: 'openai-compatible', base_url: url, api_key_env: 'FAKE_UPSTREAM_KEY', timeout_seconds: 1 });
  const catalog = validateCatalog(
    {
      providers: { down: upstream(`http://127.0.0.1:${closed}/v1`), a: upstream(a.url), b: upstream(b.url) },
      models: [
        model('down-then-b', [route('down', 'ok'), route('b', 'ok', { cost: B_COST })]),
        ...['error', 'rate-limited', 'hang', 'overloaded'].map((f, i) => model(`fails-${f}`, [route('a', `usage:11:${i + 1}`), route('b', 'ok', { cost: B_COST })])),
        model('retry-after', [route('a', 'usage:11:5'), route('b', 'ok')]),
        model('refuses', [route('a', 'usage:11:9'), route('b', 'ok')]),
        model('all-down', [route('down', 'ok'), route('a', 'usage:11:10')]),
        model('mid-stream', [route('a', 'usage:11:11'), route('b', 'ok')]),
        model('weighted', [route('a', 'usage:11:12'), route('b', 'usage:11:12')], { route_selection: 'weighted' }),
        model('reports-cost', [route('b', 'usage-cost', { cost: B_COST })]),
        ...IMPOSSIBLE_USAGE.map(([name, upstream]) => model(`usage-${name}`, [route('b', upstream, { cost: B_COST })])),
        model('breaker', [route('a', 'usage:11:20'), route('b', 'ok')]),
        model('shared', [route('a', 'usage:11:30'), route('b', 'ok')]),
        model('shared-429', [route('a', 'usage:11:31'), route('b', 'ok')]),
      ],
    },
    50n,
  );
  await seedModels(orm.em.fork(), catalog);
  providers = createProviderRegistry(catalog.parsed.providers, { FAKE_UPSTREAM_KEY: 'upstream-secret' });
});
afterAll(async () => {
  for (const s of servers) {
    s.closeAllConnections();
    await new Promise((r) => s.close(r));
  }
  for (const close of closers) await close();
  await Promise.all([a.close(), b.close()]);
  redis?.stop();
  await orm.close();
});

/** An instance of the service (the REST app, GraphQL admin and /metrics) with these breaker settings. */
async function instance(env: Record<string, string> = {}) {
  const deps = testDeps(orm, { providers, env });
  // testDeps hands back the composition root's whole result, whose close() ends its Redis connections.
  closers.push(() => (deps as unknown as { close(): Promise<void> }).close());
  const server = await new Promise<Server>((resolve) => {
    const s = createTestApp({ deps }).listen(0, '127.0.0.1', () => resolve(s));
  });
  servers.push(server);
  const base = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  const viewer = (await createCaller(createContext(deps, { kind: 'internal' })).admins.createToken({ name: `viewer ${P}`, role: 'viewer' })).token;
  return { base, deps, viewer };
}

const messages = [{ role: 'user' as const, content: 'Say hello' }];
const promptTokens = countChatTokens(messages);
/** API prices: 1 micro-coin per input token, 2 per output token. */
const cost = (input: number, output: number) => BigInt(input) + 2n * BigInt(output);
/** Calls a fake received for one upstream model name. */
const calls = (fake: FakeUpstream, upstreamModel: string) => fake.requests.filter((r) => r.model === upstreamModel).length;

async function record(id: string) {
  await chargesWritten();
  const [row] = await orm.em.fork().execute<{ provider: string | null; route_model: string | null; upstream_cost_micro: string | null; finish_reason: string | null }[]>(
    'select provider, route_model, upstream_cost_micro::text, finish_reason from completion_records where id = ?',
    [id],
  );
  return row;
}

let svc: Awaited<ReturnType<typeof instance>>;
let account: { id: string };
let key: string;
let client: OpenAI;
beforeAll(async () => {
  // Breakers that never open here: each failure below must reach its route.
  svc = await instance({ BREAKER_FAILURES: '1000' });
});
beforeEach(async () => {
  account = await makeAccount(orm, { coins: '10' });
  key = (await makeKey(orm, account.id)).key;
  client = new OpenAI({ apiKey: key, baseURL: `${svc.base}/api/v1`, maxRetries: 0 });
});

describe('fallback before any output', () => {
  it('a refused connection: the next route answers, billed once at the model’s price; the record names the route and its catalog cost, the customer sees neither', async () => {
    const before = calls(b, 'ok');
    const completion = await client.chat.completions.create({ model: `${P}/down-then-b`, messages, max_tokens: 50 });
    expect(completion.choices[0]!.message.content).toBe('Hello from upstream');
    expect(calls(b, 'ok')).toBe(before + 1);
    const charged = await capturedFor(orm, completion.id);
    expect(charged).toBe(cost(promptTokens, 5));
    expect((completion.usage as unknown as { cost_coins: number }).cost_coins).toBe(Number(charged) / 1e6);
    expect((await expectSettledWallet(orm, account.id)).balance.purchased).toBe(parseCoins('10') - charged);
    // b reported 11 prompt and 5 completion tokens: 11 × 0.15 + 5 × 0.6 = 4.65 micro-coins, rounded up.
    expect(await record(completion.id)).toEqual({ provider: 'b', route_model: 'ok', upstream_cost_micro: '5', finish_reason: 'stop' });
    const read = await getJson(`${svc.base}/api/v1/chat/completions/${completion.id}`, { headers: bearer(key) });
    expect(read.status).toBe(200);
    expect(JSON.stringify(read.body)).not.toMatch(/provider|route|upstream/);
    expect(JSON.stringify(completion)).not.toMatch(/"provider"|route|upstream_cost/);
  });

  it.each([
    ['a 5xx', 'error', 1],
    ['a 429 with Retry-After', 'rate-limited', 2],
    ['a time-out', 'hang', 3],
    ['an "overloaded" event', 'overloaded', 4],
  ])('%s: the next route answers, billed once, recorded as the next route', async (_name, behaviour, n) => {
    const first = `usage:11:${n}`;
    const [aBefore, bBefore] = [calls(a, first), calls(b, 'ok')];
    a.script.push(behaviour);
    const completion = await client.chat.completions.create({ model: `${P}/fails-${behaviour}`, messages, max_tokens: 50 });
    expect(completion.choices[0]!.message.content).toBe('Hello from upstream');
    expect([calls(a, first), calls(b, 'ok')]).toEqual([aBefore + 1, bBefore + 1]);
    expect(await capturedFor(orm, completion.id)).toBe(cost(promptTokens, 5));
    expect(await record(completion.id)).toMatchObject({ provider: 'b', route_model: 'ok' });
    await expectSettledWallet(orm, account.id);
  });

  it('a route that answered 429 with Retry-After is skipped until the delay has passed', async () => {
    const [aBefore, bBefore] = [calls(a, 'usage:11:5'), calls(b, 'ok')];
    a.script.push('rate-limited');
    await client.chat.completions.create({ model: `${P}/retry-after`, messages, max_tokens: 50 });
    expect([calls(a, 'usage:11:5'), calls(b, 'ok')]).toEqual([aBefore + 1, bBefore + 1]);
    // Retry-After: 1 (second): the next request, at once, does not call the route.
    await client.chat.completions.create({ model: `${P}/retry-after`, messages, max_tokens: 50 });
    expect([calls(a, 'usage:11:5'), calls(b, 'ok')]).toEqual([aBefore + 1, bBefore + 2]);
  });
});

describe('what does not fall back', () => {
  it('a content-policy refusal: a 400 in our words naming no upstream text, never tried on the next route, nothing charged', async () => {
    const bBefore = calls(b, 'ok');
    a.script.push('content-policy');
    const err = (await client.chat.completions.create({ model: `${P}/refuses`, messages }).catch((e: unknown) => e)) as InstanceType<typeof OpenAI.APIError>;
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect(err).toMatchObject({ status: 400, code: 'content_policy_violation', param: 'messages', type: 'invalid_request_error' });
    expect(err.message).toContain(`The model '${P}/refuses' refused the request under its content policy`);
    expect(err.message).not.toMatch(/safety system|sk-upstream|upstream-internal/);
    expect(calls(b, 'ok')).toBe(bBefore);
    expect((await expectSettledWallet(orm, account.id)).balance.purchased).toBe(parseCoins('10'));
  });

  it('every route down: 502, the hold released, nothing charged', async () => {
    a.script.push('error');
    const res = await getJson(`${svc.base}/api/v1/chat/completions`, {
      method: 'POST',
      headers: { ...bearer(key), 'content-type': 'application/json' },
      body: JSON.stringify({ model: `${P}/all-down`, messages }),
    });
    expect(res.status).toBe(502);
    expect(res.body.error).toMatchObject({ type: 'upstream_error', code: 'upstream_error' });
    expect(res.body.error.message).not.toMatch(/exploded|127\.0\.0\.1|ECONNREFUSED/);
    const state = await expectSettledWallet(orm, account.id);
    expect(state.balance.purchased).toBe(parseCoins('10'));
  });

  it('a stream that fails after its first byte is not retried: what was delivered is charged, recorded as the first route', async () => {
    const bBefore = calls(b, 'ok');
    a.script.push('fail-mid');
    const stream = await client.chat.completions.create({ model: `${P}/mid-stream`, messages, stream: true });
    let text = '';
    let id = '';
    const err = await (async () => {
      for await (const chunk of stream) {
        id = chunk.id;
        text += chunk.choices[0]?.delta.content ?? '';
      }
    })().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Error);
    expect(text).toBe('Hello from');
    expect(calls(b, 'ok')).toBe(bBefore);
    expect(await capturedFor(orm, id)).toBe(cost(promptTokens, countTextTokens('Hello from')));
    expect(await record(id)).toMatchObject({ provider: 'a', route_model: 'usage:11:11', finish_reason: null });
    await expectSettledWallet(orm, account.id);
  });
});

describe('selection and cost', () => {
  it('weighted selection sends traffic to both routes', async () => {
    for (let i = 0; i < 20; i++) await client.chat.completions.create({ model: `${P}/weighted`, messages, max_tokens: 10 });
    const [onA, onB] = [calls(a, 'usage:11:12'), calls(b, 'usage:11:12')];
    expect(onA + onB).toBe(20);
    expect(onA).toBeGreaterThan(0);
    expect(onB).toBeGreaterThan(0);
  });

  it("the upstream's own cost (usage.cost, USD) is recorded over the catalog's", async () => {
    const completion = await client.chat.completions.create({ model: `${P}/reports-cost`, messages, max_tokens: 50 });
    // 0.000042 USD = 0.042 coins = 42,000 micro-coins; the customer pays the model's price.
    expect(await record(completion.id)).toMatchObject({ provider: 'b', route_model: 'usage-cost', upstream_cost_micro: '42000' });
    expect(await capturedFor(orm, completion.id)).toBe(cost(promptTokens, 5));
  });
});

describe('usage an upstream reports that cannot be', () => {
  it.each(IMPOSSIBLE_USAGE)('%s counts (%s): our own count is charged once, with its history row and its record', async (name) => {
    const completion = await client.chat.completions.create({ model: `${P}/usage-${name}`, messages, max_tokens: 50 });
    const output = countTextTokens('Hello from upstream');
    expect(completion.usage).toMatchObject({ prompt_tokens: promptTokens, completion_tokens: output });
    const charged = await capturedFor(orm, completion.id);
    expect(charged).toBe(cost(promptTokens, output));
    expect((completion.usage as unknown as { cost_coins: number }).cost_coins).toBe(Number(charged) / 1e6);
    expect((await expectSettledWallet(orm, account.id)).balance.purchased).toBe(parseCoins('10') - charged);
    const { data } = await listHistory(orm.em.fork(), account.id, historyInput.parse({ limit: 5 }));
    expect(data.filter((r) => r.type === 'api_usage')).toEqual([
      expect.objectContaining({ reference: completion.id, model: `${P}/usage-${name}`, input_tokens: promptTokens, output_tokens: output, amount_coins: -Number(charged) / 1e6 }),
    ]);
    // The record is written, with the route's catalog cost (0.15 and 0.6 coins per million) on our counts, rounded up.
    const upstream = (BigInt(promptTokens) * 150_000n + BigInt(output) * 600_000n + 999_999n) / 1_000_000n;
    expect(await record(completion.id)).toEqual({ provider: 'b', route_model: IMPOSSIBLE_USAGE.find(([n]) => n === name)![1], upstream_cost_micro: String(upstream), finish_reason: 'stop' });
    const read = await getJson(`${svc.base}/api/v1/chat/completions/${completion.id}`, { headers: bearer(key) });
    expect(read.body).toMatchObject({ usage: { prompt_tokens: promptTokens, completion_tokens: output } });
  });
});

describe('the circuit breaker of a route', () => {
  it('opens after N failures (the route is skipped: its upstream gets no call), lets a probe through after the cool-down, reopens on a failed probe and closes on a good one; GraphQL and /metrics show it', async () => {
    const svc2 = await instance({ BREAKER_FAILURES: '2', BREAKER_WINDOW_SECONDS: '60', BREAKER_COOL_DOWN_SECONDS: '1' });
    const c = new OpenAI({ apiKey: key, baseURL: `${svc2.base}/api/v1`, maxRetries: 0 });
    const ask = () => c.chat.completions.create({ model: `${P}/breaker`, messages, max_tokens: 10 });
    const onA = () => calls(a, 'usage:11:20');
    const start = onA();
    a.script.push('error', 'error');
    await ask();
    await ask();
    expect(onA()).toBe(start + 2);
    await ask();
    expect(onA()).toBe(start + 2);

    const gql = async () => {
      const res = await getJson(`${svc2.base}/admin/graphql`, {
        method: 'POST',
        headers: { ...bearer(svc2.viewer), 'content-type': 'application/json' },
        body: JSON.stringify({ query: '{ routes { route provider model state recentFailures latencyP50Ms latencyP99Ms } }' }),
      });
      expect(res.body.errors).toBeUndefined();
      return (res.body.data.routes as { route: string }[]).find((r) => r.route === 'a/usage:11:20');
    };
    expect(await gql()).toMatchObject({ provider: 'a', model: 'usage:11:20', state: 'open', recentFailures: 2, latencyP50Ms: expect.any(Number) });
    const metrics = await (await fetch(`${svc2.base}/metrics`)).text();
    expect(metrics).toContain('mas_route_breaker_state{route="a/usage:11:20"} 2');
    expect(metrics).toContain('mas_route_recent_failures{route="a/usage:11:20"} 2');
    expect(metrics).toContain('mas_route_failures_total{route="a/usage:11:20",reason="http_500"} 2');
    expect(metrics).toContain('mas_route_fallbacks_total{route="a/usage:11:20"} 2');
    expect(metrics).toContain('mas_route_skipped_total{route="a/usage:11:20"} 1');
    expect(metrics).toMatch(/mas_route_latency_p99_seconds\{route="b\/ok"\} \d/);
    expect(metrics).not.toContain('upstream-secret');

    // After the cool-down one probe goes through; it fails: open again for another cool-down.
    await new Promise((r) => setTimeout(r, 1100));
    a.script.push('error');
    await ask();
    expect(onA()).toBe(start + 3);
    await ask();
    expect(onA()).toBe(start + 3);
    // The next probe succeeds: closed, every request goes to the route again.
    await new Promise((r) => setTimeout(r, 1100));
    await ask();
    await ask();
    expect(onA()).toBe(start + 5);
    expect(await gql()).toMatchObject({ state: 'closed', recentFailures: 0 });
  });
});

/** A real Redis shared by two instances (test/support/tools.ts). */
let redis: RunningRedis | undefined;

describe('breakers shared through Redis', () => {
  it("two instances count one route's failures together; once open, neither calls it; one probe for both after the cool-down, reopening or closing it; both show the shared state; a Retry-After holds for both", async () => {
    // The asks that must fall inside one cool-down take a few hundred ms on a quiet machine and
    // once took more than a second on a loaded one (a second probe went out): 4 s leaves room.
    const COOL_DOWN_S = 4;
    redis = await startRedis();
    const env = { REDIS_URL: redis.url, BREAKER_FAILURES: '2', BREAKER_WINDOW_SECONDS: '60', BREAKER_COOL_DOWN_SECONDS: String(COOL_DOWN_S) };
    const [one, two] = [await instance(env), await instance(env)];
    const ask = (svc: { base: string }) => new OpenAI({ apiKey: key, baseURL: `${svc.base}/api/v1`, maxRetries: 0 }).chat.completions.create({ model: `${P}/shared`, messages, max_tokens: 10 });
    const onA = () => calls(a, 'usage:11:30');
    const start = onA();
    // One failure on each instance: two across the deployment open the route for both.
    a.script.push('error');
    await ask(one);
    a.script.push('error');
    await ask(two);
    expect(onA()).toBe(start + 2);
    await ask(one);
    await ask(two);
    expect(onA()).toBe(start + 2);

    const state = async (svc: { base: string; viewer: string }) => {
      const res = await getJson(`${svc.base}/admin/graphql`, {
        method: 'POST',
        headers: { ...bearer(svc.viewer), 'content-type': 'application/json' },
        body: JSON.stringify({ query: '{ routes { route state recentFailures } }' }),
      });
      return (res.body.data.routes as { route: string; state: string }[]).find((r) => r.route === 'a/usage:11:30');
    };
    expect(await state(one)).toEqual({ route: 'a/usage:11:30', state: 'open', recentFailures: 2 });
    expect(await state(two)).toEqual({ route: 'a/usage:11:30', state: 'open', recentFailures: 2 });

    // After the cool-down: one probe for the deployment; it fails, and the route is open again for both.
    await new Promise((r) => setTimeout(r, COOL_DOWN_S * 1000 + 100));
    a.script.push('error');
    await ask(two);
    expect(onA()).toBe(start + 3);
    await ask(one);
    await ask(two);
    expect(onA()).toBe(start + 3);
    expect(await state(one)).toMatchObject({ state: 'open' });

    // The next probe: while it is out (a slow stream read up to its first chunk), the other
    // instance skips the route.
    await new Promise((r) => setTimeout(r, COOL_DOWN_S * 1000 + 100));
    a.script.push('slow');
    const probe = await new OpenAI({ apiKey: key, baseURL: `${one.base}/api/v1`, maxRetries: 0 }).chat.completions.create({ model: `${P}/shared`, messages, max_tokens: 100, stream: true });
    const chunks = probe[Symbol.asyncIterator]();
    await chunks.next();
    expect(onA()).toBe(start + 4);
    await ask(two);
    expect(onA()).toBe(start + 4);
    await chunks.return?.();
    // The client left the probe after its first chunk: not the route's failure, so the probe
    // passed and the route closes for both (once instance one has seen the client go).
    for (let i = 0; i < 100 && (await state(two))?.state !== 'closed'; i++) await new Promise((r) => setTimeout(r, 50));
    await ask(one);
    await ask(two);
    expect(onA()).toBe(start + 6);
    expect(await state(two)).toEqual({ route: 'a/usage:11:30', state: 'closed', recentFailures: 0 });

    // A Retry-After one instance got keeps the other from calling the route too.
    const before = calls(a, 'usage:11:31');
    a.script.push('rate-limited');
    const shared429 = (svc: { base: string }) => new OpenAI({ apiKey: key, baseURL: `${svc.base}/api/v1`, maxRetries: 0 }).chat.completions.create({ model: `${P}/shared-429`, messages, max_tokens: 10 });
    await shared429(one);
    await shared429(two);
    expect(calls(a, 'usage:11:31')).toBe(before + 1);
  });
});
