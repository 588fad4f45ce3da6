import { createOpenAI } from '@ai-sdk/openai';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { tool as langchainTool } from '@langchain/core/tools';
import { HumanMessage, type BaseMessage } from '@langchain/core/messages';
import { ChatOpenAI } from '@langchain/openai';
import { generateObject, generateText, stepCountIs, streamText, tool, type LanguageModel } from 'ai';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import type { MikroORM } from '@mikro-orm/postgresql';
import { useTestCatalog } from '../support/catalog.ts';
import { makeAccount, makeKey, openTestOrm } from '../support/db.ts';
import { startTestApi } from '../support/http.ts';
import { expectSettledWallet } from '../support/ledger.ts';
import { startFakeUpstream, type FakeUpstream } from '../fakes/openai-upstream.ts';

/**
 * The framework matrix (issue 32): agents and structured output as the Vercel AI SDK and
 * LangChain JS call them, against the real server and the offline demo model (`test/local`,
 * the local provider: it calls the tool the last user message names, answers a tool result by
 * quoting it, and makes schema-valid JSON). The AI SDK's `.chat(model)` speaks chat
 * completions; its default `openai(model)` the Responses API (POST /responses), which runs on chat.
 */
let orm: MikroORM;
let upstream: FakeUpstream;
let api: Awaited<ReturnType<typeof startTestApi>>;
let baseURL: string;

beforeAll(async () => {
  orm = await openTestOrm();
  upstream = await startFakeUpstream();
  const providers = await useTestCatalog(orm, upstream.url);
  api = await startTestApi(orm, { providers });
  baseURL = `${api.url}/api/v1`;
});
afterAll(async () => {
  await api.close();
  await upstream.close();
  await orm.close();
});

let account: { id: string };
let key: string;
beforeEach(async () => {
  account = await makeAccount(orm, { coins: '10' });
  key = (await makeKey(orm, account.id)).key;
});

const MODEL = 'test/local';
const film = z.object({ title: z.string().min(1), year: z.number().int().min(1900).max(2100), genres: z.array(z.string()).max(3) });

describe.each([
  ['@ai-sdk/openai-compatible', () => createOpenAICompatible({ name: 'mas', baseURL, apiKey: key, includeUsage: true, supportsStructuredOutputs: true }).chatModel(MODEL)],
  ['@ai-sdk/openai .chat()', () => createOpenAI({ baseURL, apiKey: key }).chat(MODEL)],
] as [string, () => LanguageModel][])('the Vercel AI SDK with %s', (_name, model) => {
  const weather = tool({
    description: 'The forecast for a city.',
    inputSchema: z.object({ city: z.string().min(1), unit: z.enum(['celsius', 'fahrenheit']) }),
    execute: async ({ city, unit }) => ({ city, unit, forecast: 'sunny' }),
  });

  it('generateText with tools over two steps: the model calls the tool, the SDK runs it, the model answers with its result', async () => {
    const result = await generateText({ model: model(), tools: { get_weather: weather }, stopWhen: stepCountIs(2), prompt: 'Use get_weather for Paris.', maxRetries: 0 });
    expect(result.steps).toHaveLength(2);
    expect(result.steps[0]!.finishReason).toBe('tool-calls');
    expect(result.steps[0]!.toolCalls.map((c) => c.toolName)).toEqual(['get_weather']);
    expect(result.steps[0]!.toolResults).toHaveLength(1);
    expect(result.text).toMatch(/^The tool get_weather returned: .*"forecast":"sunny"/);
    expect(result.finishReason).toBe('stop');
    expect(result.totalUsage.inputTokens).toBeGreaterThan(0);
    await expectSettledWallet(orm, account.id);
  });

  it('streamText, plain and with tools over two steps', async () => {
    const plain = streamText({ model: model(), prompt: 'Hello there', maxRetries: 0 });
    expect(await plain.text).toMatch(/^You said: "Hello there"/);
    const agent = streamText({ model: model(), tools: { get_weather: weather }, stopWhen: stepCountIs(2), prompt: 'Please use get_weather for Oslo', maxRetries: 0 });
    expect(await agent.text).toMatch(/^The tool get_weather returned:/);
    expect((await agent.steps)[0]!.toolCalls.map((c) => c.toolName)).toEqual(['get_weather']);
    await expectSettledWallet(orm, account.id);
  });

  it('generateObject: an object valid against the schema (the SDK validates it)', async () => {
    const { object } = await generateObject({ model: model(), schema: film, prompt: 'A film, please.', maxRetries: 0 });
    expect(film.safeParse(object).success).toBe(true);
    await expectSettledWallet(orm, account.id);
  });
});

describe("the Vercel AI SDK's default openai(model), on the Responses API", () => {
  it('generateText with tools over two steps, and generateObject', async () => {
    const openai = createOpenAI({ baseURL, apiKey: key });
    const weather = tool({ description: 'The forecast for a city.', inputSchema: z.object({ city: z.string().min(1) }), execute: async ({ city }) => ({ city, forecast: 'fog' }) });
    const result = await generateText({ model: openai(MODEL), tools: { get_weather: weather }, stopWhen: stepCountIs(2), prompt: 'Use get_weather for Lisbon.', maxRetries: 0 });
    expect(result.steps[0]!.toolCalls.map((c) => c.toolName)).toEqual(['get_weather']);
    expect(result.text).toMatch(/^The tool get_weather returned: .*"forecast":"fog"/);
    const { object } = await generateObject({ model: openai(MODEL), schema: film, prompt: 'A film, please.', maxRetries: 0 });
    expect(film.safeParse(object).success).toBe(true);
    await expectSettledWallet(orm, account.id);
  });
});

describe('LangChain JS (@langchain/openai ChatOpenAI)', () => {
  const llm = () => new ChatOpenAI({ model: MODEL, apiKey: key, configuration: { baseURL }, maxRetries: 0 });
  const weather = langchainTool(async ({ city }: { city: string }) => JSON.stringify({ city, forecast: 'rain' }), {
    name: 'get_weather',
    description: 'The forecast for a city.',
    schema: z.object({ city: z.string().min(1) }),
  });

  it('bindTools in an agent loop: call the tool, feed its result back, get text', async () => {
    const agent = llm().bindTools([weather]);
    const messages: BaseMessage[] = [new HumanMessage('Use get_weather for Bergen.')];
    const first = await agent.invoke(messages);
    expect(first.tool_calls?.map((c) => c.name)).toEqual(['get_weather']);
    messages.push(first);
    for (const call of first.tool_calls ?? []) messages.push(await weather.invoke(call));
    const second = await agent.invoke(messages);
    expect(second.tool_calls ?? []).toEqual([]);
    expect(second.content).toMatch(/^The tool get_weather returned: \{"city":".+","forecast":"rain"\}$/);
    await expectSettledWallet(orm, account.id);
  });

  it('withStructuredOutput, method functionCalling (a forced tool call)', async () => {
    const result = await llm().withStructuredOutput(film, { name: 'film', method: 'functionCalling' }).invoke('A film, please.');
    expect(film.safeParse(result).success).toBe(true);
  });

  it('withStructuredOutput, method jsonSchema (response_format json_schema)', async () => {
    const result = await llm().withStructuredOutput(film, { name: 'film', method: 'jsonSchema' }).invoke('A film, please.');
    expect(film.safeParse(result).success).toBe(true);
  });

  it('withStructuredOutput, method jsonMode (response_format json_object: the demo model answers {"answer": …})', async () => {
    const answer = z.object({ answer: z.string() });
    const result = await llm().withStructuredOutput(answer, { method: 'jsonMode' }).invoke('Answer in JSON, please.');
    expect(answer.safeParse(result).success).toBe(true);
    await expectSettledWallet(orm, account.id);
  });
});
