import { describe, expect, it } from 'vitest';
import { createRouteBreakers } from '../../adapters/providers/breakers.ts';
import { modelSchema, type TextModel } from '../../core/catalog/schema.ts';
import { runChat, type ChatEvent, type ChatRun, type ServedRoute } from '../../core/chat/chat.ts';
import { chatRoutes, upstreamCost, type ChatRoute } from '../../core/chat/routes.ts';
import { countTextTokens } from '../../core/chat/tokens.ts';
import { parseCoins } from '../../core/money/coins.ts';
import { ProviderError, type ChatProvider, type ProviderEvent, type RouteBreakers, type RouteOutcome } from '../../core/ports.ts';

/**
 * Routes in runChat (core/chat/chat.ts, core/chat/routes.ts) with in-process upstreams and the
 * real in-process breakers: which failures move on to the next route, which do not, what the
 * breakers hear, what is charged and which route is named as the one that served.
 * test/integration/chat-failover.test.ts runs the same over HTTP against fake upstreams.
 */
const ANSWER: ProviderEvent[] = [{ type: 'delta', content: 'Hello' }, { type: 'finish', reason: 'stop' }, { type: 'usage', promptTokens: 4, completionTokens: 2 }];

/** An upstream that yields `events` then throws `fail` (when given), counting its calls. */
function upstream(events: ProviderEvent[], fail?: unknown) {
  const state = { calls: 0 };
  const chat: ChatProvider = {
    async *stream() {
      state.calls++;
      yield* events;
      if (fail !== undefined) throw fail;
    },
  };
  return { state, chat };
}

function route(name: string, chat: ChatProvider, cost?: ChatRoute['cost']): ChatRoute {
  return { key: `${name}/m`, provider: name, model: 'm', chat, cost };
}

function chatOn(routes: ChatRoute[]): ChatRun {
  return { routes, prices: { inputPerMillion: 1_000_000n, outputPerMillion: 2_000_000n }, inputTokens: 7, maxTokens: 10, holdId: 'hold_x', model: { id: 'test/chat', context_window: 4096, max_output_tokens: 1000 }, request: { messages: [], options: {} } };
}

/** The real breakers, with every outcome they were told kept for the assertions. */
function observedBreakers(opts = { failures: 5, windowMs: 60_000, coolDownMs: 30_000 }) {
  const real = createRouteBreakers(opts);
  const outcomes: (RouteOutcome & { route: string })[] = [];
  const breakers: Pick<RouteBreakers, 'admit'> = {
    async admit(name) {
      const pass = await real.admit(name);
      return pass && { done: (o: RouteOutcome) => (outcomes.push({ route: name, ...o }), pass.done(o)) };
    },
  };
  return { real, breakers, outcomes };
}

function fakeHolds() {
  const calls: string[] = [];
  return {
    calls,
    holds: {
      settle: async (holdId: string, cost: bigint) => (calls.push(`settle ${holdId} ${cost}`), { holdId, status: 'settled' as const, captured: cost, amount: 27n }),
      release: async (holdId: string) => (calls.push(`release ${holdId}`), { holdId, status: 'released' as const, captured: 0n, amount: 27n }),
    },
  };
}

async function run(chat: ChatRun, breakers: Pick<RouteBreakers, 'admit'>, opts: { streaming?: boolean; signal?: AbortSignal } = {}) {
  const { holds, calls } = fakeHolds();
  const served: (ServedRoute | undefined)[] = [];
  const events: ChatEvent[] = [];
  let error: unknown;
  try {
    const it = runChat({ holds, routeBreakers: breakers }, chat, { signal: opts.signal ?? new AbortController().signal, streaming: opts.streaming ?? false, onCharged: (r) => served.push(r) });
    for await (const e of it) events.push(e);
  } catch (err) {
    error = err;
  }
  return { events, error, calls, served };
}

const cost = (input: number, output: number) => BigInt(input) + 2n * BigInt(output);

describe('runChat over routes', () => {
  it.each([
    ['a refused connection', new ProviderError('failed', 'it could not be reached'), 'unreachable'],
    ['a 5xx', new ProviderError('failed', 'it answered with an error (502)', 502), 'http_502'],
    ['a 429 with a delay', new ProviderError('failed', 'it is rate limiting this service', 429, { retryAfterMs: 2000 }), 'http_429'],
    ['a time-out', new ProviderError('timeout', 'it did not answer in time'), 'timeout'],
  ])('%s before any output moves on to the next route; charged once at the model price; the breaker hears it', async (_name, failure, reason) => {
    const first = upstream([], failure);
    const second = upstream(ANSWER);
    const { breakers, outcomes } = observedBreakers();
    const { events, error, calls, served } = await run(chatOn([route('a', first.chat), route('b', second.chat)]), breakers);
    expect(error).toBeUndefined();
    expect(events.at(-1)).toEqual({ type: 'done', finishReason: 'stop', usage: { promptTokens: 4, completionTokens: 2, cost: cost(4, 2) } });
    expect([first.state.calls, second.state.calls]).toEqual([1, 1]);
    expect(calls).toEqual([`settle hold_x ${cost(4, 2)}`]);
    expect(served).toEqual([{ provider: 'b', model: 'm', upstreamCost: null }]);
    expect(outcomes.map(({ latencyMs: _, ...o }) => o)).toEqual([
      { route: 'a/m', ok: false, reason, retryAfterMs: failure.retryAfterMs, fallback: true },
      { route: 'b/m', ok: true },
    ]);
  });

  it('a refusal on the request’s merits is a 400 in our words, never tried on another route; the route is not blamed', async () => {
    const first = upstream([], new ProviderError('refused', 'it refused the request under its content policy', 400, { code: 'content_policy' }));
    const second = upstream(ANSWER);
    const { breakers, outcomes } = observedBreakers();
    const { error, calls, served } = await run(chatOn([route('a', first.chat), route('b', second.chat)]), breakers);
    expect(error).toMatchObject({ code: 'invalid_request', reason: 'content_policy_violation', param: 'messages' });
    expect((error as Error).message).toBe("The model 'test/chat' refused the request under its content policy. Nothing was charged.");
    expect(second.state.calls).toBe(0);
    expect(calls).toEqual(['release hold_x']);
    expect(served).toEqual([]);
    expect(outcomes).toEqual([{ route: 'a/m', ok: true, latencyMs: expect.any(Number) }]);
    const invalid = await run(chatOn([route('a', upstream([], new ProviderError('refused', 'x', 422, { code: 'invalid_input' })).chat)]), breakers);
    expect(invalid.error).toMatchObject({ code: 'invalid_request', reason: 'upstream_refused' });
    expect((invalid.error as Error).message).toBe("The model 'test/chat' refused the request as invalid input. Nothing was charged.");
  });

  it('every route failing: the last failure’s error (a time-out is 504-class), the hold released, nothing charged; the last is no fallback', async () => {
    const { breakers, outcomes } = observedBreakers();
    const a = upstream([], new ProviderError('failed', 'it is overloaded', 503));
    const b = upstream([], new ProviderError('timeout', 'it did not answer in time'));
    const { error, calls, served } = await run(chatOn([route('a', a.chat), route('b', b.chat)]), breakers);
    expect(error).toMatchObject({ code: 'upstream_timeout' });
    expect(calls).toEqual(['release hold_x']);
    expect(served).toEqual([]);
    expect(outcomes.map((o) => [o.route, o.ok, !o.ok && o.fallback])).toEqual([['a/m', false, true], ['b/m', false, false]]);
    const failed = await run(chatOn([route('b', b.chat), route('a', a.chat)]), observedBreakers().breakers);
    expect(failed.error).toMatchObject({ code: 'upstream_failed', message: "The provider of 'test/chat' failed: it is overloaded" });
  });

  it('every breaker open: no upstream is called, a 502-class error, nothing charged', async () => {
    const { real, breakers } = observedBreakers({ failures: 1, windowMs: 60_000, coolDownMs: 60_000 });
    for (const name of ['a/m', 'b/m']) (await real.admit(name))!.done({ ok: false, latencyMs: 1 });
    const a = upstream(ANSWER);
    const b = upstream(ANSWER);
    const { error, calls } = await run(chatOn([route('a', a.chat), route('b', b.chat)]), breakers);
    expect(error).toMatchObject({ code: 'upstream_failed', reason: 'upstream_unavailable' });
    expect([a.state.calls, b.state.calls]).toEqual([0, 0]);
    expect(calls).toEqual(['release hold_x']);
  });

  it('a route whose breaker is open is skipped: the next one serves', async () => {
    const { real, breakers } = observedBreakers({ failures: 1, windowMs: 60_000, coolDownMs: 60_000 });
    (await real.admit('a/m'))!.done({ ok: false, latencyMs: 1 });
    const a = upstream(ANSWER);
    const b = upstream(ANSWER);
    const { error, served } = await run(chatOn([route('a', a.chat), route('b', b.chat)]), breakers);
    expect(error).toBeUndefined();
    expect([a.state.calls, b.state.calls]).toEqual([0, 1]);
    expect(served[0]).toMatchObject({ provider: 'b' });
  });

  it("a failed route's finish reason and reported usage do not carry over to the route that serves", async () => {
    const a = upstream([{ type: 'finish', reason: 'length' }, { type: 'usage', promptTokens: 1, completionTokens: 1, costUsd: 0.5 }], new ProviderError('failed', 'reset'));
    const b = upstream([{ type: 'delta', content: 'one two' }]);
    const { events, served } = await run(chatOn([route('a', a.chat), route('b', b.chat)]), observedBreakers().breakers);
    expect(events.at(-1)).toEqual({ type: 'done', finishReason: 'stop', usage: { promptTokens: 7, completionTokens: countTextTokens('one two'), cost: cost(7, countTextTokens('one two')) } });
    expect(served).toEqual([{ provider: 'b', model: 'm', upstreamCost: null }]);
  });

  it('a stream that fails after its first delta is not retried: what was delivered is charged, from the route that served', async () => {
    const a = upstream([{ type: 'delta', content: 'partial answer' }], new ProviderError('failed', 'it closed the answer before it finished'));
    const b = upstream(ANSWER);
    const { breakers, outcomes } = observedBreakers();
    const { error, calls, served } = await run(chatOn([route('a', a.chat), route('b', b.chat)]), breakers, { streaming: true });
    expect(error).toMatchObject({ code: 'upstream_failed' });
    expect(b.state.calls).toBe(0);
    expect(calls).toEqual([`settle hold_x ${cost(7, countTextTokens('partial answer'))}`]);
    expect(served).toEqual([{ provider: 'a', model: 'm', upstreamCost: null }]);
    expect(outcomes.map((o) => !o.ok && o.fallback)).toEqual([false]);
  });

  it('a request not streamed whose upstream produced output and then failed is not retried either: nothing charged', async () => {
    const a = upstream([{ type: 'tool_call', index: 0, id: 'c', name: 'f', arguments: '{' }], new ProviderError('failed', 'reset'));
    const b = upstream(ANSWER);
    const { error, calls } = await run(chatOn([route('a', a.chat), route('b', b.chat)]), observedBreakers().breakers);
    expect(error).toMatchObject({ code: 'upstream_failed' });
    expect(b.state.calls).toBe(0);
    expect(calls).toEqual(['release hold_x']);
  });

  it('an unexpected error (not a ProviderError) is not retried, and counts against the route', async () => {
    const a = upstream([], new Error('bug'));
    const b = upstream(ANSWER);
    const { breakers, outcomes } = observedBreakers();
    const { error } = await run(chatOn([route('a', a.chat), route('b', b.chat)]), breakers);
    expect(error).toMatchObject({ code: 'upstream_failed' });
    expect(b.state.calls).toBe(0);
    expect(outcomes.map(({ latencyMs: _, ...o }) => o)).toEqual([{ route: 'a/m', ok: false, reason: 'error', retryAfterMs: undefined, fallback: false }]);
  });

  it('the client going away is nobody’s failure: no fallback, the route is told ok, what was produced is charged', async () => {
    const ac = new AbortController();
    const a: ChatProvider = {
      // eslint-disable-next-line require-yield
      async *stream() {
        ac.abort();
        throw new ProviderError('failed', 'aborted');
      },
    };
    const b = upstream(ANSWER);
    const { breakers, outcomes } = observedBreakers();
    const { error, calls } = await run(chatOn([route('a', a), route('b', b.chat)]), breakers, { signal: ac.signal });
    expect(error).toBeUndefined();
    expect(b.state.calls).toBe(0);
    expect(calls).toEqual([`settle hold_x ${cost(7, 0)}`]);
    expect(outcomes.map((o) => o.ok)).toEqual([true]);
  });

  it('the consumer stopping mid-answer ends the pass once, as ok', async () => {
    const { breakers, outcomes } = observedBreakers();
    const { holds, calls } = fakeHolds();
    const it = runChat({ holds, routeBreakers: breakers }, chatOn([route('a', upstream([{ type: 'delta', content: 'one' }, { type: 'delta', content: ' two' }]).chat)]), { signal: new AbortController().signal, streaming: true });
    for await (const _ of it) break;
    expect(outcomes.map((o) => o.ok)).toEqual([true]);
    expect(calls).toEqual([`settle hold_x ${cost(7, countTextTokens('one'))}`]);
  });
});

describe('runChat: what the breaker and the money hear on the edges', () => {
  it('a streamed request refused before any output releases the hold: nothing is charged for the input', async () => {
    const refusing = upstream([], new ProviderError('refused', 'no', 400, { code: 'content_policy' }));
    const { error, calls } = await run(chatOn([route('a', refusing.chat)]), observedBreakers().breakers, { streaming: true });
    expect(error).toMatchObject({ code: 'invalid_request', reason: 'content_policy_violation' });
    expect(calls).toEqual(['release hold_x']);
  });

  it('a streamed request whose tool call began before the route failed is charged for the call delivered', async () => {
    const broken = upstream([{ type: 'tool_call', index: 0, id: 'call_1', name: 'f', arguments: '{"a":' }], new ProviderError('failed', 'cut', 502));
    const { error, calls } = await run(chatOn([route('a', broken.chat)]), observedBreakers().breakers, { streaming: true });
    expect(error).toMatchObject({ code: 'upstream_failed' });
    expect(calls).toHaveLength(1);
    expect(calls[0]).toMatch(/^settle hold_x /);
  });

  it("the breaker hears the call's own latency: from the admit to the end of the answer", async () => {
    const { breakers, outcomes } = observedBreakers();
    const before = performance.now();
    await run(chatOn([route('a', upstream(ANSWER).chat)]), breakers);
    const elapsed = performance.now() - before;
    expect(outcomes).toHaveLength(1);
    expect(outcomes[0]!.latencyMs).toBeGreaterThanOrEqual(0);
    expect(outcomes[0]!.latencyMs).toBeLessThanOrEqual(elapsed);
  });

  it('a route with a catalog cost and an upstream that reports no usage: the cost on our own counts', async () => {
    const priced = { input_per_million: parseCoins('0.15'), output_per_million: parseCoins('0.6') };
    const silent = upstream([{ type: 'delta', content: 'Hello' }, { type: 'finish', reason: 'stop' }]);
    const { served } = await run(chatOn([route('a', silent.chat, priced)]), observedBreakers().breakers);
    // 7 input tokens (the hold's count) × 0.15 + 1 output token × 0.6 = 1.65 → 2 micro-coins.
    expect(served).toEqual([{ provider: 'a', model: 'm', upstreamCost: upstreamCost({ cost: priced }, {}, { promptTokens: 7, completionTokens: countTextTokens('Hello') }) }]);
    expect(served[0]!.upstreamCost).toBe(2n);
  });
});

describe('the upstream cost of the route that served', () => {
  const priced = { input_per_million: parseCoins('0.15'), output_per_million: parseCoins('0.6') };

  it('the upstream’s own figure (USD) first: 1 USD is 10^9 micro-coins', () => {
    expect(upstreamCost({ cost: priced }, { promptTokens: 10, completionTokens: 5, costUsd: 0.000123 }, { promptTokens: 1, completionTokens: 1 })).toBe(123_000n);
  });

  it('else the route’s catalog price on the upstream’s counts (ours when it reports none), rounded up', () => {
    // 1000 × 0.15 + 10 × 0.6 = 156 micro-coins; 3 × 0.15 + 0 = 0.45 → 1.
    expect(upstreamCost({ cost: priced }, { promptTokens: 1000, completionTokens: 10 }, { promptTokens: 1, completionTokens: 1 })).toBe(156n);
    expect(upstreamCost({ cost: priced }, {}, { promptTokens: 3, completionTokens: 0 })).toBe(1n);
    expect(upstreamCost({ cost: priced }, { completionTokens: 1 }, { promptTokens: 1000, completionTokens: 50 })).toBe(151n);
  });

  it('an upstream figure that is no sane amount (too large for exact micro-coins, negative) falls back to the catalog', () => {
    expect(upstreamCost({ cost: priced }, { promptTokens: 1000, completionTokens: 10, costUsd: 1e300 }, { promptTokens: 1, completionTokens: 1 })).toBe(156n);
    expect(upstreamCost({ cost: priced }, { promptTokens: 1000, completionTokens: 10, costUsd: -1 }, { promptTokens: 1, completionTokens: 1 })).toBe(156n);
    expect(upstreamCost({}, { costUsd: Number.POSITIVE_INFINITY }, { promptTokens: 1, completionTokens: 1 })).toBeNull();
    expect(upstreamCost({}, { costUsd: 0 }, { promptTokens: 1, completionTokens: 1 })).toBe(0n);
  });

  it('else unknown', () => {
    expect(upstreamCost({}, { promptTokens: 1000, completionTokens: 10 }, { promptTokens: 1, completionTokens: 1 })).toBeNull();
  });

  it('runChat names it with the reported counts, not the clamped billed ones', async () => {
    const a = upstream([{ type: 'delta', content: 'x' }, { type: 'usage', promptTokens: 1000, completionTokens: 500 }]);
    const { served, events } = await run(chatOn([route('a', a.chat, priced)]), observedBreakers().breakers);
    expect(events.at(-1)).toMatchObject({ usage: { promptTokens: 7, completionTokens: 10 } });
    expect(served).toEqual([{ provider: 'a', model: 'm', upstreamCost: 450n }]);
  });
});

describe('chatRoutes: the routes a request tries', () => {
  const model = (extra: Record<string, unknown>) =>
    modelSchema.parse({ id: 't/m', name: 'm', type: 'text', generation_types: ['chat'], pricing: { input_per_million: 1, output_per_million: 1 }, context_window: 100, max_output_tokens: 10, default_max_tokens: 10, ...extra }) as TextModel;
  const chat = upstream(ANSWER).chat;

  it('in the catalog’s order, leaving out routes whose provider is not configured, with their cost', () => {
    const m = model({ routes: [{ provider: 'x', model: 'a' }, { provider: 'p', model: 'b', cost: { input_per_million: 1, output_per_million: 2 } }, { provider: 'q', model: 'c' }] });
    const routes = chatRoutes(m, { get: (n) => (n === 'x' ? undefined : chat) });
    expect(routes.map((r) => [r.key, r.provider, r.model, r.cost])).toEqual([
      ['p/b', 'p', 'b', { input_per_million: 1_000_000n, output_per_million: 2_000_000n }],
      ['q/c', 'q', 'c', undefined],
    ]);
  });

  it('weighted: drawn by weight with the random source given', () => {
    const m = model({ route_selection: 'weighted', routes: [{ provider: 'p', model: 'a', weight: 1 }, { provider: 'q', model: 'b', weight: 3 }] });
    expect(chatRoutes(m, { get: () => chat }, () => 0.9).map((r) => r.key)).toEqual(['q/b', 'p/a']);
    expect(chatRoutes(m, { get: () => chat }, () => 0.1).map((r) => r.key)).toEqual(['p/a', 'q/b']);
  });

  it('none configured: unavailable, provider_unavailable', () => {
    expect(() => chatRoutes(model({ provider: { name: 'x', model: 'a' } }), { get: () => undefined })).toThrow(expect.objectContaining({ code: 'unavailable', reason: 'provider_unavailable' }));
  });
});
