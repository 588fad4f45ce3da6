import OpenAI from 'openai';
import type { MikroORM } from '@mikro-orm/postgresql';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { useTestCatalog } from '../support/catalog.ts';
import { makeAccount, makeKey, openTestOrm } from '../support/db.ts';
import { startTestApi } from '../support/http.ts';
import { expectSettledWallet } from '../support/ledger.ts';
import { startFakeUpstream, type FakeUpstream } from '../fakes/openai-upstream.ts';

/**
 * The Responses API (part C of issue 32) runs on chat, so it takes chat's tools and structured
 * outputs (part A): function tools, function_call / function_call_output items and
 * `text.format` json_schema, against the offline demo model, through the `openai` SDK, whose
 * `responses.stream` accumulator checks the event sequence.
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
let client: OpenAI;
beforeEach(async () => {
  account = await makeAccount(orm, { coins: '10' });
  const key = (await makeKey(orm, account.id)).key;
  client = new OpenAI({ apiKey: key, baseURL: `${api.url}/api/v1`, maxRetries: 0 });
});

const parameters = { type: 'object', properties: { city: { type: 'string', minLength: 1 } }, required: ['city'], additionalProperties: false };
const tools: OpenAI.Responses.FunctionTool[] = [{ type: 'function', name: 'get_weather', description: 'The forecast.', parameters, strict: true }];

describe('POST /responses with function tools and structured outputs', () => {
  it('a function_call item, streamed or not, then its output answered in text', async () => {
    const input = 'Use get_weather for Lima.';
    const response = await client.responses.create({ model: 'test/local', input, tools });
    const call = response.output.find((o) => o.type === 'function_call');
    expect(call).toMatchObject({ type: 'function_call', name: 'get_weather', call_id: expect.stringMatching(/^call_/), status: 'completed' });
    expect(typeof JSON.parse((call as OpenAI.Responses.ResponseFunctionToolCall).arguments).city).toBe('string');

    const streamed = await client.responses.stream({ model: 'test/local', input, tools }).finalResponse();
    const streamedCall = streamed.output.find((o) => o.type === 'function_call') as OpenAI.Responses.ResponseFunctionToolCall;
    expect(streamedCall).toMatchObject({ name: 'get_weather', call_id: (call as OpenAI.Responses.ResponseFunctionToolCall).call_id, arguments: (call as OpenAI.Responses.ResponseFunctionToolCall).arguments });

    const answer = await client.responses.create({
      model: 'test/local',
      tools,
      input: [{ role: 'user', content: input }, call as OpenAI.Responses.ResponseFunctionToolCall, { type: 'function_call_output', call_id: streamedCall.call_id, output: '{"sky":"grey"}' }],
    });
    expect(answer.output_text).toBe('The tool get_weather returned: {"sky":"grey"}');
    await expectSettledWallet(orm, account.id);
  });

  it('text.format json_schema: output_text is an instance of the schema', async () => {
    const schema = { type: 'object', properties: { n: { type: 'integer', minimum: 10, maximum: 20 } }, required: ['n'], additionalProperties: false };
    const response = await client.responses.create({ model: 'test/local', input: 'A number', text: { format: { type: 'json_schema', name: 'num', schema, strict: true } } });
    const n = (JSON.parse(response.output_text) as { n: number }).n;
    expect(n).toBeGreaterThanOrEqual(10);
    expect(n).toBeLessThanOrEqual(20);
  });
});
