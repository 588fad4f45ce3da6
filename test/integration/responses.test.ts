import OpenAI from 'openai';
import type { MikroORM } from '@mikro-orm/postgresql';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { historyCsv } from '../../core/accounts/history-csv.ts';
import { historyInput, listHistory } from '../../core/money/history.ts';
import { getBalance } from '../../core/money/wallet.ts';
import { useTestCatalog } from '../support/catalog.ts';
import { chargesWritten, makeAccount, makeKey, openTestOrm, walletInvariants } from '../support/db.ts';
import { bearer, getJson, startTestApi } from '../support/http.ts';
import { startFakeUpstream, type FakeUpstream } from '../fakes/openai-upstream.ts';

/**
 * POST /api/v1/responses, OpenAI's Responses API (stateless), through the real REST app over
 * HTTP, driven by the official `openai` SDK: its `responses.create` and `responses.stream`
 * parse and accumulate every event, so they are the test of the stream's shape. Billing is
 * chat's: the cost in `usage.cost_coins` is the balance drop.
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

const MICRO = 1_000_000;
const coins = async () => {
  await chargesWritten();
  const b = await getBalance(orm.em.fork(), account.id);
  return b.subscription + b.purchased;
};
const spent = async (before: bigint) => Number(before - (await coins())) / MICRO;
const post = (body: unknown) =>
  getJson(`${api.url}/api/v1/responses`, { method: 'POST', headers: { ...bearer(key), 'content-type': 'application/json' }, body: JSON.stringify(body) });

describe('POST /responses with the openai SDK', () => {
  it('answers a string input as a response with one message, its usage and its cost, which is the balance drop', async () => {
    const before = (await coins());
    const response = await client.responses.create({ model: 'test/local', input: 'Say hello', max_output_tokens: 200 });
    expect(response).toMatchObject({ object: 'response', status: 'completed', model: 'test/local', error: null, incomplete_details: null, store: false });
    expect(response.id).toMatch(/^resp_/);
    expect(response.output).toHaveLength(1);
    expect(response.output[0]).toMatchObject({ type: 'message', role: 'assistant', status: 'completed', content: [{ type: 'output_text', annotations: [] }] });
    expect(response.output_text).toMatch(/^You said: "Say hello"\./);
    const usage = response.usage as OpenAI.Responses.ResponseUsage & { cost_coins: number };
    expect(usage.total_tokens).toBe(usage.input_tokens + usage.output_tokens);
    expect(usage.cost_coins).toBeGreaterThan(0);
    expect(await spent(before)).toBeCloseTo(usage.cost_coins, 6);
    await walletInvariants(orm, account.id);
  });

  it('takes instructions and message items with input_text parts, as chat takes a system message and a history', async () => {
    const response = await client.responses.create({
      model: 'test/local',
      instructions: 'Be brief.',
      input: [
        { role: 'user', content: [{ type: 'input_text', text: 'first question' }] },
        { role: 'assistant', content: 'an earlier answer' },
        { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'second ' }, { type: 'input_text', text: 'question' }] },
      ],
    });
    expect(response.instructions).toBe('Be brief.');
    expect(response.output_text).toMatch(/^You said: "second question"\./);
  });

  it('streams the Responses events, from response.created to response.completed with the usage, which the SDK accumulates into the same response', async () => {
    const before = (await coins());
    const stream = client.responses.stream({ model: 'test/local', input: 'Stream please' });
    const types: string[] = [];
    const sequence: number[] = [];
    let deltas = '';
    for await (const event of stream) {
      types.push(event.type);
      sequence.push(event.sequence_number);
      if (event.type === 'response.output_text.delta') deltas += event.delta;
    }
    const final = await stream.finalResponse();
    expect(types.slice(0, 4)).toEqual(['response.created', 'response.in_progress', 'response.output_item.added', 'response.content_part.added']);
    expect(types.slice(-4)).toEqual(['response.output_text.done', 'response.content_part.done', 'response.output_item.done', 'response.completed']);
    expect(types.filter((t) => t === 'response.output_text.delta').length).toBeGreaterThan(1);
    expect(sequence).toEqual(sequence.map((_, i) => i));
    expect(final.output_text).toBe(deltas);
    expect(final.output_text).toMatch(/^You said: "Stream please"\./);
    const usage = final.usage as OpenAI.Responses.ResponseUsage & { cost_coins: number };
    expect(await spent(before)).toBeCloseTo(usage.cost_coins, 6);
  });

  it('an answer cut at max_output_tokens is incomplete, streamed or not', async () => {
    const response = await client.responses.create({ model: 'test/local', input: 'a long answer please', max_output_tokens: 3 });
    expect(response).toMatchObject({ status: 'incomplete', incomplete_details: { reason: 'max_output_tokens' }, max_output_tokens: 3 });
    expect(response.usage?.output_tokens).toBe(3);
    const stream = client.responses.stream({ model: 'test/local', input: 'a long answer please', max_output_tokens: 3 });
    const types: string[] = [];
    for await (const event of stream) types.push(event.type);
    expect(types.at(-1)).toBe('response.incomplete');
  });

  it('refuses what it cannot do with a 400 that names the field, charging nothing', async () => {
    const before = (await coins());
    const cases: [Record<string, unknown>, string][] = [
      [{ model: 'test/local', input: 'x', store: true }, 'store'],
      [{ model: 'test/local', input: 'x', previous_response_id: 'resp_123' }, 'previous_response_id'],
      [{ model: 'test/local', input: 'x', background: true }, 'background'],
      [{ model: 'test/local', input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'https://example.com/a.png' }] }] }, 'input.0'],
      [{ model: 'test/local', input: 'x', tools: [{ type: 'web_search' }] }, 'tools.0'],
      [{ model: 'test/local', input: [] }, 'input'],
      [{ model: 'test/local' }, 'input'],
      [{ model: 'test/local', input: 'x', max_output_tokens: 0 }, 'max_output_tokens'],
      [{ model: 'test/local', input: 'x', text: { format: { type: 'xml' } } }, 'text.format'],
      [{ model: 'test/nope', input: 'x' }, 'model'],
    ];
    for (const [body, param] of cases) {
      const res = await post(body);
      expect(res.status, JSON.stringify(body)).toBe(body.model === 'test/nope' ? 404 : 400);
      expect(res.body.error.message, JSON.stringify(body)).toContain(param);
    }
    const err = await client.responses.create({ model: 'test/local', input: 'x', store: true }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect((await coins())).toBe(before);
  });

  it('GET /responses/{id} reads back a response\'s usage and cost, streamed or not, to its owner only', async () => {
    const response = await client.responses.create({ model: 'test/local', input: 'Say hello' });
    const stream = client.responses.stream({ model: 'test/local', input: 'Stream please' });
    for await (const _ of stream) void _;
    const streamed = await stream.finalResponse();
    for (const r of [response, streamed]) {
      const record = await getJson(`${api.url}/api/v1/responses/${r.id}`, { headers: bearer(key) });
      expect(record.status).toBe(200);
      const usage = r.usage as OpenAI.Responses.ResponseUsage & { cost_coins: number };
      expect(record.body).toMatchObject({
        id: r.id,
        object: 'response.record',
        model: 'test/local',
        usage: { prompt_tokens: usage.input_tokens, completion_tokens: usage.output_tokens, cost_coins: usage.cost_coins },
      });
    }
    // Not a chat completion's record, and nobody else's.
    expect((await getJson(`${api.url}/api/v1/chat/completions/${response.id}`, { headers: bearer(key) })).status).toBe(404);
    const other = await makeAccount(orm, { coins: '1' });
    const otherKey = (await makeKey(orm, other.id)).key;
    const theirs = await getJson(`${api.url}/api/v1/responses/${response.id}`, { headers: bearer(otherKey) });
    const madeUp = await getJson(`${api.url}/api/v1/responses/resp_doesnotexist`, { headers: bearer(otherKey) });
    expect(theirs.status).toBe(404);
    expect(theirs.body.error.code).toBe(madeUp.body.error.code);
  });

  it('a response’s charge reads in the wallet history, the CSV and its key filter with the details of a chat row: model, tokens, key', async () => {
    const made = await makeKey(orm, account.id, 'responses');
    const own = new OpenAI({ apiKey: made.key, baseURL: `${api.url}/api/v1`, maxRetries: 0 });
    const response = await own.responses.create({ model: 'test/local', input: 'Say hello' });
    const stream = own.responses.stream({ model: 'test/local', input: 'Stream please' });
    for await (const _ of stream) void _;
    const streamed = await stream.finalResponse();
    await chargesWritten();
    const { data } = await listHistory(orm.em.fork(), account.id, historyInput.parse({ limit: 10 }));
    // Newest first; each charge is referenced by the chat completion the response ran.
    for (const [row, r] of [[data[0]!, streamed], [data[1]!, response]] as const) {
      const usage = r.usage!;
      expect(row).toMatchObject({
        type: 'api_usage',
        reference: r.id.replace(/^resp_/, 'chatcmpl-'),
        model: 'test/local',
        input_tokens: usage.input_tokens,
        output_tokens: usage.output_tokens,
        key_id: made.id,
        details: `Response on test/local: ${usage.input_tokens} input + ${usage.output_tokens} output tokens`,
      });
    }
    const byKey = await historyCsv(orm.em.fork(), account.id, { filters: { key: made.id }, now: new Date() });
    expect(byKey.rows).toBe(2);
    expect(byKey.csv).toContain(`Response on test/local: ${response.usage!.input_tokens} input`);
    expect((await historyCsv(orm.em.fork(), account.id, { filters: { model: 'test/local' }, now: new Date() })).rows).toBe(2);
  });

  it('a model that is not a text model, or an unknown one, is refused as chat refuses it', async () => {
    const res = await post({ model: 'test/image', input: 'x' });
    expect(res.status).toBe(400);
    expect(res.body.error.message).toMatch(/image/);
  });
});
