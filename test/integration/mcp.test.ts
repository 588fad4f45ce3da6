import { Writable } from 'node:stream';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { createContext } from '../../core/context.ts';
import { createCaller } from '../../core/router.ts';
import { makeAccount, makeKey, testDeps } from '../support/db.ts';
import { createTestApp, serve } from '../support/http.ts';
import { startJobHarness, type JobHarness } from '../support/jobs.ts';
import { expectSettledWallet } from '../support/ledger.ts';

/** The MCP server through the official SDK client over Streamable HTTP, on real PostgreSQL and Temporal. */
let h: JobHarness;
beforeAll(async () => {
  // Progress every second rather than every 10 s: a job of a few seconds shows several ticks.
  h = await startJobHarness({ mcpProgressEverySeconds: 1 });
});
afterAll(() => h.close());

const PNG = Buffer.from('89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c4890000000d4944415478da63f8cfc0f01f0005000201a5b2b1a30000000049454e44ae426082', 'hex');

type Way = 'header' | 'link';
async function connect(key: string, way: Way = 'header', base = h.base): Promise<Client> {
  const client = new Client({ name: 'mas-test', version: '1.0.0' });
  const transport =
    way === 'header'
      ? new StreamableHTTPClientTransport(new URL(`${base}/api/v1/mcp`), { requestInit: { headers: { Authorization: `Bearer ${key}` } } })
      : new StreamableHTTPClientTransport(new URL(`${base}/api/v1/mcp/${key}`));
  await client.connect(transport);
  return client;
}

async function funded(coins = '100') {
  const account = await makeAccount(h.orm, { coins });
  const key = await makeKey(h.orm, account.id);
  return { account, key: key.key, keyId: key.id };
}

const call = (client: Client, name: string, args: Record<string, unknown> = {}) => client.callTool({ name, arguments: args }) as Promise<CallToolResult>;
const text = (r: CallToolResult) => r.content.flatMap((c) => (c.type === 'text' ? [c.text] : [])).join('\n');
const errorOf = (r: CallToolResult) => {
  expect(r.isError, text(r)).toBe(true);
  const json = r.content.flatMap((c) => (c.type === 'text' && c.text.startsWith('{"error"') ? [c.text] : []))[0];
  return (JSON.parse(json!) as { error: { message: string; type: string; code: string } }).error;
};
const balanceOf = async (accountId: string) => (await h.orm.em.fork().execute<{ c: string }[]>('select (subscription_micro + purchased_micro)::text as c from wallets where account_id = ?', [accountId]))[0]!.c;

describe('MCP server', () => {
  it('lists exactly the eight tools, each with an input schema, an output schema and annotations', async () => {
    const { key } = await funded();
    const client = await connect(key);
    const { tools } = await client.listTools();
    expect(tools.map((t) => t.name).sort()).toEqual(['chat', 'generate', 'get_balance', 'get_generation', 'get_model', 'list_generations', 'list_models', 'upload_file']);
    for (const tool of tools) {
      expect(tool.inputSchema.type, tool.name).toBe('object');
      expect(tool.outputSchema?.type, tool.name).toBe('object');
      expect(tool.description!.length, tool.name).toBeGreaterThan(40);
      expect(tool.annotations, tool.name).toMatchObject({ readOnlyHint: expect.any(Boolean), idempotentHint: expect.any(Boolean), openWorldHint: expect.any(Boolean) });
    }
    const generate = tools.find((t) => t.name === 'generate')!;
    expect(generate.description).toMatch(/progress/);
    expect(generate.description).toMatch(/keeps running and is billed/);
    // A call that times out: where to find the job again, and how to retry without paying twice.
    expect(generate.description).toMatch(/first notification names the job id/);
    expect(generate.description).toMatch(/list_generations/);
    expect(generate.description).toMatch(/get_generation/);
    expect(generate.description).toMatch(/idempotency_key: the same key with the same arguments returns the same job instead of starting \(and paying for\) another/);
    expect(tools.find((t) => t.name === 'get_generation')!.description).toMatch(/list_generations/);
    const listing = tools.find((t) => t.name === 'list_generations')!;
    expect(listing.annotations).toMatchObject({ readOnlyHint: true, idempotentHint: true, openWorldHint: false });
    expect(Object.keys(listing.inputSchema.properties!).sort()).toEqual(['limit', 'starting_after', 'status']);
    expect(Object.keys(listing.outputSchema!.properties!).sort()).toEqual(['data', 'has_more', 'object']);
    expect(tools.map((t) => t.name).indexOf('list_generations')).toBe(tools.map((t) => t.name).indexOf('get_generation') + 1);
    expect(Object.keys(generate.inputSchema.properties!)).toEqual(expect.arrayContaining(['model', 'prompt', 'settings', 'inputs', 'wait_seconds']));
    await client.close();
  });

  it.each<Way>(['header', 'link'])('every tool works with the key in the %s, billed as REST bills', async (way) => {
    const { account, key } = await funded();
    const client = await connect(key, way);

    const models = await call(client, 'list_models', { type: 'image' });
    expect((models.structuredContent as { data: { type: string }[] }).data.every((m) => m.type === 'image')).toBe(true);
    expect((await call(client, 'get_model', { id: 'mas/image-demo' })).structuredContent).toMatchObject({ id: 'mas/image-demo', example: expect.any(Object) });
    expect((await call(client, 'get_balance')).structuredContent).toMatchObject({ object: 'balance', coins: 100, paid_account: true });

    const chat = await call(client, 'chat', { model: 'mas/echo', prompt: 'Hello there', max_tokens: 30 });
    const chatted = chat.structuredContent as { answer: string; cost_coins: number; usage: { cost_coins: number } };
    expect(chatted.answer).toContain('Hello there');
    expect(chatted.cost_coins).toBeGreaterThan(0);

    const upload = await call(client, 'upload_file', { content: PNG.toString('base64'), filename: 'dot.png' });
    const file = upload.structuredContent as { id: string; type: string };
    expect(file.type).toBe('image');

    const generated = await call(client, 'generate', { model: 'mas/image-demo', prompt: 'a fox', settings: { size: 128 }, inputs: { reference_image: file.id }, wait_seconds: 30 });
    const job = generated.structuredContent as { id: string; status: string; cost_coins: number; output: { url: string } };
    expect(job.status).toBe('succeeded');
    const link = generated.content.find((c) => c.type === 'resource_link');
    expect(link).toMatchObject({ type: 'resource_link', uri: job.output.url, mimeType: 'image/png' });
    expect(text(generated)).toMatch(/expires at .*one hour/);
    const image = Buffer.from(await (await fetch((link as { uri: string }).uri.replace('http://localhost', h.base))).arrayBuffer());
    expect(image.subarray(0, 8).equals(PNG.subarray(0, 8))).toBe(true);
    expect((await call(client, 'get_generation', { id: job.id })).structuredContent).toMatchObject({ id: job.id, status: 'succeeded' });

    // The same ledger as the REST path: a top-up, one API usage per chat and per job.
    const history = await createCaller(createContext(h.deps, { kind: 'bearer', token: key })).wallet.history({ limit: 10 });
    expect(history.data.map((e) => [e.type, e.reference])).toEqual([
      ['api_usage', job.id],
      ['api_usage', (chat.structuredContent as { id: string }).id],
      ['topup', 'fixture'],
    ]);
    expect(history.data[0]!.amount_coins).toBe(-job.cost_coins);
    expect(history.data[1]!.amount_coins).toBe(-chatted.cost_coins);
    expect(await balanceOf(account.id)).toBe(String((100 - job.cost_coins - chatted.cost_coins) * 1e6));
    await client.close();
  });

  it('generate with wait_seconds 1 on a slow job returns the job id; get_generation gives the result later', async () => {
    const { key } = await funded();
    const client = await connect(key);
    const first = await call(client, 'generate', { model: 'mas/image-demo', settings: { delay_ms: 2500, size: 128 }, wait_seconds: 1 });
    const job = first.structuredContent as { id: string; status: string };
    expect(['queued', 'running']).toContain(job.status);
    expect(text(first)).toContain(`get_generation with id "${job.id}"`);
    // Asked again until the job ends (2.5 s of work; the timeout is only how long a job that never ends takes to fail).
    await vi.waitFor(
      async () => expect(((await call(client, 'get_generation', { id: job.id })).structuredContent as typeof job).status).toBe('succeeded'),
      { timeout: 45_000, interval: 250 },
    );
    await client.close();
  });

  it('sends progress notifications while generate waits, when the call carries a progressToken', async () => {
    const { key } = await funded();
    const client = await connect(key);
    const notes: { progress: number; total?: number; message?: string }[] = [];
    const result = (await client.callTool({ name: 'generate', arguments: { model: 'mas/image-demo', settings: { delay_ms: 2_500, size: 128 }, wait_seconds: 30 } }, undefined, {
      onprogress: (p) => notes.push(p),
      timeout: 60_000,
    })) as CallToolResult;
    const job = result.structuredContent as { id: string; status: string };
    expect(job.status).toBe('succeeded');
    // One when the job is accepted, one after each second of waiting (10 s in production: mcpProgressEverySeconds).
    expect(notes.length).toBeGreaterThanOrEqual(2);
    // A job of 2.5 s seen after a wait: some seconds old (how many depends on the machine's load).
    expect(notes.at(-1)!.progress).toBeGreaterThan(0);
    // The first names the job and where to find it again if the call times out.
    expect(notes[0]!.message).toMatch(new RegExp(`^Job ${job.id} accepted \\((queued|running), \\d+ s elapsed\\)\\. If this call times out, call get_generation with id "${job.id}" or list_generations`));
    // Each names the job's status and its elapsed seconds; progress is those seconds, always growing.
    for (const note of notes.slice(1)) expect(note.message).toMatch(new RegExp(`^Job ${job.id} is (queued|running), \\d+ s elapsed\\.$`));
    for (let i = 1; i < notes.length; i++) expect(notes[i]!.progress).toBeGreaterThan(notes[i - 1]!.progress);
    // The demo model's length is unknown to the catalog (its delay_ms is a test knob): no total.
    for (const note of notes) expect(note.total).toBeUndefined();
    await client.close();
  });

  it('reports progress against the model\'s expected duration when the catalog gives one', async () => {
    const { key } = await funded();
    const client = await connect(key);
    const notes: { progress: number; total?: number; message?: string }[] = [];
    const result = (await client.callTool({ name: 'generate', arguments: { model: 'test/timed-image', settings: { delay_ms: 2_500 }, wait_seconds: 30 } }, undefined, {
      onprogress: (p) => notes.push(p),
      timeout: 60_000,
    })) as CallToolResult;
    const job = result.structuredContent as { id: string; status: string };
    expect(job.status).toBe('succeeded');
    expect(notes.length).toBeGreaterThanOrEqual(2);
    // test/timed-image says its jobs take about 12 s (expected_seconds).
    expect(notes[0]).toMatchObject({ total: 12, message: expect.stringContaining('jobs on this model usually take about 12 s') });
    expect(notes[0]!.progress).toBeLessThan(12);
    expect(notes[1]).toMatchObject({ total: 12, message: expect.stringMatching(/^Job gen_\w+ is (queued|running), \d+ s elapsed of about 12 s expected\.$/) });
    await client.close();
  });

  it('list_generations finds the account\'s jobs newest first, with status, model, cost and result link, paged and filtered; it is free', async () => {
    const { account, key } = await funded();
    const client = await connect(key);
    const failed = (await call(client, 'generate', { model: 'mas/image-demo', settings: { fail: true, size: 128 }, wait_seconds: 30 })).structuredContent as { id: string };
    const done = (await call(client, 'generate', { model: 'mas/image-demo', prompt: 'a fox', settings: { size: 128 }, wait_seconds: 30 })).structuredContent as { id: string; cost_coins: number; output: { url: string } };
    const before = await balanceOf(account.id);

    const all = await call(client, 'list_generations');
    expect(all.isError).toBeFalsy();
    const page = all.structuredContent as { object: string; data: { id: string; status: string }[]; has_more: boolean };
    expect(page).toMatchObject({ object: 'list', has_more: false });
    expect(page.data.map((g) => [g.id, g.status])).toEqual([
      [done.id, 'succeeded'],
      [failed.id, 'failed'],
    ]);
    const lines = text(all).split('\n');
    expect(lines[0]).toBe('2 jobs, newest first:');
    expect(lines[1]).toMatch(new RegExp(`^${done.id} · succeeded · mas/image-demo · created .+ · ${done.cost_coins} coins · http`));
    expect(lines[2]).toMatch(new RegExp(`^${failed.id} · failed · mas/image-demo · .* refunded`));
    // One result link per succeeded job, as get_generation gives it.
    const links = all.content.filter((c) => c.type === 'resource_link');
    expect(links).toEqual([expect.objectContaining({ type: 'resource_link', name: `${done.id} result`, mimeType: 'image/png' })]);
    expect(new URL((links[0] as { uri: string }).uri).pathname).toBe(new URL(done.output.url).pathname);

    const first = await call(client, 'list_generations', { limit: 1 });
    expect((first.structuredContent as typeof page).data.map((g) => g.id)).toEqual([done.id]);
    expect((first.structuredContent as typeof page).has_more).toBe(true);
    expect(text(first)).toContain(`starting_after "${done.id}"`);
    const second = await call(client, 'list_generations', { limit: 1, starting_after: done.id });
    expect((second.structuredContent as typeof page)).toMatchObject({ data: [{ id: failed.id }], has_more: false });
    const onlyFailed = await call(client, 'list_generations', { status: 'failed' });
    expect((onlyFailed.structuredContent as typeof page).data.map((g) => g.id)).toEqual([failed.id]);
    expect(text(await call(client, 'list_generations', { status: 'canceled' }))).toBe('No canceled jobs.');

    // Bad arguments name their field.
    expect(errorOf(await call(client, 'list_generations', { limit: 0 }))).toMatchObject({ type: 'invalid_request_error', message: expect.stringContaining('limit') });
    expect(errorOf(await call(client, 'list_generations', { status: 'done' }))).toMatchObject({ type: 'invalid_request_error', message: expect.stringContaining('status') });
    expect(errorOf(await call(client, 'list_generations', { starting_after: 'le_1' }))).toMatchObject({ type: 'invalid_request_error', message: expect.stringContaining('starting_after') });
    // Another account's job as the cursor is as unknown as a made-up one.
    const other = await funded();
    const otherClient = await connect(other.key);
    expect(errorOf(await call(otherClient, 'list_generations', { starting_after: done.id }))).toMatchObject({ type: 'not_found_error', code: 'generation_not_found' });
    expect((await call(otherClient, 'list_generations')).structuredContent).toEqual({ object: 'list', data: [], has_more: false });
    // Listing costs nothing.
    expect(await balanceOf(account.id)).toBe(before);
    await Promise.all([client.close(), otherClient.close()]);
  });

  it('a failing job is refunded in full', async () => {
    const { account, key } = await funded();
    const client = await connect(key);
    const before = await balanceOf(account.id);
    const result = await call(client, 'generate', { model: 'mas/image-demo', settings: { fail: true }, wait_seconds: 30 });
    expect(result.isError).toBeFalsy();
    expect(result.structuredContent).toMatchObject({ status: 'failed', cost_coins: 0 });
    expect(text(result)).toMatch(/refunded in full/);
    expect(await balanceOf(account.id)).toBe(before);
    await client.close();
  });

  it('a revoked key fails on its next call with 401; a missing or unknown key too', async () => {
    const { keyId, key } = await funded();
    const client = await connect(key, 'link');
    await call(client, 'get_balance');
    await createCaller(createContext(h.deps, { kind: 'internal' })).keys.revoke({ id: keyId });
    await expect(call(client, 'get_balance')).rejects.toMatchObject({ code: 401, message: expect.stringContaining('invalid_api_key') });
    for (const headers of [{}, { authorization: 'Bearer mas_not_a_key' }] as Record<string, string>[]) {
      const res = await fetch(`${h.base}/api/v1/mcp`, { method: 'POST', headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...headers }, body: '{"jsonrpc":"2.0","id":1,"method":"tools/list"}' });
      expect(res.status).toBe(401);
      expect(res.headers.get('www-authenticate')).toMatch(/^Bearer/);
      expect(await res.json()).toMatchObject({ error: { type: 'authentication_error', code: 'invalid_api_key' } });
    }
  });

  it('a management key is refused at the door with 403: agents spend, they do not administer (docs/organizations.md)', async () => {
    const account = await makeAccount(h.orm, { coins: '10' });
    const management = await createCaller(createContext(h.deps, { kind: 'internal' })).keys.create({ account: account.id, management: true });
    const res = await fetch(`${h.base}/api/v1/mcp`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: `Bearer ${management.key}` },
      body: '{"jsonrpc":"2.0","id":1,"method":"tools/list"}',
    });
    expect(res.status).toBe(403);
    expect(await res.json()).toMatchObject({ error: { type: 'permission_error', code: 'management_key_not_allowed' } });
  });

  it('chat takes the REST message schema: tools, tool calls and results in the history, response_format', async () => {
    const { account, key } = await funded();
    const client = await connect(key);
    const chatTool = (await client.listTools()).tools.find((t) => t.name === 'chat')!;
    expect(Object.keys(chatTool.inputSchema.properties!)).toEqual(expect.arrayContaining(['messages', 'tools', 'tool_choice', 'parallel_tool_calls', 'response_format']));
    const messageSchema = (chatTool.inputSchema.properties!.messages as { items: { properties: Record<string, { enum?: string[] }> } }).items;
    expect(messageSchema.properties.role!.enum).toEqual(['system', 'developer', 'user', 'assistant', 'tool']);
    expect(Object.keys(messageSchema.properties)).toEqual(expect.arrayContaining(['tool_calls', 'tool_call_id']));

    const tools = [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];
    const ask = [{ role: 'user', content: [{ type: 'text', text: 'Use get_weather ' }, { type: 'text', text: 'for Rome.' }] }];
    const first = (await call(client, 'chat', { model: 'mas/echo', messages: ask, tools })).structuredContent as {
      answer: string;
      finish_reason: string;
      tool_calls: { id: string; type: 'function'; function: { name: string; arguments: string } }[];
    };
    expect(first.finish_reason).toBe('tool_calls');
    expect(first.answer).toBe('');
    expect(first.tool_calls).toHaveLength(1);
    expect(typeof JSON.parse(first.tool_calls[0]!.function.arguments).city).toBe('string');
    const history = [...ask, { role: 'assistant', content: null, tool_calls: first.tool_calls }, { role: 'tool', tool_call_id: first.tool_calls[0]!.id, content: 'hot' }];
    const second = (await call(client, 'chat', { model: 'mas/echo', messages: history, tools })).structuredContent as { answer: string; finish_reason: string };
    expect(second).toMatchObject({ answer: 'The tool get_weather returned: hot', finish_reason: 'stop' });

    const schema = { type: 'object', properties: { n: { type: 'integer', minimum: 5 } }, required: ['n'], additionalProperties: false };
    const structured = (await call(client, 'chat', { model: 'mas/echo', prompt: 'A number', response_format: { type: 'json_schema', json_schema: { name: 'num', schema } } })).structuredContent as { answer: string };
    expect(JSON.parse(structured.answer).n).toBeGreaterThanOrEqual(5);

    expect(errorOf(await call(client, 'chat', { model: 'mas/echo', messages: [...ask, { role: 'tool', tool_call_id: 'call_none', content: 'x' }] }))).toMatchObject({
      code: 'invalid_value',
      message: expect.stringContaining('messages.1.tool_call_id'),
    });
    await expectSettledWallet(h.orm, account.id);
    await client.close();
  });

  it('402, 403, 404 and a bad setting come back as isError results with the REST codes; a bad argument names its field', async () => {
    const { key } = await funded('0.000001');
    const client = await connect(key);
    expect(errorOf(await call(client, 'generate', { model: 'mas/image-demo' }))).toMatchObject({ type: 'billing_error', code: 'insufficient_balance' });
    expect(errorOf(await call(client, 'get_model', { id: 'nope/none' }))).toMatchObject({ type: 'not_found_error', code: 'model_not_found' });
    expect(errorOf(await call(client, 'generate', { model: 'mas/image-demo', settings: { size: 7 } }))).toMatchObject({ type: 'invalid_request_error', message: expect.stringContaining('settings.size') });
    expect(errorOf(await call(client, 'chat', { model: 'mas/echo', prompt: 'hi', max_tokens: 'many' }))).toMatchObject({ code: 'invalid_value', message: expect.stringContaining('max_tokens') });
    expect(errorOf(await call(client, 'chat', { model: 'mas/echo' }))).toMatchObject({ message: expect.stringContaining('messages') });
    expect(errorOf(await call(client, 'generate', { model: 'mas/image-demo', wait_seconds: 1000 }))).toMatchObject({ message: expect.stringContaining('wait_seconds') });
    const unpaid = await makeKey(h.orm, (await makeAccount(h.orm)).id);
    const unpaidClient = await connect(unpaid.key);
    const paidOnly = await createCaller(createContext(h.deps, { kind: 'bearer', token: key })).models.list({});
    const premium = paidOnly.data.find((m) => m.paid_only)!;
    const refused = premium.type === 'text' ? await call(unpaidClient, 'chat', { model: premium.id, prompt: 'hi' }) : await call(unpaidClient, 'generate', { model: premium.id });
    expect(errorOf(refused)).toMatchObject({ type: 'permission_error', code: 'paid_account_required' });
    await Promise.all([client.close(), unpaidClient.close()]);
  });

  it('upload_file takes base64 content above the SDK\'s default 4 MiB body limit, and a public URL through the URL guard', async () => {
    const { key } = await funded();
    const client = await connect(key);
    // A 6 MB PNG-headed file: 8 MB of base64 in one JSON-RPC request.
    const big = Buffer.concat([PNG, Buffer.alloc(6 * 1024 * 1024, 7)]);
    const uploaded = await call(client, 'upload_file', { content: big.toString('base64'), filename: 'big.png' });
    expect(uploaded.structuredContent).toMatchObject({ bytes: big.length, type: 'image', filename: 'big.png' });
    // A loopback URL is private: refused, naming the field (the test allowlist admits 127.0.0.1 only).
    expect(errorOf(await call(client, 'upload_file', { url: 'http://localhost:1/x.png' }))).toMatchObject({ code: 'invalid_url', message: expect.stringContaining("'url'") });
    const http = await import('node:http');
    const source = http.createServer((_req, res) => res.end(PNG));
    await new Promise<void>((r) => source.listen(0, '127.0.0.1', () => r()));
    const url = `http://127.0.0.1:${(source.address() as { port: number }).port}/pictures/dot.png`;
    expect((await call(client, 'upload_file', { url })).structuredContent).toMatchObject({ type: 'image', filename: 'dot.png', bytes: PNG.length });
    source.close();
    expect(errorOf(await call(client, 'upload_file', { content: '%%%', filename: 'x' }))).toMatchObject({ code: 'invalid_base64' });
    // Over the 16 MiB body limit: 413 before any parsing, and the server goes on.
    const tooBig = await fetch(`${h.base}/api/v1/mcp`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 9, method: 'tools/call', params: { name: 'upload_file', arguments: { content: 'A'.repeat(17 * 1024 * 1024), filename: 'x' } } }),
    });
    expect(tooBig.status).toBe(413);
    expect((await call(client, 'get_balance')).isError).toBeFalsy();
    await client.close();
  });

  it('an unknown tool is a JSON-RPC error, not a tool result', async () => {
    const { key } = await funded();
    const client = await connect(key);
    const err = (await call(client, 'delete_everything').then(() => undefined, (e: unknown) => e)) as { code: number; message: string };
    expect(err).toMatchObject({ code: -32602 });
    expect(err.message.match(/MCP error/g)).toHaveLength(1);
    // An argument the tool does not have is named, not silently dropped.
    expect(errorOf(await call(client, 'upload_file', { content_base64: 'AAAA', filename: 'a' }))).toMatchObject({ code: 'unknown_argument', message: expect.stringContaining("'content_base64'") });
    await client.close();
  });

  it('past 5 running jobs on one key, generate is an isError result with the concurrency code, and charges nothing', async () => {
    const { account, key } = await funded('1000');
    const client = await connect(key);
    for (let i = 0; i < 5; i++) await call(client, 'generate', { model: 'mas/image-demo', settings: { delay_ms: 4000, size: 128 }, wait_seconds: 0 });
    const before = await balanceOf(account.id);
    expect(errorOf(await call(client, 'generate', { model: 'mas/image-demo', wait_seconds: 0 }))).toMatchObject({ type: 'rate_limit_error', code: 'concurrency_limit_exceeded' });
    expect(await balanceOf(account.id)).toBe(before);
    await client.close();
  });

  it('account B cannot see account A\'s job or use its file, and gets the same answer as for an unknown id', async () => {
    const a = await funded();
    const b = await funded();
    const clientA = await connect(a.key);
    const clientB = await connect(b.key);
    const job = (await call(clientA, 'generate', { model: 'mas/image-demo', settings: { size: 128 }, wait_seconds: 30 })).structuredContent as { id: string };
    const file = (await call(clientA, 'upload_file', { content: PNG.toString('base64'), filename: 'a.png' })).structuredContent as { id: string };
    const theirs = errorOf(await call(clientB, 'get_generation', { id: job.id }));
    const unknown = errorOf(await call(clientB, 'get_generation', { id: 'gen_doesnotexist000000000' }));
    expect({ ...theirs, message: theirs.message.replace(job.id, 'ID') }).toEqual({ ...unknown, message: unknown.message.replace('gen_doesnotexist000000000', 'ID') });
    const useTheirs = errorOf(await call(clientB, 'generate', { model: 'mas/image-demo', inputs: { reference_image: file.id } }));
    const useUnknown = errorOf(await call(clientB, 'generate', { model: 'mas/image-demo', inputs: { reference_image: 'file_doesnotexist00000000' } }));
    expect({ ...useTheirs, message: useTheirs.message.replace(file.id, 'ID') }).toEqual({ ...useUnknown, message: useUnknown.message.replace('file_doesnotexist00000000', 'ID') });
    await Promise.all([clientA.close(), clientB.close()]);
  });

  it('GET and DELETE answer 405 (no sessions); a foreign Host or Origin is refused', async () => {
    const { key } = await funded();
    for (const method of ['GET', 'DELETE']) {
      const res = await fetch(`${h.base}/api/v1/mcp`, { method, headers: { authorization: `Bearer ${key}` } });
      expect(res.status, method).toBe(405);
      expect(res.headers.get('allow')).toBe('POST');
    }
    const body = '{"jsonrpc":"2.0","id":1,"method":"tools/list"}';
    const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' };
    const http = await import('node:http');
    const hostStatus = await new Promise<number>((resolve, reject) => {
      const url = new URL(`${h.base}/api/v1/mcp`);
      const req = http.request({ host: url.hostname, port: url.port, path: url.pathname, method: 'POST', headers: { ...headers, host: 'evil.example' } }, (res) => {
        res.resume();
        resolve(res.statusCode!);
      });
      req.on('error', reject);
      req.end(body);
    });
    expect(hostStatus).toBe(403);
    expect((await fetch(`${h.base}/api/v1/mcp`, { method: 'POST', headers: { ...headers, origin: 'https://evil.example' }, body })).status).toBe(403);
  });
});

describe('MCP rate limit and logs', () => {
  let served: Awaited<ReturnType<typeof serve>>;
  let base: string;
  const lines: string[] = [];
  beforeAll(async () => {
    const logger = pino({ level: 'info' }, new Writable({ write: (chunk: Buffer, _enc, done) => void (lines.push(chunk.toString()), done()) }));
    const deps = testDeps(h.orm, { perMinute: 3 });
    const app = createTestApp({ deps, logger });
    served = await serve(app);
    base = served.base;
  });
  afterAll(async () => {
    await served.close();
  });

  it('past the per-key request limit, a tool call is an isError result with the rate-limit code', async () => {
    const { key } = await funded();
    const client = await connect(key, 'header', base);
    for (let i = 0; i < 3; i++) expect((await call(client, 'get_balance')).isError).toBeFalsy();
    expect(errorOf(await call(client, 'get_balance'))).toMatchObject({ type: 'rate_limit_error', code: 'rate_limit_exceeded' });
    await client.close();
  });

  it('the connector link\'s key never reaches a log line or a metric label', async () => {
    const { key } = await funded();
    const client = await connect(key, 'link', base);
    await call(client, 'list_models');
    await client.close();
    // A request after them, told apart by its id: once its line is written, theirs are too.
    const marker = `mcp-log-marker-${Date.now()}`;
    await fetch(`${base}/healthz`, { headers: { 'x-request-id': marker } });
    await vi.waitFor(() => expect(lines.join('')).toContain(marker), { timeout: 10_000 });
    const log = lines.join('');
    expect(log).toContain('/api/v1/mcp/[redacted]');
    expect(log).not.toContain(key);
    expect(log).not.toContain(key.slice(4, 20));
    const metrics = await (await fetch(`${base}/metrics`)).text();
    expect(metrics).toContain('route="/api/v1/mcp/:key"');
    expect(metrics).not.toContain(key.slice(4, 20));
  });
});
