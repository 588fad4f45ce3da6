import { describe, expect, it } from 'vitest';
import type { EntityManager } from '@mikro-orm/postgresql';
import type { AppConnectionPrincipal, KeyPrincipal } from '../../core/auth/principals.ts';
import { textCost, textPrices } from '../../core/catalog/pricing.ts';
import { modelSchema, type TextModel } from '../../core/catalog/schema.ts';
import { prepareChat, runChat, type ChatEvent, type ChatRun } from '../../core/chat/chat.ts';
import { chatRequestSchema } from '../../core/chat/schema.ts';
import { countChatTokens, countTextTokens, minChatTokens } from '../../core/chat/tokens.ts';
import type { CoreDeps } from '../../core/context.ts';
import { createRouteBreakers } from '../../adapters/providers/breakers.ts';
import { CoreError } from '../../core/errors.ts';
import type { BatchedReserve } from '../../core/money/hold-batcher.ts';
import { ProviderError, type ChatProvider, type ProviderEvent } from '../../core/ports.ts';

/**
 * Chat billing with everything around it faked (core/chat/chat.ts): what is reserved, with
 * which expiry and metadata, which requests fit the context window, and what is charged in every
 * ending of a stream (completed, client gone, upstream failed, aborted). The integration tests
 * (test/integration/chat.test.ts) run the same over HTTP; these pin the edges the mutation run
 * (`npm run test:mutation`) found loose.
 */
const NOW = new Date('2026-03-01T12:00:00.500Z');
const em = {} as EntityManager;

function textModel(extra: Record<string, unknown> = {}): TextModel {
  return modelSchema.parse({
    id: 'test/chat',
    name: 'chat',
    type: 'text',
    generation_types: ['chat'],
    provider: { name: 'fake', model: 'upstream-model' },
    pricing: { input_per_million: 2, output_per_million: 4 },
    context_window: 4096,
    max_output_tokens: 1000,
    default_max_tokens: 100,
    ...extra,
  }) as TextModel;
}

const keyPrincipal: KeyPrincipal = { kind: 'api_key', accountId: 'acc_1', keyId: 'key_1', paid: true, fromCache: false };
const appPrincipal: AppConnectionPrincipal = {
  kind: 'app_connection',
  accountId: 'acc_1',
  connectionId: 'app_1',
  keyId: 'key_app',
  paid: true,
  fromCache: false,
  spendCapMicro: 50n,
  expiresAt: null,
};

const provider: ChatProvider = {
  async *stream() {
    yield { type: 'delta', content: 'hi' };
  },
};

function prepareDeps(model: TextModel, opts: { providers?: boolean; refusals?: unknown[]; pending?: boolean } = {}) {
  const reserved: BatchedReserve[] = [];
  const asked: { id: string; opts: unknown }[] = [];
  const steps: string[] = [];
  const refusals = [...(opts.refusals ?? [])];
  const deps = {
    catalog: {
      get: async (_em: EntityManager, id: string, o: unknown) => {
        asked.push({ id, opts: o });
        return model;
      },
    },
    providers: { get: (name: string) => (opts.providers === false || name !== 'fake' ? undefined : provider) },
    config: { apiPricePercent: 50n, holdTtlSeconds: 900 },
    holds: {
      reserve: async (input: BatchedReserve) => {
        reserved.push(input);
        steps.push('reserve');
        const refusal = refusals.shift();
        if (refusal) throw refusal;
        return { holdId: 'hold_1' };
      },
    },
    charges: {
      hasPending: () => opts.pending ?? false,
      settledFor: async (accountId: string) => void steps.push(`charges of ${accountId} written`),
    },
    clock: () => NOW,
  } as unknown as Pick<CoreDeps, 'catalog' | 'providers' | 'config' | 'holds' | 'charges' | 'clock'>;
  return { deps, reserved, asked, steps };
}

const request = (body: Record<string, unknown>) => chatRequestSchema.parse({ model: 'test/chat', ...body });
const say = (content: string) => [{ role: 'user' as const, content }];

describe('prepareChat: the reservation', () => {
  it('reserves the input and the output limit at the API prices, at the price in force now, for the hold TTL, naming the key', async () => {
    const model = textModel();
    const { deps, reserved, asked } = prepareDeps(model);
    const prepared = await prepareChat(deps, em, keyPrincipal, request({ messages: say('Say hello'), max_tokens: 50 }));
    const inputTokens = countChatTokens(say('Say hello'));
    const prices = textPrices(model, 50n);
    expect(asked).toEqual([{ id: 'test/chat', opts: { at: NOW } }]);
    expect(prepared).toMatchObject({ inputTokens, maxTokens: 50, holdId: 'hold_1', holdAmount: textCost(prices, inputTokens, 50), created: Math.floor(NOW.getTime() / 1000) });
    expect(prepared.created).toBe(1_772_366_400);
    expect(reserved).toHaveLength(1);
    const r = reserved[0]!;
    expect(r).toMatchObject({ accountId: 'acc_1', activeKeyId: 'key_1', amount: textCost(prices, inputTokens, 50), reference: prepared.id });
    expect(r.expiresAt).toEqual(new Date(NOW.getTime() + 900_000));
    expect(r.metadata).toStrictEqual({
      kind: 'chat',
      model: 'test/chat',
      key_id: 'key_1',
      input_tokens: inputTokens,
      max_tokens: 50,
      prices: { input_per_million: '1', output_per_million: '2' },
    });
  });

  it("an app's reservation names its connection, which its spend cap counts", async () => {
    const { deps, reserved } = prepareDeps(textModel());
    await prepareChat(deps, em, appPrincipal, request({ messages: say('hi') }));
    expect(reserved[0]!.metadata).toMatchObject({ kind: 'chat', key_id: 'key_app', app_connection_id: 'app_1' });
    expect(reserved[0]!.activeKeyId).toBe('key_app');
  });

  it('refused for want of room while earlier charges of the account are being written: waits for them, then tries once more', async () => {
    const broke = new CoreError('insufficient_balance', 'Insufficient balance.');
    const capped = new CoreError('spend_cap_reached', 'Cap reached.');
    for (const refusal of [broke, capped]) {
      const { deps, steps } = prepareDeps(textModel(), { refusals: [refusal], pending: true });
      await expect(prepareChat(deps, em, keyPrincipal, request({ messages: say('Hi') }))).resolves.toMatchObject({ holdId: 'hold_1' });
      expect(steps).toEqual(['reserve', 'charges of acc_1 written', 'reserve']);
    }
    // Refused again after the wait: that refusal stands.
    const twice = prepareDeps(textModel(), { refusals: [broke, broke], pending: true });
    await expect(prepareChat(twice.deps, em, keyPrincipal, request({ messages: say('Hi') }))).rejects.toBe(broke);
    expect(twice.steps).toEqual(['reserve', 'charges of acc_1 written', 'reserve']);
  });

  it('refused with nothing of the account being written, or refused for another reason: the refusal at once, no second try', async () => {
    const broke = new CoreError('insufficient_balance', 'Insufficient balance.');
    const idle = prepareDeps(textModel(), { refusals: [broke], pending: false });
    await expect(prepareChat(idle.deps, em, keyPrincipal, request({ messages: say('Hi') }))).rejects.toBe(broke);
    expect(idle.steps).toEqual(['reserve']);
    const revoked = new CoreError('unauthorized', 'Revoked.');
    const other = prepareDeps(textModel(), { refusals: [revoked], pending: true });
    await expect(prepareChat(other.deps, em, keyPrincipal, request({ messages: say('Hi') }))).rejects.toBe(revoked);
    expect(other.steps).toEqual(['reserve']);
  });

  it('refuses, reserving nothing, a model whose provider this server has not configured', async () => {
    const { deps, reserved } = prepareDeps(textModel(), { providers: false });
    await expect(prepareChat(deps, em, keyPrincipal, request({ messages: say('hi') }))).rejects.toMatchObject({ code: 'unavailable', reason: 'provider_unavailable' });
    expect(reserved).toHaveLength(0);
  });

  it('the input may use exactly what the output limit leaves of the context window, not one token more', async () => {
    const messages = say('hello world, how are you today?');
    const n = countChatTokens(messages);
    expect(minChatTokens(messages)).toBeLessThan(n - 1);
    const fits = prepareDeps(textModel({ context_window: n + 20 }));
    await expect(prepareChat(fits.deps, em, keyPrincipal, request({ messages, max_tokens: 20 }))).resolves.toMatchObject({ inputTokens: n });
    const over = prepareDeps(textModel({ context_window: n + 19 }));
    const err = (await prepareChat(over.deps, em, keyPrincipal, request({ messages, max_tokens: 20 })).catch((e: unknown) => e)) as CoreError;
    expect(err).toMatchObject({ code: 'invalid_request', reason: 'context_length_exceeded' });
    // The count stops once over the limit: what it says is a lower bound.
    expect(err.message).toContain('at least');
    expect(over.reserved).toHaveLength(0);
  });

  it('input whose lower bound is exactly the room left fits when its count does', async () => {
    // One token of content and of role: the count equals its lower bound (8).
    const messages = say('a');
    expect(countChatTokens(messages)).toBe(8);
    expect(minChatTokens(messages)).toBe(8);
    const { deps } = prepareDeps(textModel({ context_window: 8 + 10 }));
    await expect(prepareChat(deps, em, keyPrincipal, request({ messages, max_tokens: 10 }))).resolves.toMatchObject({ inputTokens: 8 });
  });

  it('a request far over the window is refused from its lower bound, before any tokenizing', async () => {
    const messages = say('word '.repeat(40_000));
    expect(minChatTokens(messages)).toBeGreaterThan(1000);
    const { deps, reserved } = prepareDeps(textModel({ context_window: 1100, max_output_tokens: 100 }));
    const err = (await prepareChat(deps, em, keyPrincipal, request({ messages, max_tokens: 100 })).catch((e: unknown) => e)) as CoreError;
    expect(err).toMatchObject({ code: 'invalid_request', reason: 'context_length_exceeded' });
    expect(err.message).toContain(`at least ${minChatTokens(messages)} `);
    expect(reserved).toHaveLength(0);
  });
});

/** A chat ready to run, with a provider that yields these events (then throws `fail`, when given). */
function chatWith(events: ProviderEvent[], opts: { fail?: unknown; onEvent?: (i: number) => void } = {}): ChatRun {
  const chat: ChatProvider = {
    async *stream() {
      for (const [i, e] of events.entries()) {
        opts.onEvent?.(i);
        yield e;
      }
      if (opts.fail !== undefined) throw opts.fail;
    },
  };
  return {
    routes: [{ key: 'fake/upstream-model', provider: 'fake', model: 'upstream-model', chat }],
    prices: { inputPerMillion: 1_000_000n, outputPerMillion: 2_000_000n },
    inputTokens: 7,
    maxTokens: 10,
    holdId: 'hold_x',
    model: { id: 'test/chat', context_window: 4096, max_output_tokens: 1000 },
    request: { messages: [], options: {} },
  };
}

/** A fresh breaker per run (the real in-process one): one call's failure never skips another test's route. */
const breakers = () => createRouteBreakers({ failures: 5, windowMs: 60_000, coolDownMs: 30_000 });

/** Fake holds recording every ending. */
function fakeHolds(settleError?: unknown) {
  const calls: string[] = [];
  return {
    calls,
    holds: {
      settle: async (holdId: string, cost: bigint) => {
        calls.push(`settle ${holdId} ${cost}`);
        if (settleError !== undefined) throw settleError;
        return { holdId, status: 'settled' as const, captured: cost, amount: 27n };
      },
      release: async (holdId: string) => {
        calls.push(`release ${holdId}`);
        return { holdId, status: 'released' as const, captured: 0n, amount: 27n };
      },
    },
  };
}

async function collect(it: AsyncGenerator<ChatEvent>, stopAfter?: number): Promise<{ events: ChatEvent[]; error: unknown }> {
  const events: ChatEvent[] = [];
  try {
    for await (const e of it) {
      events.push(e);
      if (stopAfter !== undefined && events.length >= stopAfter) break;
    }
    return { events, error: undefined };
  } catch (error) {
    return { events, error };
  }
}

const open = () => new AbortController().signal;
/** 1 micro-coin per input token and 2 per output token (chatWith's prices). */
const cost = (input: number, output: number) => BigInt(input) + 2n * BigInt(output);

describe('runChat: what each ending charges', () => {
  it('a completed answer: the reported usage, clamped, charged once; `stop` when the upstream names no finish reason; empty deltas are not passed on', async () => {
    const { holds, calls } = fakeHolds();
    const run = runChat({ holds, routeBreakers: breakers() }, chatWith([{ type: 'delta', content: '' }, { type: 'delta', content: 'Hello' }, { type: 'usage', promptTokens: 5, completionTokens: 30 }]), { signal: open(), streaming: false });
    const { events, error } = await collect(run);
    expect(error).toBeUndefined();
    expect(events).toEqual([
      { type: 'delta', content: 'Hello' },
      { type: 'done', finishReason: 'stop', usage: { promptTokens: 5, completionTokens: 10, cost: cost(5, 10) } },
    ]);
    expect(calls).toEqual([`settle hold_x ${cost(5, 10)}`]);
  });

  it('the finish reason the upstream gives is the one reported', async () => {
    const { holds } = fakeHolds();
    const { events } = await collect(runChat({ holds, routeBreakers: breakers() }, chatWith([{ type: 'delta', content: 'x' }, { type: 'finish', reason: 'length' }]), { signal: open(), streaming: true }));
    expect(events.at(-1)).toMatchObject({ type: 'done', finishReason: 'length' });
  });

  it('the client stops reading: what the upstream produced is charged on our count, once', async () => {
    const { holds, calls } = fakeHolds();
    const { events } = await collect(runChat({ holds, routeBreakers: breakers() }, chatWith([{ type: 'delta', content: 'one two' }, { type: 'delta', content: ' three' }]), { signal: open(), streaming: true }), 1);
    expect(events).toEqual([{ type: 'delta', content: 'one two' }]);
    expect(calls).toEqual([`settle hold_x ${cost(7, countTextTokens('one two'))}`]);
  });

  it('aborted while the upstream still streams: what it produced is charged, on our count, and no error is raised', async () => {
    const { holds, calls } = fakeHolds();
    const ac = new AbortController();
    const chat = chatWith([{ type: 'delta', content: 'abc def' }, { type: 'usage', promptTokens: 1, completionTokens: 1 }], { fail: new Error('aborted'), onEvent: (i) => i === 1 && ac.abort() });
    const { events, error } = await collect(runChat({ holds, routeBreakers: breakers() }, chat, { signal: ac.signal, streaming: true }));
    expect(error).toBeUndefined();
    expect(events).toEqual([{ type: 'delta', content: 'abc def' }]);
    expect(calls).toEqual([`settle hold_x ${cost(7, countTextTokens('abc def'))}`]);
  });

  it('aborted when the upstream has finished: charged on our count, not the reported usage, and no done event', async () => {
    const { holds, calls } = fakeHolds();
    const ac = new AbortController();
    const chat = chatWith([{ type: 'delta', content: 'abc def' }, { type: 'usage', promptTokens: 1, completionTokens: 1 }], { onEvent: (i) => i === 1 && ac.abort() });
    const { events, error } = await collect(runChat({ holds, routeBreakers: breakers() }, chat, { signal: ac.signal, streaming: false }));
    expect(error).toBeUndefined();
    expect(events).toEqual([{ type: 'delta', content: 'abc def' }]);
    expect(calls).toEqual([`settle hold_x ${cost(7, countTextTokens('abc def'))}`]);
  });

  it('the upstream fails after streaming began: only what was delivered is charged', async () => {
    const { holds, calls } = fakeHolds();
    const { events, error } = await collect(runChat({ holds, routeBreakers: breakers() }, chatWith([{ type: 'delta', content: 'partial answer' }], { fail: new ProviderError('failed', 'reset') }), { signal: open(), streaming: true }));
    expect(events).toEqual([{ type: 'delta', content: 'partial answer' }]);
    expect(error).toMatchObject({ code: 'upstream_failed' });
    expect(calls).toEqual([`settle hold_x ${cost(7, countTextTokens('partial answer'))}`]);
  });

  it('the upstream fails after reporting usage: what was delivered is charged on our count, not what it reported', async () => {
    const { holds, calls } = fakeHolds();
    const chat = chatWith([{ type: 'delta', content: 'partial answer' }, { type: 'usage', promptTokens: 1, completionTokens: 1 }], { fail: new ProviderError('failed', 'reset') });
    const { error } = await collect(runChat({ holds, routeBreakers: breakers() }, chat, { signal: open(), streaming: true }));
    expect(error).toMatchObject({ code: 'upstream_failed' });
    expect(calls).toEqual([`settle hold_x ${cost(7, countTextTokens('partial answer'))}`]);
  });

  it('the client stops reading after the upstream reported usage: charged on our count of what it produced', async () => {
    const { holds, calls } = fakeHolds();
    const chat = chatWith([{ type: 'usage', promptTokens: 1, completionTokens: 1 }, { type: 'delta', content: 'one two' }, { type: 'delta', content: ' three' }]);
    await collect(runChat({ holds, routeBreakers: breakers() }, chat, { signal: open(), streaming: true }), 1);
    expect(calls).toEqual([`settle hold_x ${cost(7, countTextTokens('one two'))}`]);
  });

  it('the upstream fails on a request not streamed: nothing is charged, the hold is released', async () => {
    const { holds, calls } = fakeHolds();
    const { error } = await collect(runChat({ holds, routeBreakers: breakers() }, chatWith([{ type: 'delta', content: 'partial' }], { fail: new ProviderError('timeout', 'slow') }), { signal: open(), streaming: false }));
    expect(error).toMatchObject({ code: 'upstream_timeout' });
    expect(calls).toEqual(['release hold_x']);
  });

  it("an upstream's own error text is not passed on for an unexpected failure; a core error passes unchanged", async () => {
    const plain = fakeHolds();
    const { error } = await collect(runChat({ holds: plain.holds, routeBreakers: breakers() }, chatWith([], { fail: new Error('secret internals at 10.0.0.7') }), { signal: open(), streaming: false }));
    expect(error).toMatchObject({ code: 'upstream_failed' });
    expect((error as Error).message).not.toContain('secret internals');
    const core = fakeHolds();
    const refused = new CoreError('invalid_request', 'The upstream refused the request.', { reason: 'upstream_refused' });
    const second = await collect(runChat({ holds: core.holds, routeBreakers: breakers() }, chatWith([], { fail: refused }), { signal: open(), streaming: false }));
    expect(second.error).toBe(refused);
    expect(core.calls).toEqual(['release hold_x']);
  });

  it('the answer does not wait for its charge: a settle still being written lets `done` through, with the cost and the note of what was charged', async () => {
    const notes: unknown[] = [];
    const holds = {
      settle: (holdId: string, cost: bigint, note: unknown) => {
        notes.push([holdId, cost, note]);
        return new Promise<never>(() => {}); // never written
      },
      release: () => new Promise<never>(() => {}),
    };
    const { events } = await collect(runChat({ holds, routeBreakers: breakers() }, chatWith([{ type: 'delta', content: 'x' }, { type: 'finish', reason: 'length' }, { type: 'usage', promptTokens: 7, completionTokens: 3 }]), { signal: open(), streaming: false }));
    expect(events.at(-1)).toEqual({ type: 'done', finishReason: 'length', usage: { promptTokens: 7, completionTokens: 3, cost: cost(7, 3) } });
    expect(notes).toEqual([['hold_x', cost(7, 3), { promptTokens: 7, completionTokens: 3, finishReason: 'length' }]]);
  });

  it('a charge on our own count (the client went away) notes no finish reason', async () => {
    const notes: unknown[] = [];
    const holds = { settle: (_h: string, _c: bigint, note: unknown) => void notes.push(note), release: () => undefined };
    await collect(runChat({ holds, routeBreakers: breakers() }, chatWith([{ type: 'delta', content: 'one two' }, { type: 'delta', content: ' three' }]), { signal: open(), streaming: true }), 1);
    expect(notes).toEqual([{ promptTokens: 7, completionTokens: countTextTokens('one two'), finishReason: null }]);
  });
});

describe('runChat: tool calls', () => {
  const call = (index: number, args: string, id?: string, name?: string): ProviderEvent => ({ type: 'tool_call', index, arguments: args, ...(id !== undefined && { id }), ...(name !== undefined && { name }) });

  it('numbers calls 0, 1, … in the order they begin, passes the first piece as a start and each non-empty piece as arguments', async () => {
    const { holds, calls } = fakeHolds();
    const chat = chatWith([call(5, '', 'call_a', 'f'), call(5, '{"x"'), call(9, '{}', 'call_b', 'g'), call(5, ':1}'), call(9, ''), { type: 'finish', reason: 'tool_calls' }, { type: 'usage', promptTokens: 3, completionTokens: 4 }]);
    const { events, error } = await collect(runChat({ holds, routeBreakers: breakers() }, chat, { signal: open(), streaming: true }));
    expect(error).toBeUndefined();
    expect(events).toEqual([
      { type: 'tool_call_start', index: 0, id: 'call_a', name: 'f' },
      { type: 'tool_call_arguments', index: 0, arguments: '{"x"' },
      { type: 'tool_call_start', index: 1, id: 'call_b', name: 'g' },
      { type: 'tool_call_arguments', index: 1, arguments: '{}' },
      { type: 'tool_call_arguments', index: 0, arguments: ':1}' },
      { type: 'done', finishReason: 'tool_calls', usage: { promptTokens: 3, completionTokens: 4, cost: cost(3, 4) } },
    ]);
    expect(calls).toEqual([`settle hold_x ${cost(3, 4)}`]);
  });

  it('a call without an id gets one; without a name, an empty one', async () => {
    const { holds } = fakeHolds();
    const { events } = await collect(runChat({ holds, routeBreakers: breakers() }, chatWith([call(0, '{}')]), { signal: open(), streaming: false }));
    expect(events[0]).toMatchObject({ type: 'tool_call_start', index: 0, id: expect.stringMatching(/^call_[A-Za-z0-9]{24}$/), name: '' });
  });

  it('no usage reported: the calls are charged on our count of their names and arguments, with the text', async () => {
    const { holds, calls } = fakeHolds();
    await collect(runChat({ holds, routeBreakers: breakers() }, chatWith([{ type: 'delta', content: 'ok' }, call(0, '', 'c', 'lookup'), call(0, '{"q":1}')]), { signal: open(), streaming: false }));
    const output = countTextTokens('ok') + countTextTokens('lookup') + countTextTokens('{"q":1}');
    expect(output).toBeLessThanOrEqual(10);
    expect(calls).toEqual([`settle hold_x ${cost(7, output)}`]);
  });

  it('the upstream fails after a call began streaming: the delivered call is charged', async () => {
    const { holds, calls } = fakeHolds();
    const chat = chatWith([call(0, '', 'c', 'lookup'), call(0, '{"q"')], { fail: new ProviderError('failed', 'reset') });
    const { error } = await collect(runChat({ holds, routeBreakers: breakers() }, chat, { signal: open(), streaming: true }));
    expect(error).toMatchObject({ code: 'upstream_failed' });
    expect(calls).toEqual([`settle hold_x ${cost(7, countTextTokens('lookup') + countTextTokens('{"q"'))}`]);
  });

  it('the client stops reading in the middle of a call: what the upstream produced of it is charged', async () => {
    const { holds, calls } = fakeHolds();
    await collect(runChat({ holds, routeBreakers: breakers() }, chatWith([call(0, '', 'c', 'lookup'), call(0, '{"q":'), call(0, '2}')]), { signal: open(), streaming: true }), 2);
    expect(calls).toEqual([`settle hold_x ${cost(7, countTextTokens('lookup') + countTextTokens('{"q":'))}`]);
  });

  it('passes tools, tool_choice, parallel_tool_calls and the response format to the provider, and nothing when there are none', async () => {
    const seen: unknown[] = [];
    const recording = (events: ProviderEvent[]): ChatProvider => ({
      async *stream(req) {
        seen.push(req);
        yield* events;
      },
    });
    const tools = [{ name: 'f', parameters: { type: 'object' } }];
    const base = chatWith([]);
    const { holds } = fakeHolds();
    await collect(runChat({ holds, routeBreakers: breakers() }, { ...base, routes: [{ ...base.routes[0]!, chat: recording([]) }], request: { messages: [], options: {}, tools, toolChoice: 'required', parallelToolCalls: false, responseFormat: { type: 'json_object' } } }, { signal: open(), streaming: false }));
    await collect(runChat({ holds, routeBreakers: breakers() }, { ...base, routes: [{ ...base.routes[0]!, chat: recording([]) }], request: { messages: [], options: {}, tools: [] } }, { signal: open(), streaming: false }));
    expect(seen[0]).toEqual({ model: 'upstream-model', messages: [], maxTokens: 10, options: {}, tools, toolChoice: 'required', parallelToolCalls: false, responseFormat: { type: 'json_object' } });
    expect(seen[1]).toEqual({ model: 'upstream-model', messages: [], maxTokens: 10, options: {} });
  });
});

describe('prepareChat: capabilities and schemas, before anything is reserved', () => {
  const tools = [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: { a: { type: 'string' } } } } }];
  const user = [{ role: 'user', content: 'hi' }];

  it('a parameter the model does not declare is a 400 naming it and the model; nothing reserved', async () => {
    const { deps, reserved } = prepareDeps(textModel());
    await expect(prepareChat(deps, em, keyPrincipal, request({ messages: user, tools }))).rejects.toMatchObject({ code: 'invalid_request', param: 'tools', reason: 'unsupported_parameter', message: expect.stringContaining("'test/chat' does not support 'tools'") });
    await expect(prepareChat(deps, em, keyPrincipal, request({ messages: user, response_format: { type: 'json_schema', json_schema: { name: 'x' } } }))).rejects.toMatchObject({ param: 'response_format', message: expect.stringContaining("does not support 'response_format'") });
    expect(reserved).toHaveLength(0);
  });

  it('structured_outputs without response_format cannot be declared; json_object needs only response_format', async () => {
    expect(() => textModel({ supported_parameters: ['structured_outputs'] })).toThrow(/structured_outputs needs response_format/);
    const { deps, reserved } = prepareDeps(textModel({ supported_parameters: ['response_format'] }));
    await prepareChat(deps, em, keyPrincipal, request({ messages: user, response_format: { type: 'json_object' } }));
    await expect(prepareChat(deps, em, keyPrincipal, request({ messages: user, response_format: { type: 'json_schema', json_schema: { name: 'x' } } }))).rejects.toMatchObject({
      param: 'response_format',
      message: expect.stringContaining("does not support structured outputs ('response_format' of type json_schema)"),
    });
    await expect(prepareChat(deps, em, keyPrincipal, request({ messages: user, max_completion_tokens: 5 }))).rejects.toMatchObject({ param: 'max_completion_tokens' });
    await expect(prepareChat(deps, em, keyPrincipal, request({ messages: user, max_tokens: 5 }))).rejects.toMatchObject({ param: 'max_tokens', message: expect.stringContaining("'max_tokens'") });
    await expect(prepareChat(deps, em, keyPrincipal, request({ messages: user, temperature: 1 }))).rejects.toMatchObject({ param: 'temperature' });
    expect(reserved).toHaveLength(1);
  });

  it('an invalid schema is a 400 naming it; tool definitions are in the reservation', async () => {
    const { deps, reserved } = prepareDeps(textModel({ supported_parameters: ['tools', 'max_tokens'] }));
    const bad = [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: { a: { type: 7 } } } } }];
    await expect(prepareChat(deps, em, keyPrincipal, request({ messages: user, tools: bad }))).rejects.toMatchObject({ param: 'tools.0.function.parameters', reason: 'invalid_schema' });
    expect(reserved).toHaveLength(0);
    const prepared = await prepareChat(deps, em, keyPrincipal, request({ messages: user, tools, max_tokens: 10 }));
    const parsed = request({ messages: user, tools });
    expect(prepared.inputTokens).toBe(countChatTokens(parsed.messages, { tools: parsed.tools }));
    expect(prepared.inputTokens).toBeGreaterThan(countChatTokens(parsed.messages));
    expect(reserved[0]!.amount).toBe(textCost(textPrices(textModel(), 50n), prepared.inputTokens, 10));
  });
});
