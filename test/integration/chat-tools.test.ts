import OpenAI from 'openai';
import { Ajv } from 'ajv';
import addFormats from 'ajv-formats';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { MikroORM } from '@mikro-orm/postgresql';
import type { ChatCompletionChunk, ChatCompletionTool } from 'openai/resources/chat/completions';
import { parseCoins } from '../../core/money/coins.ts';
import { countChatTokens, countOutputTokens } from '../../core/chat/tokens.ts';
import { chatRequestSchema } from '../../core/chat/schema.ts';
import { useTestCatalog } from '../support/catalog.ts';
import { makeAccount, makeKey, openTestOrm } from '../support/db.ts';
import { bearer, getJson, startTestApi } from '../support/http.ts';
import { capturedFor, expectSettledWallet } from '../support/ledger.ts';
import { startFakeUpstream, type FakeUpstream } from '../fakes/openai-upstream.ts';

/**
 * Tool calling and structured outputs on chat (issue 32 part A), through the real REST app over
 * HTTP with the official `openai` client: the demo model (`test/local`, the local provider)
 * answers offline; `test/tools` is the fake OpenAI-compatible upstream, to see what is passed
 * through and parsed back. API prices of the test catalog: 1 micro-coin per input token, 2 per
 * output token.
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

const ajv = new Ajv({ strict: false });
addFormats.default(ajv);

const weather = {
  type: 'object',
  properties: {
    city: { type: 'string', minLength: 2, maxLength: 40 },
    unit: { type: 'string', enum: ['celsius', 'fahrenheit'] },
    days: { type: 'integer', minimum: 1, maximum: 7 },
  },
  required: ['city', 'unit', 'days'],
  additionalProperties: false,
};
const tools: ChatCompletionTool[] = [
  { type: 'function', function: { name: 'get_weather', description: 'The forecast for a city.', parameters: weather, strict: true } },
  { type: 'function', function: { name: 'get_time', parameters: { type: 'object', properties: { zone: { type: 'string', format: 'uuid' } }, required: ['zone'] } } },
];
const cost = (input: number, output: number) => BigInt(input) + 2n * BigInt(output);

function post(body: unknown, headers: Record<string, string> = {}) {
  return getJson(`${api.url}/api/v1/chat/completions`, {
    method: 'POST',
    headers: { ...bearer(key), 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
}

/** A tool call as the chat-completions format has it (the SDK's stream helper adds parsed_arguments). */
const plainCalls = (calls: unknown) =>
  (calls as { id: string; type: string; function: { name: string; arguments: string } }[]).map((c) => ({ id: c.id, type: c.type, function: { name: c.function.name, arguments: c.function.arguments } }));

/**
 * The longest the event loop of this process (which runs the server) was held, as the smaller
 * of a gap between two 1 ms ticks and the main thread's CPU time in it: on a loaded machine a
 * gap may be waiting to be scheduled, which no code of ours causes (test/support/loop-blocks.ts
 * measures a server process the same way). The worker thread's CPU does not count.
 */
function loopBlocks() {
  let longest = 0;
  let last = performance.now();
  let lastCpu = process.threadCpuUsage();
  const timer = setInterval(() => {
    const now = performance.now();
    const cpu = process.threadCpuUsage(lastCpu);
    longest = Math.max(longest, Math.min(now - last, (cpu.user + cpu.system) / 1000));
    last = now;
    lastCpu = process.threadCpuUsage();
  }, 1);
  return {
    stop: () => {
      clearInterval(timer);
      return longest;
    },
  };
}

async function holdFor(reference: string): Promise<bigint> {
  const [row] = await orm.em.fork().execute<{ amount: string }[]>('select amount_micro::text as amount from holds where reference = ?', [reference]);
  return BigInt(row!.amount);
}

async function ledgerRows(accountId: string): Promise<number> {
  const [row] = await orm.em.fork().execute<{ n: string }[]>('select count(*)::text as n from ledger_entries where account_id = ?', [accountId]);
  return Number(row!.n);
}

/** Our input count of a request body, as core bills it (the demo model reports no prompt count). */
function inputTokensOf(body: Record<string, unknown>): number {
  const request = chatRequestSchema.parse(body);
  return countChatTokens(request.messages, { tools: request.tools, responseFormat: request.responseFormat });
}

describe('tool calls from the demo model', () => {
  const ask = [{ role: 'user' as const, content: 'Use get_weather for Paris, please.' }];

  it('answers a message naming a tool with a call whose arguments are valid against its schema; cost = balance drop, hold ≥ cost', async () => {
    const completion = await client.chat.completions.create({ model: 'test/local', messages: ask, tools, max_tokens: 200 });
    const choice = completion.choices[0]!;
    expect(choice.finish_reason).toBe('tool_calls');
    expect(choice.message.content).toBeNull();
    expect(choice.message.tool_calls).toHaveLength(1);
    const call = choice.message.tool_calls![0]!;
    expect(call).toMatchObject({ type: 'function', id: expect.stringMatching(/^call_[A-Za-z0-9]{24}$/) });
    if (call.type !== 'function') throw new Error('a function call was expected');
    expect(call.function.name).toBe('get_weather');
    expect(ajv.validate(weather, JSON.parse(call.function.arguments)), JSON.stringify(ajv.errors)).toBe(true);

    // Billing: tool definitions are input; the call's name and arguments are output.
    const input = inputTokensOf({ model: 'test/local', messages: ask, tools });
    const output = countOutputTokens('', [{ name: call.function.name, arguments: call.function.arguments }]);
    expect(input).toBeGreaterThan(countChatTokens([{ role: 'user', content: ask[0]!.content }]) + 40);
    expect(completion.usage).toMatchObject({ prompt_tokens: input, completion_tokens: output });
    const charged = await capturedFor(orm, completion.id);
    expect(charged).toBe(cost(input, output));
    expect(await holdFor(completion.id)).toBeGreaterThanOrEqual(charged);
    expect((completion.usage as unknown as { cost_coins: number }).cost_coins).toBe(Number(charged) / 1e6);
    const state = await expectSettledWallet(orm, account.id);
    expect(state.balance.purchased).toBe(parseCoins('10') - charged);
  });

  it('the completion record (GET /chat/completions/{id}) of a tool call has its usage and finish reason', async () => {
    const completion = await client.chat.completions.create({ model: 'test/local', messages: ask, tools, stream: true, stream_options: { include_usage: true } });
    let id = '';
    let usage: unknown;
    for await (const chunk of completion) {
      id = chunk.id;
      if (chunk.usage) usage = chunk.usage;
    }
    const res = await getJson(`${api.url}/api/v1/chat/completions/${id}`, { headers: bearer(key) });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body).toMatchObject({ id, finish_reason: 'tool_calls', usage });
    expect(Math.round(res.body.usage.cost_coins * 1e6)).toBe(Number(await capturedFor(orm, id)));
  });

  it('is deterministic: the same request, the same call', async () => {
    const a = await client.chat.completions.create({ model: 'test/local', messages: ask, tools });
    const b = await client.chat.completions.create({ model: 'test/local', messages: ask, tools });
    expect(b.choices[0]!.message.tool_calls).toEqual(a.choices[0]!.message.tool_calls);
  });

  it('streams tool calls exactly as OpenAI does, and the SDK assembles them into the same message', async () => {
    const body = { model: 'test/local', messages: ask, tools, stream: true as const, stream_options: { include_usage: true } };
    const chunks: ChatCompletionChunk[] = [];
    for await (const chunk of await client.chat.completions.create(body)) chunks.push(chunk);
    const deltas = chunks.flatMap((c) => c.choices.map((ch) => ch.delta));
    // The first chunk of a call: index, id, type, name and arguments "" (and the role, being the first).
    expect(deltas[0]).toEqual({ role: 'assistant', content: null, tool_calls: [{ index: 0, id: expect.stringMatching(/^call_/), type: 'function', function: { name: 'get_weather', arguments: '' } }] });
    // The next ones: index and a piece of the arguments only.
    const pieces = deltas.slice(1).filter((d) => d.tool_calls);
    expect(pieces.length).toBeGreaterThan(1);
    for (const d of pieces) expect(Object.keys(d.tool_calls![0]!).sort()).toEqual(['function', 'index']);
    const args = pieces.map((d) => d.tool_calls![0]!.function!.arguments).join('');
    expect(ajv.validate(weather, JSON.parse(args))).toBe(true);
    expect(chunks.flatMap((c) => c.choices).at(-1)!.finish_reason).toBe('tool_calls');
    expect(chunks.at(-1)!.usage).toMatchObject({ cost_coins: expect.any(Number) });

    // The SDK's stream helper validates the chunks and assembles them.
    const final = await client.chat.completions.stream({ model: 'test/local', messages: ask, tools }).finalChatCompletion();
    const plain = await client.chat.completions.create({ model: 'test/local', messages: ask, tools });
    expect(plainCalls(final.choices[0]!.message.tool_calls)).toEqual(plain.choices[0]!.message.tool_calls);
    expect(final.choices[0]!.finish_reason).toBe('tool_calls');
    await expectSettledWallet(orm, account.id);
  });

  it('calls every tool the message names, or only the first with parallel_tool_calls: false', async () => {
    const both = [{ role: 'user' as const, content: 'Call get_weather and get_time.' }];
    const many = await client.chat.completions.create({ model: 'test/local', messages: both, tools });
    expect(many.choices[0]!.message.tool_calls!.map((c) => (c.type === 'function' ? c.function.name : c.type))).toEqual(['get_weather', 'get_time']);
    const ids = many.choices[0]!.message.tool_calls!.map((c) => c.id);
    expect(new Set(ids).size).toBe(2);
    const one = await client.chat.completions.create({ model: 'test/local', messages: both, tools, parallel_tool_calls: false });
    expect(one.choices[0]!.message.tool_calls).toHaveLength(1);
  });

  it('honours tool_choice: a forced function, "required", "none", and "auto" with no tool named', async () => {
    const hello = [{ role: 'user' as const, content: 'Hello there' }];
    const forced = await client.chat.completions.create({ model: 'test/local', messages: hello, tools, tool_choice: { type: 'function', function: { name: 'get_time' } } });
    const forcedCall = forced.choices[0]!.message.tool_calls![0]!;
    expect(forcedCall.type === 'function' && forcedCall.function.name).toBe('get_time');
    const required = await client.chat.completions.create({ model: 'test/local', messages: hello, tools, tool_choice: 'required' });
    expect(required.choices[0]!.message.tool_calls).toHaveLength(1);
    const none = await client.chat.completions.create({ model: 'test/local', messages: ask, tools, tool_choice: 'none' });
    expect(none.choices[0]!.message.tool_calls).toBeUndefined();
    expect(none.choices[0]!.message.content).toMatch(/^You said/);
    const auto = await client.chat.completions.create({ model: 'test/local', messages: hello, tools });
    expect(auto.choices[0]!.finish_reason).toBe('stop');
    expect(auto.choices[0]!.message.tool_calls).toBeUndefined();
  });

  it('round trip: the tool result in the history is answered in text that quotes it, billed as input', async () => {
    const first = await client.chat.completions.create({ model: 'test/local', messages: ask, tools });
    const message = first.choices[0]!.message;
    const call = message.tool_calls![0]!;
    const history = [...ask, message, { role: 'tool' as const, tool_call_id: call.id, content: '{"temperature":21,"sky":"clear"}' }];
    const second = await client.chat.completions.create({ model: 'test/local', messages: history, tools });
    expect(second.choices[0]!.finish_reason).toBe('stop');
    expect(second.choices[0]!.message.content).toBe('The tool get_weather returned: {"temperature":21,"sky":"clear"}');
    const input = inputTokensOf({ model: 'test/local', messages: history, tools });
    // The call in the history and the result are input: more than the first request's.
    expect(input).toBeGreaterThan(first.usage!.prompt_tokens + 20);
    expect(second.usage!.prompt_tokens).toBe(input);
    expect(await capturedFor(orm, second.id)).toBe(cost(input, second.usage!.completion_tokens));
    await expectSettledWallet(orm, account.id);
  });

  it('runTools: the SDK runs the function and the model answers with its result', async () => {
    const runner = client.chat.completions.runTools({
      model: 'test/local',
      messages: ask,
      tools: [
        {
          type: 'function',
          function: {
            name: 'get_weather',
            description: 'The forecast for a city.',
            parameters: weather,
            parse: JSON.parse,
            function: (args: { city: string }) => ({ forecast: 'sunny', city: args.city }),
          },
        },
      ],
    });
    const text = await runner.finalContent();
    expect(text).toMatch(/^The tool get_weather returned: \{"forecast":"sunny","city":/);
  });

  it('stop: the answer ends before the first stop sequence, finish_reason "stop"', async () => {
    const full = await client.chat.completions.create({ model: 'test/local', messages: [{ role: 'user', content: 'abc' }] });
    expect(full.choices[0]!.message.content).toContain('said');
    const cut = await client.chat.completions.create({ model: 'test/local', messages: [{ role: 'user', content: 'abc' }], stop: ['zzz', 'said'] });
    expect(cut.choices[0]!.message.content).toBe('You ');
    expect(cut.choices[0]!.finish_reason).toBe('stop');
    expect(cut.usage!.completion_tokens).toBe(countOutputTokens('You ', []));
  });
});

describe('structured outputs from the demo model', () => {
  const schema = {
    type: 'object',
    properties: { title: { type: 'string', minLength: 1 }, year: { type: 'integer', minimum: 1900, maximum: 2100 }, tags: { type: 'array', items: { type: 'string' }, maxItems: 3 } },
    required: ['title', 'year', 'tags'],
    additionalProperties: false,
  };

  it('json_schema: the content is an instance valid against the schema, and the schema is billed as input', async () => {
    const body = { model: 'test/local', messages: [{ role: 'user' as const, content: 'A film, please' }], response_format: { type: 'json_schema' as const, json_schema: { name: 'film', schema, strict: true } } };
    const completion = await client.chat.completions.create(body);
    const content = JSON.parse(completion.choices[0]!.message.content!);
    expect(ajv.validate(schema, content), JSON.stringify(ajv.errors)).toBe(true);
    expect(completion.usage!.prompt_tokens).toBe(inputTokensOf(body));
    expect(completion.usage!.prompt_tokens).toBeGreaterThan(countChatTokens([{ role: 'user', content: 'A film, please' }]) + 20);
    await expectSettledWallet(orm, account.id);
  });

  it('json_object: the content is a JSON object', async () => {
    const completion = await client.chat.completions.create({ model: 'test/local', messages: [{ role: 'user', content: 'JSON please' }], response_format: { type: 'json_object' } });
    const value = JSON.parse(completion.choices[0]!.message.content!);
    expect(typeof value).toBe('object');
    expect(Array.isArray(value)).toBe(false);
  });
});

describe('pass-through to an OpenAI-compatible upstream', () => {
  it('sends tools, tool_choice, parallel_tool_calls, response_format and the tool messages; parses streamed tool calls back', async () => {
    const history = [
      { role: 'user' as const, content: 'Weather?' },
      { role: 'assistant' as const, content: null, tool_calls: [{ id: 'call_a', type: 'function' as const, function: { name: 'get_weather', arguments: '{"city":"Oslo"}' } }] },
      { role: 'tool' as const, tool_call_id: 'call_a', content: 'rain' },
      { role: 'user' as const, content: 'And now?' },
    ];
    const completion = await client.chat.completions.create({
      model: 'test/tools',
      messages: history,
      tools,
      tool_choice: 'auto',
      parallel_tool_calls: true,
      response_format: { type: 'json_object' },
    });
    expect(upstream.requests.at(-1)).toMatchObject({
      model: 'tools',
      tools: [{ type: 'function', function: { name: 'get_weather', parameters: weather, strict: true } }, { type: 'function', function: { name: 'get_time' } }],
      tool_choice: 'auto',
      parallel_tool_calls: true,
      response_format: { type: 'json_object' },
      messages: [
        { role: 'user', content: 'Weather?' },
        { role: 'assistant', content: null, tool_calls: [{ id: 'call_a', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Oslo"}' } }] },
        { role: 'tool', tool_call_id: 'call_a', content: 'rain' },
        { role: 'user', content: 'And now?' },
      ],
    });
    const message = completion.choices[0]!.message;
    expect(completion.choices[0]!.finish_reason).toBe('tool_calls');
    // The upstream numbered its second call 3: calls are numbered in order, 0 and 1.
    expect(message.tool_calls).toEqual([
      { id: 'call_up1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } },
      { id: 'call_up2', type: 'function', function: { name: 'get_time', arguments: '{}' } },
    ]);
    // The upstream's usage (11 prompt, 5 completion) is charged, within the hold.
    const charged = await capturedFor(orm, completion.id);
    expect(charged).toBe(cost(11, 5));
    expect(await holdFor(completion.id)).toBeGreaterThanOrEqual(charged);

    const streamed = await client.chat.completions.stream({ model: 'test/tools', messages: [{ role: 'user', content: 'x' }], tools, tool_choice: { type: 'function', function: { name: 'get_time' } } }).finalChatCompletion();
    expect(plainCalls(streamed.choices[0]!.message.tool_calls)).toEqual(message.tool_calls);
    expect(upstream.requests.at(-1)).toMatchObject({ tool_choice: { type: 'function', function: { name: 'get_time' } } });

    const answered = await client.chat.completions.create({ model: 'test/tools', messages: history.slice(0, 3), tools });
    expect(answered.choices[0]!.message.content).toBe('Result: rain');
    await expectSettledWallet(orm, account.id);
  });
});

describe('capabilities: a parameter the model lacks is a 400 naming it and the model, before anything is reserved', () => {
  const cases: [string, Record<string, unknown>, string][] = [
    ['tools', { tools }, 'tools'],
    ['json_object', { response_format: { type: 'json_object' } }, 'response_format'],
    ['json_schema', { response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object' } } } }, 'response_format'],
  ];
  for (const [name, extra, param] of cases) {
    it(name, async () => {
      const rowsBefore = await ledgerRows(account.id);
      const res = await post({ model: 'test/plain', messages: [{ role: 'user', content: 'hi' }], ...extra });
      expect(res.status).toBe(400);
      expect(res.body.error).toMatchObject({ code: 'unsupported_parameter', param, type: 'invalid_request_error' });
      expect(res.body.error.message).toContain("'test/plain'");
      expect(await ledgerRows(account.id)).toBe(rowsBefore);
      expect((await expectSettledWallet(orm, account.id)).balance.purchased).toBe(parseCoins('10'));
    });
  }

  it('GET /models shows supported_parameters', async () => {
    const res = await getJson(`${api.url}/api/v1/models/test/local`, { headers: bearer(key) });
    expect(res.body.supported_parameters).toEqual(expect.arrayContaining(['tools', 'tool_choice', 'response_format', 'structured_outputs', 'stop', 'max_tokens']));
    const plain = await getJson(`${api.url}/api/v1/models/test/plain`, { headers: bearer(key) });
    expect(plain.body.supported_parameters).toEqual(['max_tokens', 'temperature', 'top_p', 'stop', 'seed', 'presence_penalty', 'frequency_penalty']);
  });
});

describe('limits and hostile input: a clear 400 naming the param, nothing reserved, the server keeps answering', () => {
  const user = [{ role: 'user' as const, content: 'hi' }];
  const fn = (name: string, parameters: unknown) => ({ type: 'function', function: { name, parameters } });
  // Written as text: JSON.stringify of a value nested 10,000 deep overflows the stack.
  const DEEP = `${'{"type":"object","properties":{"a":'.repeat(10_000)}{"type":"string"}${'}}'.repeat(10_000)}`;
  const deep = { $deep: true };
  const wide = { type: 'object', properties: Object.fromEntries(Array.from({ length: 20_000 }, (_, i) => [`p${i}`, { type: 'string', description: 'x'.repeat(20) }])) };
  const cases: [string, Record<string, unknown>, string, RegExp][] = [
    ['10,000 tools', { tools: Array.from({ length: 10_000 }, (_, i) => fn(`f${i}`, { type: 'object' })) }, 'tools', /at most 128 tools/],
    ['a 1 MB schema', { tools: [fn('big', wide)] }, 'tools.0.function.parameters', /larger than 64 KiB/],
    ['a schema nested 10,000 deep', { tools: [fn('deep', deep)] }, 'tools.0.function.parameters', /deeper than 32 levels/],
    ['a response_format schema nested 10,000 deep', { response_format: { type: 'json_schema', json_schema: { name: 'd', schema: deep } } }, 'response_format.json_schema.schema', /deeper than 32/],
    ['an invalid schema', { tools: [fn('bad', { type: 'object', properties: { a: { type: 'strin' } } })] }, 'tools.0.function.parameters', /not a valid JSON Schema/],
    ['an invalid response_format schema', { response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { minLength: 'long' } } } }, 'response_format.json_schema.schema', /not a valid JSON Schema/],
    ['a tool message with no matching call', { messages: [...user, { role: 'tool', tool_call_id: 'call_nobody', content: 'x' }] }, 'messages.1.tool_call_id', /no tool call/],
    ['two tools of one name', { tools: [fn('f', { type: 'object' }), fn('f', { type: 'object' })] }, 'tools.1.function.name', /earlier tool/],
    ['tool_choice naming no tool', { tools: [fn('f', { type: 'object' })], tool_choice: { type: 'function', function: { name: 'g' } } }, 'tool_choice.function.name', /names no tool/],
    ['tool_choice without tools', { tool_choice: 'auto' }, 'tool_choice', /only allowed when tools/],
    ['a tool schema whose $ref names itself', { tools: [fn('loop', { type: 'object', properties: { a: { $ref: '#/properties/a' } } })] }, 'tools.0.function.parameters', /refers back to itself through \$ref .*#\/properties\/a → #\/properties\/a/],
    ['two definitions that name each other', { tools: [fn('loop', { $ref: '#/definitions/a', definitions: { a: { $ref: '#/definitions/b' }, b: { $ref: '#/definitions/a' } } })] }, 'tools.0.function.parameters', /refers back to itself through \$ref/],
    ['a response_format schema no value satisfies (the demo model answered 502)', { response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object', properties: { n: { type: 'integer', minimum: 10, maximum: 1 } }, required: ['n'] } } } }, 'response_format.json_schema.schema', /no value can satisfy this schema .*required property "n"/],
    ['tool_calls on a user message', { messages: [{ role: 'user', content: 'x', tool_calls: [{ id: 'c', type: 'function', function: { name: 'f', arguments: '{}' } }] }] }, 'messages.0.tool_calls', /only allowed on assistant/],
  ];

  for (const [name, extra, param, message] of cases) {
    it(name, async () => {
      const rowsBefore = await ledgerRows(account.id);
      const blocks = loopBlocks();
      let healthy = 0;
      let checking = true;
      const health = (async () => {
        while (checking) {
          const res = await fetch(`${api.url}/healthz`);
          if (res.ok) healthy++;
          await res.arrayBuffer();
        }
      })();
      const res = await post(JSON.stringify({ model: 'test/local', messages: user, ...extra }).replace('{"$deep":true}', DEEP)).finally(() => {
        checking = false;
      });
      await health;
      const longestBlockMs = blocks.stop();
      expect(res.status, JSON.stringify(res.body).slice(0, 300)).toBe(400);
      expect(res.body.error).toMatchObject({ type: 'invalid_request_error', param });
      expect(res.body.error.message).toMatch(message);
      expect(res.body.error.message).toContain(`'${param}'`);
      expect(healthy).toBeGreaterThan(0);
      // The server's event loop (this process) was never held long while it refused the request.
      expect(longestBlockMs).toBeLessThan(250);
      expect(await ledgerRows(account.id)).toBe(rowsBefore);
    });
  }
});

describe('compiling schemas does not hold the event loop', () => {
  it('10 valid tools of about 60 KB each: Ajv compiles them in its worker while /healthz answers', async () => {
    const big = (k: number) => ({
      type: 'object',
      properties: Object.fromEntries(Array.from({ length: 1000 }, (_, i) => [`p${i}_${k}`, { type: 'string', description: `some text ${i}` }])),
    });
    const many = Array.from({ length: 10 }, (_, k) => ({ type: 'function', function: { name: `t${k}`, parameters: big(k) } }));
    // Loading the tokenizer's ranks (once per process, ~0.5 s) is not what this measures.
    expect((await post({ model: 'test/local', messages: [{ role: 'user', content: 'warm up' }], max_tokens: 5 })).status).toBe(200);
    const blocks = loopBlocks();
    let healthy = 0;
    let checking = true;
    const health = (async () => {
      while (checking) {
        const res = await fetch(`${api.url}/healthz`);
        if (res.ok) healthy++;
        await res.arrayBuffer();
      }
    })();
    const res = await post({ model: 'test/local', messages: [{ role: 'user', content: 'hi' }], tools: many }).finally(() => {
      checking = false;
    });
    await health;
    const longestBlockMs = blocks.stop();
    // The tools are far over the test model's context window: refused once counted, nothing reserved.
    expect(res.status).toBe(400);
    expect(res.body.error).toMatchObject({ code: 'context_length_exceeded', param: 'messages' });
    expect(healthy).toBeGreaterThan(0);
    expect(longestBlockMs).toBeLessThan(250);
    await expectSettledWallet(orm, account.id);
  });
});

describe('concurrency: 200 tool calls at once on a small balance never overspend', () => {
  it('final balance ≥ 0, the ledger sums to the balance, and the drop is what was charged', async () => {
    const poor = await makeAccount(orm, { coins: '0.02' });
    const poorKey = (await makeKey(orm, poor.id)).key;
    const body = { model: 'test/local', messages: [{ role: 'user', content: 'Use get_weather now' }], tools, max_tokens: 100 };
    const results = await Promise.all(Array.from({ length: 200 }, () => post(body, bearer(poorKey))));
    const ok = results.filter((r) => r.status === 200);
    const refused = results.filter((r) => r.status === 402);
    expect(ok.length + refused.length).toBe(200);
    expect(ok.length).toBeGreaterThan(0);
    expect(refused.length).toBeGreaterThan(0);
    for (const r of ok) expect(r.body.choices[0].finish_reason).toBe('tool_calls');
    const state = await expectSettledWallet(orm, poor.id);
    expect(state.balance.purchased).toBeGreaterThanOrEqual(0n);
    let charged = 0n;
    for (const r of ok) charged += await capturedFor(orm, r.body.id);
    expect(parseCoins('0.02') - state.balance.purchased).toBe(charged);
    expect(ok.reduce((sum, r) => sum + Math.round(r.body.usage.cost_coins * 1e6), 0)).toBe(Number(charged));
  });
});
