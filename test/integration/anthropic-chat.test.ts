import OpenAI from 'openai';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { MikroORM } from '@mikro-orm/postgresql';
import type { ChatCompletionChunk, ChatCompletionTool } from 'openai/resources/chat/completions';
import { createProviderRegistry } from '../../adapters/providers/registry.ts';
import { seedModels, validateCatalog } from '../../core/catalog/catalog.ts';
import { countChatTokens } from '../../core/chat/tokens.ts';
import { parseCoins } from '../../core/money/coins.ts';
import { makeAccount, makeKey, openTestOrm } from '../support/db.ts';
import { startTestApi } from '../support/http.ts';
import { capturedFor, expectSettledWallet } from '../support/ledger.ts';
import { ANTHROPIC_FAKE_KEY, startFakeAnthropic, type FakeAnthropic } from '../fakes/anthropic-upstream.ts';

/**
 * Chat through the real REST app over HTTP with the official `openai` client, on models whose
 * route is the Anthropic adapter aimed at the fake Messages API: the stream, the tool round
 * trip, and billing from Anthropic's usage. In-app prices of 2 and 4 coins per million tokens
 * (API_PRICE_PERCENT 50 in tests): 1 micro-coin per input token, 2 per output token.
 */
let orm: MikroORM;
let fake: FakeAnthropic;
let api: Awaited<ReturnType<typeof startTestApi>>;

const model = (id: string, upstream: string) => ({
  id: `anthropic-e2e/${id}`,
  name: `Anthropic ${id}`,
  type: 'text',
  generation_types: ['chat'],
  provider: { name: 'anthropic-fake', model: upstream },
  pricing: { input_per_million: 2, output_per_million: 4 },
  context_window: 200_000,
  max_output_tokens: 1000,
  default_max_tokens: 100,
  supported_parameters: ['max_tokens', 'temperature', 'top_p', 'stop', 'tools', 'tool_choice', 'parallel_tool_calls', 'response_format', 'structured_outputs'],
});

beforeAll(async () => {
  orm = await openTestOrm();
  fake = await startFakeAnthropic();
  const catalog = validateCatalog(
    {
      providers: { 'anthropic-fake': { kind: 'anthropic', base_url: fake.url, api_key_env: 'FAKE_ANTHROPIC_KEY', timeout_seconds: 2 } },
      models: [model('ok', 'claude-ok'), model('tools', 'claude-tools'), model('oversized', 'claude-oversized'), model('schema', 'claude-schema'), model('invalid', 'status-400'), model('busy', 'claude-429')],
    },
    50n,
  );
  await seedModels(orm.em.fork(), catalog);
  const providers = createProviderRegistry(catalog.parsed.providers, { FAKE_ANTHROPIC_KEY: ANTHROPIC_FAKE_KEY });
  api = await startTestApi(orm, { providers });
});
afterAll(async () => {
  await api.close();
  await fake.close();
  await orm.close();
});

let account: { id: string };
let client: OpenAI;
beforeEach(async () => {
  account = await makeAccount(orm, { coins: '10' });
  const { key } = await makeKey(orm, account.id);
  client = new OpenAI({ apiKey: key, baseURL: `${api.url}/api/v1`, maxRetries: 0 });
});

/** Long enough that our input count is above the 25 input tokens the fake reports, so the reported count is what is billed. */
const system = 'You are a concise assistant that answers questions about the weather in European capitals.';
const question = 'Please say hello to me in a friendly way, and then tell me something short about Paris in the spring.';
const messages = [
  { role: 'system' as const, content: system },
  { role: 'user' as const, content: question },
];
const cost = (input: number, output: number) => BigInt(input) + 2n * BigInt(output);

describe('a model routed to Anthropic, through the openai SDK', () => {
  it('streams the text; the last chunk carries usage with cost_coins, charged from Anthropic’s usage', async () => {
    expect(countChatTokens(messages)).toBeGreaterThan(25);
    const stream = await client.chat.completions.create({ model: 'anthropic-e2e/ok', messages, stream: true, stream_options: { include_usage: true }, max_tokens: 200, stop: ['###'] });
    const chunks: ChatCompletionChunk[] = [];
    for await (const chunk of stream) chunks.push(chunk);
    expect(chunks.map((c) => c.choices[0]?.delta.content ?? '').join('')).toBe('Hello from Claude');
    expect(chunks.flatMap((c) => c.choices).at(-1)!.finish_reason).toBe('stop');
    const last = chunks.at(-1)!;
    // Anthropic's counts (25 in, 7 out), not ours of the text.
    expect(last.usage).toMatchObject({ prompt_tokens: 25, completion_tokens: 7, total_tokens: 32 });
    const charged = await capturedFor(orm, last.id);
    expect(charged).toBe(cost(25, 7));
    expect((last.usage as unknown as { cost_coins: number }).cost_coins).toBe(Number(charged) / 1e6);
    const state = await expectSettledWallet(orm, account.id);
    expect(state.balance.purchased).toBe(parseCoins('10') - charged);
    // What reached Anthropic: the system prompt apart, our output limit, the stop sequence.
    expect(fake.requests.at(-1)).toMatchObject({
      model: 'claude-ok',
      system,
      messages: [{ role: 'user', content: [{ type: 'text', text: question }] }],
      max_tokens: 200,
      stop_sequences: ['###'],
      stream: true,
    });
  });

  it('reported output above the limit is clamped to the output limit (the hold)', async () => {
    const completion = await client.chat.completions.create({ model: 'anthropic-e2e/oversized', messages, max_tokens: 40 });
    expect(completion.usage).toMatchObject({ prompt_tokens: 25, completion_tokens: 40 });
    expect(await capturedFor(orm, completion.id)).toBe(cost(25, 40));
    await expectSettledWallet(orm, account.id);
  });

  it('tool round trip: tool_use blocks arrive as tool_calls; the results go back as tool_result blocks and are answered', async () => {
    const tools: ChatCompletionTool[] = [
      { type: 'function', function: { name: 'get_weather', description: 'The forecast for a city.', parameters: { type: 'object', properties: { city: { type: 'string' }, unit: { type: 'string' }, days: { type: 'integer' } } } } },
      { type: 'function', function: { name: 'get_time', parameters: { type: 'object', properties: {} } } },
    ];
    const ask = [{ role: 'user' as const, content: 'Weather and time in Paris?' }];
    const first = await client.chat.completions.create({ model: 'anthropic-e2e/tools', messages: ask, tools, parallel_tool_calls: true });
    const message = first.choices[0]!.message;
    expect(first.choices[0]!.finish_reason).toBe('tool_calls');
    expect(message.content).toBe('Let me check.');
    const calls = message.tool_calls!.map((c) => (c.type === 'function' ? { id: c.id, name: c.function.name, arguments: c.function.arguments } : c));
    expect(calls).toEqual([
      { id: 'toolu_01weather', name: 'get_weather', arguments: '{"city": "Paris", "unit": "celsius", "days": 2}' },
      { id: 'toolu_02time', name: 'get_time', arguments: '' },
    ]);
    expect(fake.requests.at(-1)).toMatchObject({ tools: [{ name: 'get_weather', input_schema: { type: 'object' } }, { name: 'get_time' }] });
    expect(first.usage!.completion_tokens).toBe(30);
    expect(await capturedFor(orm, first.id)).toBe(cost(first.usage!.prompt_tokens, 30));

    const history = [
      ...ask,
      message,
      { role: 'tool' as const, tool_call_id: 'toolu_01weather', content: '21 °C, clear' },
      { role: 'tool' as const, tool_call_id: 'toolu_02time', content: '14:05' },
    ];
    const second = await client.chat.completions.create({ model: 'anthropic-e2e/tools', messages: history, tools });
    expect(second.choices[0]!.message.content).toBe('Results: 21 °C, clear | 14:05');
    expect(second.choices[0]!.finish_reason).toBe('stop');
    expect(fake.requests.at(-1)!.messages).toEqual([
      { role: 'user', content: [{ type: 'text', text: 'Weather and time in Paris?' }] },
      {
        role: 'assistant',
        content: [
          { type: 'text', text: 'Let me check.' },
          { type: 'tool_use', id: 'toolu_01weather', name: 'get_weather', input: { city: 'Paris', unit: 'celsius', days: 2 } },
          { type: 'tool_use', id: 'toolu_02time', name: 'get_time', input: {} },
        ],
      },
      {
        role: 'user',
        content: [
          { type: 'tool_result', tool_use_id: 'toolu_01weather', content: '21 °C, clear' },
          { type: 'tool_result', tool_use_id: 'toolu_02time', content: '14:05' },
        ],
      },
    ]);
    await expectSettledWallet(orm, account.id);
  });

  it('a streamed tool call: the SDK’s stream helper assembles the same calls from the chunks', async () => {
    const tools: ChatCompletionTool[] = [
      { type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } },
      { type: 'function', function: { name: 'get_time', parameters: { type: 'object', properties: {} } } },
    ];
    const final = await client.chat.completions.stream({ model: 'anthropic-e2e/tools', messages: [{ role: 'user', content: 'Weather in Paris?' }], tools }).finalChatCompletion();
    const calls = final.choices[0]!.message.tool_calls!.map((c) => (c.type === 'function' ? [c.id, c.function.name, c.function.arguments] : []));
    expect(calls).toEqual([
      ['toolu_01weather', 'get_weather', '{"city": "Paris", "unit": "celsius", "days": 2}'],
      ['toolu_02time', 'get_time', ''],
    ]);
    expect(final.choices[0]!.finish_reason).toBe('tool_calls');
    await expectSettledWallet(orm, account.id);
  });

  it('structured output: the forced tool’s input is the message content, valid JSON, finish stop', async () => {
    const schema = { type: 'object', properties: { city: { type: 'string' }, temperature: { type: 'number' } }, required: ['city', 'temperature'], additionalProperties: false };
    const completion = await client.chat.completions.create({
      model: 'anthropic-e2e/schema',
      messages,
      response_format: { type: 'json_schema', json_schema: { name: 'forecast', schema, strict: true } },
    });
    expect(JSON.parse(completion.choices[0]!.message.content!)).toEqual({ city: 'Paris', temperature: 21 });
    expect(completion.choices[0]!.finish_reason).toBe('stop');
    expect(fake.requests.at(-1)).toMatchObject({ tool_choice: { type: 'tool', name: 'forecast' }, tools: [{ name: 'forecast', input_schema: { required: ['city', 'temperature'] } }] });
    await expectSettledWallet(orm, account.id);
  });

  it('an upstream refusal or rate limit: an error in our words, never Anthropic’s body, nothing charged', async () => {
    // An invalid request is `refused`: the customer's 400; a rate limit is `failed`, and with no
    // other route to fall back to, an upstream failure (502). Never a 500.
    const statuses = { 'anthropic-e2e/invalid': [400], 'anthropic-e2e/busy': [502] };
    for (const [id, allowed] of Object.entries(statuses)) {
      const error = (await client.chat.completions.create({ model: id, messages }).catch((err: unknown) => err)) as InstanceType<typeof OpenAI.APIError>;
      expect(error).toBeInstanceOf(OpenAI.APIError);
      expect(allowed).toContain(error.status);
      expect(error.message).not.toMatch(/scripted|sk-ant|per-minute/);
    }
    const state = await expectSettledWallet(orm, account.id);
    expect(state.balance.purchased).toBe(parseCoins('10'));
  });
});
