import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { createRouteBreakers } from '../../adapters/providers/breakers.ts';
import { createProviderRegistry } from '../../adapters/providers/registry.ts';
import { timedChatProvider, type Timers } from '../../adapters/providers/timeouts.ts';
import { validateCatalog } from '../../core/catalog/catalog.ts';
import { chatTimeouts, providerConfigSchema } from '../../core/catalog/schema.ts';
import { runChat, type ChatEvent, type ChatRun, type ServedRoute } from '../../core/chat/chat.ts';
import { checkedUsage, type ChatRoute } from '../../core/chat/routes.ts';
import { countTextTokens } from '../../core/chat/tokens.ts';
import { parseCoins } from '../../core/money/coins.ts';
import type { ChatProvider, ProviderEvent } from '../../core/ports.ts';
import { ANTHROPIC_FAKE_KEY, startFakeAnthropic, type FakeAnthropic } from '../fakes/anthropic-upstream.ts';
import { startFakeUpstream, type FakeUpstream } from '../fakes/openai-upstream.ts';

/**
 * What core makes of what chat upstreams answer, through the real adapters (registry-built, as
 * the service builds them) against the fakes speaking OpenAI's and Anthropic's protocols, and
 * runChat with the real in-process breakers and recording holds:
 * - the answer's time limits (first token, idle, deadline), keep-alives not counting, with
 *   time-outs of a few tens of milliseconds configured in the catalog (no real wait);
 * - impossible usage reported by an upstream, replaced by our own count;
 * - the customer's words for an Anthropic failure, the same as for any route.
 */
let openai: FakeUpstream;
let anthropic: FakeAnthropic;

beforeAll(async () => {
  [openai, anthropic] = await Promise.all([startFakeUpstream(), startFakeAnthropic()]);
});
afterAll(async () => {
  await Promise.all([openai.close(), anthropic.close()]);
});

/**
 * Tiny limits, each test's own, with the transport's time-out far beyond them (30 s): only the
 * limit under test can end the call. Routes expected to answer run with RELAXED limits, so a
 * loaded machine does not end them.
 */
const NO_TOKEN = { timeout_seconds: 30, first_token_timeout_seconds: 0.05 };
const STALLS = { timeout_seconds: 30, first_token_timeout_seconds: 5, idle_timeout_seconds: 0.05 };
const TRICKLES = { timeout_seconds: 30, first_token_timeout_seconds: 0.3, idle_timeout_seconds: 0.3, deadline_seconds: 0.3 };
const RELAXED = { timeout_seconds: 5 };

function registry(limits: Record<string, number>) {
  const parsed = validateCatalog(
    {
      providers: {
        openai: { kind: 'openai-compatible', base_url: openai.url, api_key_env: 'UP_KEY', ...limits },
        anthropic: { kind: 'anthropic', base_url: anthropic.url, api_key_env: 'ANT_KEY', ...limits },
      },
      models: [],
    },
    50n,
  ).parsed;
  const warnings: { fields: object; message: string }[] = [];
  const providers = createProviderRegistry(parsed.providers, { UP_KEY: 'upstream-secret', ANT_KEY: ANTHROPIC_FAKE_KEY }, { warn: (fields, message) => warnings.push({ fields, message }) });
  return { providers, warnings };
}

const route = (provider: string, model: string, chat: ChatProvider, cost?: ChatRoute['cost']): ChatRoute => ({ key: `${provider}/${model}`, provider, model, chat, cost });
const via = (providers: ReturnType<typeof registry>['providers'], name: string) => providers.get(name)!;

function chatOn(routes: ChatRoute[]): ChatRun {
  return {
    routes,
    prices: { inputPerMillion: 1_000_000n, outputPerMillion: 2_000_000n },
    inputTokens: 7,
    maxTokens: 50,
    holdId: 'hold_x',
    model: { id: 'test/chat', context_window: 4096, max_output_tokens: 1000 },
    request: { messages: [{ role: 'user', content: 'Hi' }], options: {} },
  };
}

/** 1 micro-coin per input token, 2 per output token. */
const cost = (input: number, output: number) => BigInt(input) + 2n * BigInt(output);

async function run(chat: ChatRun, opts: { streaming?: boolean } = {}) {
  const calls: string[] = [];
  const holds = {
    settle: async (holdId: string, amount: bigint) => (calls.push(`settle ${holdId} ${amount}`), { holdId, status: 'settled' as const, captured: amount, amount: 1000n }),
    release: async (holdId: string) => (calls.push(`release ${holdId}`), { holdId, status: 'released' as const, captured: 0n, amount: 1000n }),
  };
  const served: (ServedRoute | undefined)[] = [];
  const warned: { fields: Record<string, unknown>; message: string }[] = [];
  const events: ChatEvent[] = [];
  let error: unknown;
  const started = performance.now();
  try {
    const routeBreakers = createRouteBreakers({ failures: 5, windowMs: 60_000, coolDownMs: 30_000 });
    for await (const e of runChat({ holds, routeBreakers, warn: (fields, message) => warned.push({ fields, message }) }, chat, { signal: new AbortController().signal, streaming: opts.streaming ?? false, onCharged: (r) => served.push(r) })) {
      events.push(e);
    }
  } catch (err) {
    error = err;
  }
  return { events, error, calls, served, warned, ms: performance.now() - started };
}

const calledWith = (fake: { requests: Record<string, unknown>[] }, model: string) => fake.requests.filter((r) => r.model === model).length;

describe('an upstream that sends only keep-alives', () => {
  it.each([false, true])('SSE comments and never a token: the first-token limit moves to the next route, which is charged once (streamed: %s)', async (streaming) => {
    const { providers } = registry(NO_TOKEN);
    const aborted = openai.aborted;
    const { events, error, calls, served, ms } = await run(chatOn([route('openai', 'keep-alive', via(providers, 'openai')), route('anthropic', 'claude-ok', via(registry(RELAXED).providers, 'anthropic'))]), { streaming });
    expect(error).toBeUndefined();
    expect(served).toEqual([{ provider: 'anthropic', model: 'claude-ok', upstreamCost: null }]);
    // Anthropic's counts (25 in: above our 7, so ours; 7 out), charged once.
    expect(events.at(-1)).toEqual({ type: 'done', finishReason: 'stop', usage: { promptTokens: 7, completionTokens: 7, cost: cost(7, 7) } });
    expect(calls).toEqual([`settle hold_x ${cost(7, 7)}`]);
    // The keep-alive request was dropped, not left open.
    await vi.waitFor(() => expect(openai.aborted).toBe(aborted + 1));
    expect(ms).toBeLessThan(5_000);
  });

  it('Anthropic pings and never a token: the same, the next route serves', async () => {
    const { providers, warnings } = registry(NO_TOKEN);
    const { error, calls, served } = await run(chatOn([route('anthropic', 'claude-ping', via(providers, 'anthropic')), route('openai', 'ok', via(registry(RELAXED).providers, 'openai'))]));
    expect(error).toBeUndefined();
    expect(served[0]).toMatchObject({ provider: 'openai', model: 'ok' });
    expect(calls).toEqual([`settle hold_x ${cost(7, 5)}`]);
    // The operator reads which limit passed, for which provider.
    expect(warnings).toContainEqual({ fields: expect.objectContaining({ provider: 'anthropic', limit: 'first_token' }), message: 'chat upstream: timed out' });
  });

  it('a non-streamed request whose upstream never answers (no headers) hits the first-token limit and fails over, well before the transport’s 30 s', async () => {
    const { providers } = registry(NO_TOKEN);
    const before = calledWith(openai, 'hang');
    const { error, served, ms } = await run(chatOn([route('openai', 'hang', via(providers, 'openai')), route('anthropic', 'claude-ok', via(registry(RELAXED).providers, 'anthropic'))]));
    expect(error).toBeUndefined();
    expect(calledWith(openai, 'hang')).toBe(before + 1);
    expect(served[0]).toMatchObject({ provider: 'anthropic' });
    expect(ms).toBeLessThan(5_000);
  });

  it('with no other route: 504-class upstream_timeout, the hold released, nothing charged', async () => {
    const { providers } = registry(NO_TOKEN);
    const { error, calls } = await run(chatOn([route('openai', 'keep-alive', via(providers, 'openai'))]), { streaming: true });
    expect(error).toMatchObject({ code: 'upstream_timeout' });
    expect(calls).toEqual(['release hold_x']);
  });

  it('after a token reached the client: the stream ends with the time-out error, only what was delivered is charged, no other route', async () => {
    const { providers } = registry(STALLS);
    const before = calledWith(openai, 'ok');
    const { events, error, calls, served } = await run(chatOn([route('openai', 'keep-alive-after-token', via(providers, 'openai')), route('openai2', 'ok', via(providers, 'openai'))]), { streaming: true });
    expect(events).toEqual([{ type: 'delta', content: 'Partial' }]);
    expect(error).toMatchObject({ code: 'upstream_timeout' });
    expect(calls).toEqual([`settle hold_x ${cost(7, countTextTokens('Partial'))}`]);
    expect(served[0]).toMatchObject({ provider: 'openai', model: 'keep-alive-after-token' });
    expect(calledWith(openai, 'ok')).toBe(before);
  });

  it('not streamed, after output began: 504-class, nothing charged (nothing was delivered)', async () => {
    const { providers } = registry(STALLS);
    const { error, calls } = await run(chatOn([route('openai', 'keep-alive-after-token', via(providers, 'openai')), route('openai2', 'ok', via(providers, 'openai'))]));
    expect(error).toMatchObject({ code: 'upstream_timeout' });
    expect(calls).toEqual(['release hold_x']);
  });

  it('an answer that trickles tokens for ever ends at the deadline; what was delivered is charged', async () => {
    const { providers } = registry(TRICKLES);
    const { events, error, calls, ms } = await run(chatOn([route('openai', 'trickle', via(providers, 'openai'))]), { streaming: true });
    expect(error).toMatchObject({ code: 'upstream_timeout' });
    const delivered = events.map((e) => (e.type === 'delta' ? e.content : '')).join('');
    expect(delivered.length).toBeGreaterThan(0);
    expect(calls).toEqual([`settle hold_x ${cost(7, Math.min(50, countTextTokens(delivered)))}`]);
    expect(ms).toBeGreaterThanOrEqual(290);
    expect(ms).toBeLessThan(5_000);
  });
});

describe('the limits’ clock', () => {
  /** A clock and timer driven by hand: no time passes unless the test says so. */
  function manualTimers() {
    let now = 0;
    const pending = new Map<number, { at: number; fn: () => void }>();
    let next = 1;
    const timers: Timers = {
      now: () => now,
      setTimeout: (fn, ms) => (pending.set(next, { at: now + ms, fn }), next++),
      clearTimeout: (h) => void pending.delete(h as number),
    };
    const advance = (ms: number) => {
      now += ms;
      for (const [h, t] of [...pending]) {
        if (t.at > now) continue;
        pending.delete(h);
        t.fn();
      }
    };
    return { timers, advance };
  }

  it('idles only while waiting for the upstream: a consumer holding the answer longer than the idle limit is no time-out; the deadline still ends the call', async () => {
    const { timers, advance } = manualTimers();
    const gate: (() => void)[] = [];
    const upstream: ChatProvider = {
      async *stream(_request, signal) {
        for (let i = 0; ; i++) {
          yield { type: 'delta', content: `w${i}` } satisfies ProviderEvent;
          await new Promise<void>((resolve, reject) => {
            gate.push(resolve);
            signal.addEventListener('abort', () => reject(new Error('aborted')), { once: true });
          });
        }
      },
    };
    const logged: Record<string, unknown>[] = [];
    const timed = timedChatProvider(upstream, { firstTokenMs: 10, idleMs: 30, deadlineMs: 100 }, { timers, log: (fields) => logged.push(fields) });
    const it = timed.stream({ model: 'm', messages: [], maxTokens: 5, options: {} }, new AbortController().signal)[Symbol.asyncIterator]();
    const turn = () => new Promise((r) => setImmediate(r));
    expect((await it.next()).value).toEqual({ type: 'delta', content: 'w0' });
    advance(50); // the consumer holds the answer for 50 ms: nothing was waited for, no time-out
    const second = it.next();
    await turn();
    advance(29); // waiting, just under the idle limit
    gate.shift()!();
    expect((await second).value).toEqual({ type: 'delta', content: 'w1' });
    const third = it.next();
    await turn();
    advance(20); // at 99 ms: under the deadline, and under the idle limit
    await turn();
    expect(logged).toEqual([]);
    advance(1); // at 100 ms: the deadline, before the idle limit (109)
    await expect(third).rejects.toMatchObject({ kind: 'timeout' });
    expect(logged).toEqual([{ limit: 'deadline', seconds: 0.1, began: true }]);
  });

  it('the catalog’s limits: defaults from timeout_seconds and a 600 s deadline; a wait longer than the deadline is refused, naming it', () => {
    const parsed = providerConfigSchema.parse({ kind: 'openai-compatible', base_url: 'http://x/v1' });
    expect(chatTimeouts(parsed as Parameters<typeof chatTimeouts>[0])).toEqual({ firstToken: 120, idle: 120, deadline: 600 });
    expect(chatTimeouts({ timeout_seconds: 900 })).toEqual({ firstToken: 900, idle: 900, deadline: 900 });
    expect(chatTimeouts({ timeout_seconds: 120, first_token_timeout_seconds: 30, idle_timeout_seconds: 10, deadline_seconds: 300 })).toEqual({ firstToken: 30, idle: 10, deadline: 300 });
    expect(() =>
      validateCatalog({ providers: { a: { kind: 'anthropic', first_token_timeout_seconds: 400, deadline_seconds: 300 } }, models: [] }, 50n),
    ).toThrow('catalog: providers.a.first_token_timeout_seconds: must be at most deadline_seconds (300)');
    expect(() => validateCatalog({ providers: { a: { kind: 'openai-compatible', base_url: 'http://x/v1', idle_timeout_seconds: 0 } }, models: [] }, 50n)).toThrow(/idle_timeout_seconds/);
  });
});

describe('usage an upstream reports is checked before it is charged', () => {
  const priced = { input_per_million: parseCoins('0.15'), output_per_million: parseCoins('0.6') };

  it.each([
    ['negative counts', 'usage:-5:-3'],
    ['fractional counts', 'usage:3.7:2.5'],
    ['counts beyond the model (1e300)', 'usage:1e300:1e300'],
    ['a count above context + output limit', 'usage:5097:1'],
  ])('%s: our own count is charged, once, the upstream cost is sane, and the operator is warned naming the route', async (_name, upstreamModel) => {
    const { providers } = registry(RELAXED);
    const { events, error, calls, served, warned } = await run(chatOn([route('openai', upstreamModel, via(providers, 'openai'), priced)]));
    expect(error).toBeUndefined();
    const answer = 'Hello from upstream';
    // Our counts: 7 input (the hold's), the output of the answer's text; usage:5097:1 keeps its valid completion count.
    const output = upstreamModel === 'usage:5097:1' ? 1 : countTextTokens(answer);
    expect(events.at(-1)).toEqual({ type: 'done', finishReason: 'stop', usage: { promptTokens: 7, completionTokens: output, cost: cost(7, output) } });
    expect(calls).toEqual([`settle hold_x ${cost(7, output)}`]);
    const upstream = served[0]!.upstreamCost!;
    expect(upstream).toBeGreaterThanOrEqual(0n);
    expect(upstream).toBeLessThan(1000n);
    expect(warned).toHaveLength(1);
    expect(warned[0]!.fields).toMatchObject({ model: 'test/chat', route: `openai/${upstreamModel}` });
  });

  it('checkedUsage keeps what is possible and names what is not', () => {
    const model = { context_window: 100, max_output_tokens: 10 };
    expect(checkedUsage({ promptTokens: 0, completionTokens: 110, costUsd: 1 }, model)).toEqual({ usage: { promptTokens: 0, completionTokens: 110, costUsd: 1 }, impossible: undefined });
    expect(checkedUsage({}, model)).toEqual({ usage: {}, impossible: undefined });
    expect(checkedUsage({ promptTokens: 111, completionTokens: 3 }, model)).toEqual({ usage: { promptTokens: undefined, completionTokens: 3 }, impossible: { prompt_tokens: 111 } });
    expect(checkedUsage({ promptTokens: 2, completionTokens: -1 }, model).impossible).toEqual({ completion_tokens: -1 });
    expect(checkedUsage({ promptTokens: Number.NaN, completionTokens: 0.5 }, model).impossible).toEqual({ prompt_tokens: Number.NaN, completion_tokens: 0.5 });
  });
});

describe('an Anthropic route’s failures read as any route’s', () => {
  it.each([false, true])('529 overloaded and an overloaded error event: the customer reads the words of an OpenAI-compatible route, no vendor named (streamed: %s)', async (streaming) => {
    const { providers } = registry(RELAXED);
    const fromOpenAi = await run(chatOn([route('openai', 'overloaded', via(providers, 'openai'))]), { streaming });
    const from529 = await run(chatOn([route('anthropic', 'status-529', via(providers, 'anthropic'))]), { streaming });
    const fromEvent = await run(chatOn([route('anthropic', 'claude-error-mid', via(providers, 'anthropic'))]), { streaming });
    const words = "The provider of 'test/chat' failed: it is overloaded";
    for (const { error } of [fromOpenAi, from529, fromEvent]) expect(error).toMatchObject({ code: 'upstream_failed', message: words });
  });

  it.each([
    ['status-401', "it refused this service's key"],
    ['status-402', 'it answered with an error (402)'],
    ['status-404', 'it does not know the model'],
    ['status-500', 'it answered with an error (500)'],
    ['status-504', 'it answered with an error (504)'],
    ['claude-malformed', 'it sent an unreadable answer'],
  ])('%s: %s', async (upstreamModel, words) => {
    const { providers } = registry(RELAXED);
    const { error } = await run(chatOn([route('anthropic', upstreamModel, via(providers, 'anthropic'))]));
    expect(error).toMatchObject({ code: 'upstream_failed', message: `The provider of 'test/chat' failed: ${words}` });
    expect((error as Error).message).not.toMatch(/anthropic/i);
  });

  it('a time-out and a refused connection name no vendor either', async () => {
    const refused = createProviderRegistry({ a: providerConfigSchema.parse({ kind: 'anthropic', base_url: 'http://127.0.0.1:1' }) }, {}).get('a')!;
    const { error } = await run(chatOn([route('anthropic', 'x', refused)]));
    expect(error).toMatchObject({ code: 'upstream_failed', message: "The provider of 'test/chat' failed: it could not be reached" });
    const quick = registry({ timeout_seconds: 5, first_token_timeout_seconds: 0.02 }).providers;
    const hang = await run(chatOn([route('anthropic', 'claude-hang', via(quick, 'anthropic'))]));
    expect(hang.error).toMatchObject({ code: 'upstream_timeout' });
    expect((hang.error as Error).message).not.toMatch(/anthropic/i);
  });
});
