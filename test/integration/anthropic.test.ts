import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { parse } from 'yaml';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { anthropicProvider } from '../../adapters/providers/anthropic.ts';
import { JSON_OBJECT_INSTRUCTION } from '../../adapters/providers/anthropic-request.ts';
import { validateCatalog } from '../../core/catalog/catalog.ts';
import { textCost, textPrices } from '../../core/catalog/pricing.ts';
import type { TextModel } from '../../core/catalog/schema.ts';
import { ProviderError, type ChatProvider, type ProviderChatRequest, type ProviderEvent } from '../../core/ports.ts';
import { ANTHROPIC_FAKE_KEY, startFakeAnthropic, type FakeAnthropic } from '../fakes/anthropic-upstream.ts';

/**
 * The Anthropic Messages API adapter against the fake of test/fakes/anthropic-upstream.ts:
 * the request it sends (the fake refuses what Anthropic would), the stream's events as the
 * port's, and every documented error as a ProviderError in our words, the upstream's own
 * message only in the operator's log.
 */
let fake: FakeAnthropic;
let provider: ChatProvider;
const logged: { fields: object; message: string }[] = [];

beforeAll(async () => {
  fake = await startFakeAnthropic();
  provider = anthropicProvider({ baseUrl: fake.url, apiKey: ANTHROPIC_FAKE_KEY, timeoutMs: 500, version: '2023-06-01', log: (fields, message) => logged.push({ fields, message }) });
});
afterAll(async () => {
  await fake.close();
});

const ask = (model: string, extra: Partial<ProviderChatRequest> = {}): ProviderChatRequest => ({
  model,
  messages: [{ role: 'user', content: 'Hi' }],
  maxTokens: 100,
  options: {},
  ...extra,
});

async function collect(request: ProviderChatRequest, via: ChatProvider = provider): Promise<ProviderEvent[]> {
  const events: ProviderEvent[] = [];
  for await (const e of via.stream(request, new AbortController().signal)) events.push(e);
  return events;
}

async function failure(request: ProviderChatRequest, via: ChatProvider = provider): Promise<{ error: ProviderError; events: ProviderEvent[] }> {
  const events: ProviderEvent[] = [];
  try {
    for await (const e of via.stream(request, new AbortController().signal)) events.push(e);
  } catch (err) {
    expect(err).toBeInstanceOf(ProviderError);
    return { error: err as ProviderError, events };
  }
  throw new Error(`${request.model} did not fail`);
}

const lastRequest = () => fake.requests.at(-1)!;
const text = (events: ProviderEvent[]) => events.flatMap((e) => (e.type === 'delta' ? [e.content] : [])).join('');

describe('the stream as the port’s events', () => {
  it('text: deltas, finish stop, one usage event; sends the key and version headers', async () => {
    const events = await collect(ask('claude-ok'));
    expect(events).toEqual([
      { type: 'delta', content: 'Hello' },
      { type: 'delta', content: ' from' },
      { type: 'delta', content: ' Claude' },
      { type: 'finish', reason: 'stop' },
      { type: 'usage', promptTokens: 25, completionTokens: 7 },
    ]);
    expect(fake.headers.at(-1)).toMatchObject({ 'x-api-key': ANTHROPIC_FAKE_KEY, 'anthropic-version': '2023-06-01' });
    expect(fake.headers.at(-1)!.authorization).toBeUndefined();
  });

  it('cache tokens count as input: input + cache_creation + cache_read', async () => {
    const events = await collect(ask('claude-cache'));
    expect(events.filter((e) => e.type === 'usage')).toEqual([{ type: 'usage', promptTokens: 20, completionTokens: 7 }]);
  });

  it.each([
    ['claude-stop', 'stop'],
    ['claude-max', 'length'],
    ['claude-refusal', 'content_filter'],
  ])('%s: stop reason → finish %s', async (model, reason) => {
    const events = await collect(ask(model));
    expect(events.filter((e) => e.type === 'finish')).toEqual([{ type: 'finish', reason }]);
  });

  it('tool_use blocks: a tool_call per block (block index, id, name) and its input in pieces; finish tool_calls', async () => {
    const events = await collect(ask('claude-tools', { tools: [{ name: 'get_weather', parameters: { type: 'object' } }, { name: 'get_time' }] }));
    expect(events).toEqual([
      { type: 'delta', content: 'Let me check.' },
      { type: 'tool_call', index: 1, id: 'toolu_01weather', name: 'get_weather', arguments: '' },
      { type: 'tool_call', index: 1, arguments: '{"city": "Pa' },
      { type: 'tool_call', index: 1, arguments: 'ris", "unit": "celsius"' },
      { type: 'tool_call', index: 1, arguments: ', "days": 2}' },
      { type: 'tool_call', index: 2, id: 'toolu_02time', name: 'get_time', arguments: '' },
      { type: 'tool_call', index: 2, arguments: '' },
      { type: 'finish', reason: 'tool_calls' },
      { type: 'usage', promptTokens: 25, completionTokens: 30 },
    ]);
  });

  it('json_schema: a forced tool named after the schema; its input comes back as the text, finish stop', async () => {
    const schema = { type: 'object', properties: { city: { type: 'string' }, temperature: { type: 'number' } }, required: ['city', 'temperature'] };
    const events = await collect(ask('claude-schema', { responseFormat: { type: 'json_schema', name: 'forecast', description: 'A forecast.', schema } }));
    expect(JSON.parse(text(events))).toEqual({ city: 'Paris', temperature: 21 });
    expect(events.some((e) => e.type === 'tool_call')).toBe(false);
    expect(events.filter((e) => e.type === 'finish')).toEqual([{ type: 'finish', reason: 'stop' }]);
    expect(lastRequest()).toMatchObject({
      tools: [{ name: 'forecast', description: 'A forecast.', input_schema: schema }],
      tool_choice: { type: 'tool', name: 'forecast' },
    });
  });

  it('json_object: an instruction appended to the system prompt, no tool', async () => {
    await collect(ask('claude-ok', { messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hi' }], responseFormat: { type: 'json_object' } }));
    expect(lastRequest().system).toBe(`Be brief.\n\n${JSON_OBJECT_INSTRUCTION}`);
    expect(lastRequest().tools).toBeUndefined();
  });
});

describe('the request in Anthropic’s shape', () => {
  it('system and developer join as the system prompt in order; same-role messages merge; stop, max_tokens, temperature, top_p pass; seed and penalties are not sent', async () => {
    await collect(
      ask('claude-ok', {
        messages: [
          { role: 'system', content: 'You are terse.' },
          { role: 'user', content: 'One' },
          { role: 'developer', content: 'Answer in French.' },
          { role: 'user', content: 'Two' },
          { role: 'assistant', content: 'Un' },
          { role: 'assistant', content: 'Deux' },
          { role: 'user', content: 'Three' },
        ],
        maxTokens: 321,
        options: { stop: '###', temperature: 0.3, top_p: 0.9, seed: 7, presence_penalty: 0.5, frequency_penalty: 0.2, user: 'customer-42' },
      }),
    );
    expect(lastRequest()).toEqual({
      model: 'claude-ok',
      max_tokens: 321,
      system: 'You are terse.\n\nAnswer in French.',
      messages: [
        { role: 'user', content: [{ type: 'text', text: 'One' }, { type: 'text', text: 'Two' }] },
        { role: 'assistant', content: [{ type: 'text', text: 'Un' }, { type: 'text', text: 'Deux' }] },
        { role: 'user', content: [{ type: 'text', text: 'Three' }] },
      ],
      temperature: 0.3,
      top_p: 0.9,
      stop_sequences: ['###'],
      metadata: { user_id: 'customer-42' },
      stream: true,
    });
  });

  it('tools, tool choices and parallel_tool_calls: false', async () => {
    const tools = [{ name: 'get_weather', description: 'The forecast.', parameters: { type: 'object', properties: { city: { type: 'string' } } } }, { name: 'get_time' }];
    const choices = [
      ['auto', { type: 'auto' }],
      ['required', { type: 'any' }],
      ['none', { type: 'none' }],
      [{ name: 'get_time' }, { type: 'tool', name: 'get_time' }],
    ] as const;
    for (const [choice, expected] of choices) {
      await collect(ask('claude-ok', { tools, toolChoice: choice }));
      expect(lastRequest().tool_choice).toEqual(expected);
    }
    expect(lastRequest().tools).toEqual([
      { name: 'get_weather', description: 'The forecast.', input_schema: { type: 'object', properties: { city: { type: 'string' } } } },
      { name: 'get_time', input_schema: { type: 'object', properties: {} } },
    ]);
    await collect(ask('claude-ok', { tools, parallelToolCalls: false }));
    expect(lastRequest().tool_choice).toEqual({ type: 'auto', disable_parallel_tool_use: true });
    await collect(ask('claude-ok', { tools, toolChoice: 'required', parallelToolCalls: false }));
    expect(lastRequest().tool_choice).toEqual({ type: 'any', disable_parallel_tool_use: true });
    await collect(ask('claude-ok', { tools }));
    expect(lastRequest().tool_choice).toBeUndefined();
    // json_schema beside the client's own tools: the schema tool is offered, the client's choice stays.
    await collect(ask('claude-ok', { tools, toolChoice: 'auto', responseFormat: { type: 'json_schema', name: 'answer', schema: { type: 'object' } } }));
    expect(lastRequest().tool_choice).toEqual({ type: 'auto' });
    expect((lastRequest().tools as { name: string }[]).map((t) => t.name)).toEqual(['get_weather', 'get_time', 'answer']);
  });

  it('assistant tool calls become tool_use blocks (parsed input); consecutive tool results one user message of tool_result blocks', async () => {
    const events = await collect(
      ask('claude-tools', {
        tools: [{ name: 'get_weather' }, { name: 'get_time' }],
        messages: [
          { role: 'user', content: 'Weather and time in Paris?' },
          {
            role: 'assistant',
            content: '',
            toolCalls: [
              { id: 'toolu_01weather', name: 'get_weather', arguments: '{"city":"Paris"}' },
              { id: 'toolu_02time', name: 'get_time', arguments: '' },
            ],
          },
          { role: 'tool', content: '21 °C', toolCallId: 'toolu_01weather' },
          { role: 'tool', content: '14:05', toolCallId: 'toolu_02time' },
        ],
      }),
    );
    expect(lastRequest().messages).toEqual([
      { role: 'user', content: [{ type: 'text', text: 'Weather and time in Paris?' }] },
      {
        role: 'assistant',
        content: [
          { type: 'tool_use', id: 'toolu_01weather', name: 'get_weather', input: { city: 'Paris' } },
          { type: 'tool_use', id: 'toolu_02time', name: 'get_time', input: {} },
        ],
      },
      {
        role: 'user',
        content: [
          { type: 'tool_result', tool_use_id: 'toolu_01weather', content: '21 °C' },
          { type: 'tool_result', tool_use_id: 'toolu_02time', content: '14:05' },
        ],
      },
    ]);
    expect(text(events)).toBe('Results: 21 °C | 14:05');
  });

  it('a history tool call whose arguments are not a JSON object is refused before anything is sent', async () => {
    const before = fake.requests.length;
    const { error } = await failure(
      ask('claude-ok', { messages: [{ role: 'user', content: 'x' }, { role: 'assistant', content: '', toolCalls: [{ id: 't1', name: 'f', arguments: '[1,' }] }, { role: 'tool', content: 'r', toolCallId: 't1' }] }),
    );
    expect(error).toMatchObject({ kind: 'refused', code: 'invalid_input' });
    expect(fake.requests.length).toBe(before);
  });
});

describe('errors in our words', () => {
  it.each([
    ['status-400', 'refused', 'invalid_input', 400],
    ['status-400-policy', 'refused', 'content_policy', 400],
    ['status-413', 'refused', 'invalid_input', 413],
    ['status-401', 'failed', undefined, 401],
    ['status-403', 'failed', undefined, 403],
    ['status-402', 'failed', undefined, 402],
    ['status-404', 'failed', undefined, 404],
    ['status-500', 'failed', undefined, 500],
    ['status-504', 'failed', undefined, 504],
    ['status-529', 'failed', undefined, 529],
  ] as const)('%s → %s (%s)', async (model, kind, code, status) => {
    logged.length = 0;
    const { error, events } = await failure(ask(model));
    expect(events).toEqual([]);
    expect(error).toMatchObject({ kind, code, status, retryable: kind !== 'refused' });
    expect(error.message).not.toMatch(/scripted|sk-ant|filtering/);
    // What Anthropic said is the operator's, in the log.
    expect(JSON.stringify(logged)).toMatch(/scripted|filtering/);
  });

  it('429: failed with status 429 and retryAfterMs from retry-after', async () => {
    const { error } = await failure(ask('claude-429'));
    expect(error).toMatchObject({ kind: 'failed', status: 429, retryAfterMs: 7000, retryable: true });
    expect(error.message).not.toMatch(/per-minute/);
  });

  it('our key refused (a wrong key): failed 401, retryable, the key in no message', async () => {
    const wrong = anthropicProvider({ baseUrl: fake.url, apiKey: 'sk-ant-wrong', timeoutMs: 500, version: '2023-06-01' });
    const { error } = await failure(ask('claude-ok'), wrong);
    expect(error).toMatchObject({ kind: 'failed', status: 401, retryable: true });
    expect(error.message).not.toContain('sk-ant');
  });

  it('an error event mid-stream (overloaded_error): failed after what came before', async () => {
    logged.length = 0;
    const { error, events } = await failure(ask('claude-error-mid'));
    expect(text(events)).toBe('Partial');
    expect(error).toMatchObject({ kind: 'failed', message: 'it is overloaded' });
    expect(JSON.stringify(logged)).toContain('overloaded_error');
  });

  it('malformed JSON in an event: failed', async () => {
    const { error } = await failure(ask('claude-malformed'));
    expect(error).toMatchObject({ kind: 'failed', message: 'it sent an unreadable answer' });
  });

  it('no headers within the time-out: timeout; a stall between events too', async () => {
    expect((await failure(ask('claude-hang'))).error.kind).toBe('timeout');
    const stalled = await failure(ask('claude-stall'));
    expect(stalled.error.kind).toBe('timeout');
    expect(text(stalled.events)).toBe('Partial');
  });

  it('a connection dropped before the answer, and a refused connection: failed (retryable)', async () => {
    expect((await failure(ask('claude-reset'))).error).toMatchObject({ kind: 'failed', retryable: true });
    const closed = http.createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const { port } = closed.address() as AddressInfo;
    await new Promise<void>((resolve) => closed.close(() => resolve()));
    const nowhere = anthropicProvider({ baseUrl: `http://127.0.0.1:${port}`, apiKey: ANTHROPIC_FAKE_KEY, timeoutMs: 500, version: '2023-06-01' });
    expect((await failure(ask('claude-ok'), nowhere)).error).toMatchObject({ kind: 'failed', message: 'it could not be reached' });
  });

  it('a consumer that stops mid-stream drops the upstream request; finished answers reuse the connection', async () => {
    const before = fake.aborted;
    const controller = new AbortController();
    for await (const e of provider.stream(ask('claude-stall'), controller.signal)) {
      expect(e).toEqual({ type: 'delta', content: 'Partial' });
      break;
    }
    await vi.waitFor(() => expect(fake.aborted).toBe(before + 1));

    await collect(ask('claude-ok'));
    const connections = fake.connections;
    for (let i = 0; i < 5; i++) await collect(ask('claude-ok'));
    expect(fake.connections).toBe(connections);
  });

  it('an aborted request ends with the abort, not a ProviderError', async () => {
    const controller = new AbortController();
    const pending = (async () => {
      for await (const _ of provider.stream(ask('claude-hang'), controller.signal)) void _;
    })();
    controller.abort();
    await expect(pending).rejects.not.toBeInstanceOf(ProviderError);
  });
});

describe('the Anthropic catalog example (config/models.yaml)', () => {
  /** The block between `# example: name` and `# end`, uncommented. */
  const block = (name: string) => {
    const lines = fs.readFileSync('config/models.yaml', 'utf8').split('\n');
    const start = lines.findIndex((l) => l.trim() === `# example: ${name}`);
    const end = lines.findIndex((l, i) => i > start && l.trim() === '# end');
    expect(start).toBeGreaterThan(-1);
    return parse(lines.slice(start + 1, end).map((l) => l.replace(/^(\s*)# ?/, '$1')).join('\n')) as unknown;
  };

  it('loads, with the defaults of the anthropic kind, and prices Sonnet 4.5 at Anthropic’s list price at 100%', () => {
    const catalog = validateCatalog({ providers: block('anthropic providers'), models: block('anthropic models') }, 100n);
    expect(catalog.parsed.providers.anthropic).toEqual({
      kind: 'anthropic',
      base_url: 'https://api.anthropic.com',
      api_key_env: 'ANTHROPIC_API_KEY',
      timeout_seconds: 120,
      // The whole answer's limit (adapters/providers/timeouts.ts), by default.
      deadline_seconds: 600,
      anthropic_version: '2023-06-01',
    });
    const sonnet = catalog.parsed.models.find((m) => m.id === 'anthropic/claude-sonnet-4-5') as TextModel;
    expect(sonnet.provider).toEqual({ name: 'anthropic', model: 'claude-sonnet-4-5' });
    expect(sonnet.supported_parameters).not.toContain('seed');
    // $3 per million input, $15 per million output: a million of each is $18 = 18000 coins.
    expect(textCost(textPrices(sonnet, 100n), 1_000_000, 1_000_000)).toBe(18_000_000_000n);
  });
});
