import { Client, StreamableHTTPClientTransport, type CallToolResult } from '@modelcontextprotocol/client';
import { Client as LegacyClient } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport as LegacyTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { issueAccessToken, makeAppConnection } from '../support/apps.ts';
import { makeAccount, makeKey } from '../support/db.ts';
import { startJobHarness, type JobHarness } from '../support/jobs.ts';
import { MODEL_PICKER_URI, RESULT_VIEW_URI } from '../../adapters/mcp/apps/index.ts';

/**
 * The 2026-07-28 revision over the v2 SDK (adapters/mcp/modern.ts), through the v2 client
 * pinned to that revision (a pin never falls back to `initialize`), over real HTTP, on real
 * PostgreSQL and Temporal. Every HTTP answer the client gets is recorded: none may be a 4xx.
 */
let h: JobHarness;
beforeAll(async () => {
  h = await startJobHarness();
});
afterAll(() => h.close());

type Way = 'header' | 'link' | 'oauth';

async function funded(coins = '100') {
  const account = await makeAccount(h.orm, { coins });
  const key = await makeKey(h.orm, account.id);
  return { account, key: key.key };
}

/** A pinned v2 client, and the HTTP statuses and request bodies it saw. */
async function connect(way: Way, key: string) {
  const seen: { status: number; method: string; version: string | null }[] = [];
  const recording = async (input: string | URL | Request, init?: RequestInit) => {
    const response = await fetch(input, init);
    const body = typeof init?.body === 'string' ? (JSON.parse(init.body) as { method?: string }) : {};
    seen.push({ status: response.status, method: body.method ?? '', version: new Headers(init?.headers).get('mcp-protocol-version') });
    return response;
  };
  let url = `${h.base}/api/v1/mcp`;
  let token = key;
  if (way === 'link') url = `${h.base}/api/v1/mcp/${key}`;
  if (way === 'oauth') {
    const account = await makeAccount(h.orm, { coins: '100' });
    const app = await makeAppConnection(h.orm, account.id, { name: 'Modern client' });
    token = await issueAccessToken(h.orm, app.id, h.deps.config.oauth.resource);
  }
  const client = new Client({ name: 'mas-test-modern', version: '1.0.0' }, { versionNegotiation: { mode: { pin: '2026-07-28' } } });
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    fetch: recording,
    ...(way === 'link' ? {} : { requestInit: { headers: { Authorization: `Bearer ${token}` } } }),
  });
  await client.connect(transport);
  return { client, seen };
}

const call = (client: Client, name: string, args: Record<string, unknown> = {}) => client.callTool({ name, arguments: args }) as Promise<CallToolResult>;
const text = (r: CallToolResult) => r.content.flatMap((c) => (c.type === 'text' ? [c.text] : [])).join('\n');

describe('MCP 2026-07-28 (v2 SDK)', () => {
  it.each<Way>(['header', 'link', 'oauth'])('connects at 2026-07-28 with no fallback, lists the tools, generates with progress, and gets isError for bad input (%s)', async (way) => {
    const { key } = await funded();
    const { client, seen } = await connect(way, key);
    expect(client.getProtocolEra()).toBe('modern');
    expect(client.getNegotiatedProtocolVersion()).toBe('2026-07-28');
    expect(client.getServerVersion()).toMatchObject({ name: 'model-access-service', title: 'Model Access Service' });
    expect(client.getInstructions()).toMatch(/coins/);
    // Tools, and the MCP Apps views as resources: no subscriptions, prompts or logging are advertised.
    expect(Object.keys(client.getServerCapabilities() ?? {}).sort()).toEqual(['resources', 'tools']);

    const { tools } = await client.listTools();
    expect(tools.map((t) => t.name)).toEqual(expect.arrayContaining(['list_models', 'get_model', 'chat', 'generate', 'upload_file', 'get_generation', 'get_balance']));
    for (const tool of tools) expect(tool.inputSchema.type, tool.name).toBe('object');

    const notes: { progress: number; message?: string }[] = [];
    const generated = await client.callTool(
      { name: 'generate', arguments: { model: 'mas/image-demo', prompt: 'a fox', settings: { size: 128, delay_ms: 1500 }, wait_seconds: 30 } },
      { onprogress: (p) => notes.push(p), timeout: 60_000 },
    );
    const job = generated.structuredContent as { id: string; status: string; output: { url: string } };
    expect(job.status).toBe('succeeded');
    expect(generated.content).toContainEqual(expect.objectContaining({ type: 'resource_link', uri: job.output.url }));
    expect(notes.length).toBeGreaterThanOrEqual(1);
    expect(notes[0]!.message).toContain(job.id);

    // A domain error is a tool result with the same text as the v1 binding's, naming the field.
    const bad = await call(client, 'generate', { model: 'mas/image-demo', settings: { size: 999 } });
    expect(bad.isError).toBe(true);
    expect(text(bad)).toMatch(/size/);
    const unknown = await call(client, 'get_generation', { id: 'gen_nothing' });
    expect(unknown.isError).toBe(true);

    expect(seen.length).toBeGreaterThan(0);
    expect(seen.filter((s) => s.status >= 400)).toEqual([]);
    expect(seen.map((s) => s.method)).not.toContain('initialize');
    expect(seen[0]!.method).toBe('server/discover');
    await client.close();
  });

  it('a tool error reads the same over both revisions', async () => {
    const { key } = await funded();
    const { client } = await connect('header', key);
    const legacy = new LegacyClient({ name: 'mas-test-legacy', version: '1.0.0' });
    await legacy.connect(new LegacyTransport(new URL(`${h.base}/api/v1/mcp`), { requestInit: { headers: { Authorization: `Bearer ${key}` } } }));
    expect(legacy.getServerVersion()?.name).toBe('model-access-service');
    for (const args of [{ model: 'mas/image-demo', settings: { size: 999 } }, { model: 'mas/nothing-here' }, { model: 'mas/image-demo', nonsense: 1 }]) {
      const modern = await call(client, 'generate', args);
      const old = (await legacy.callTool({ name: 'generate', arguments: args })) as CallToolResult;
      expect(modern.isError).toBe(true);
      expect(text(modern)).toBe(text(old as CallToolResult));
    }
    // An unknown tool is a JSON-RPC error on both.
    await expect(call(client, 'no_such_tool')).rejects.toThrow(/Unknown tool: no_such_tool/);
    await expect(legacy.callTool({ name: 'no_such_tool', arguments: {} })).rejects.toThrow(/Unknown tool: no_such_tool/);
    await legacy.close();
    await client.close();
  });

  it('the door stands in front of the 2026-07-28 path: 401 with the challenge before any MCP message', async () => {
    const discover = { jsonrpc: '2.0', id: 1, method: 'server/discover', params: { _meta: { 'io.modelcontextprotocol/protocolVersion': '2026-07-28' } } };
    const post = (url: string, headers: Record<string, string> = {}) =>
      fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2026-07-28', ...headers }, body: JSON.stringify(discover) });
    const none = await post(`${h.base}/api/v1/mcp`);
    expect(none.status).toBe(401);
    expect(none.headers.get('www-authenticate')).toMatch(/resource_metadata="http:\/\/localhost\/\.well-known\/oauth-protected-resource\/api\/v1\/mcp"/);
    expect((await post(`${h.base}/api/v1/mcp`, { authorization: 'Bearer mas_nope' })).status).toBe(401);
    expect((await post(`${h.base}/api/v1/mcp/mas_nope`)).status).toBe(401);
    // A revision the server does not serve is refused by the modern path, with the revisions it serves.
    const { key } = await funded();
    const odd = await fetch(`${h.base}/api/v1/mcp`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: `Bearer ${key}`, 'mcp-protocol-version': '2099-01-01' },
      body: JSON.stringify({ ...discover, params: { _meta: { 'io.modelcontextprotocol/protocolVersion': '2099-01-01' } } }),
    });
    expect(odd.status).toBe(400);
    expect(await odd.text()).toContain('2026-07-28');
  });
});

describe('MCP 2026-07-28: what is not offered, and the limits', () => {
  const META = { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientInfo': { name: 't', version: '1' }, 'io.modelcontextprotocol/clientCapabilities': {} };
  const post = (key: string, method: string, params: Record<string, unknown>, body?: string) =>
    fetch(`${h.base}/api/v1/mcp`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: `Bearer ${key}`, 'mcp-protocol-version': '2026-07-28', 'mcp-method': method },
      body: body ?? JSON.stringify({ jsonrpc: '2.0', id: 1, method, params: { ...params, _meta: META } }),
    });

  it('serves the MCP Apps views as on the 2025 revisions, and lists no 2025-only task vocabulary', async () => {
    const { key } = await funded();
    const { client } = await connect('header', key);
    const { resources } = await client.listResources();
    expect(resources.map((r) => r.uri).sort()).toEqual([MODEL_PICKER_URI, RESULT_VIEW_URI].sort());
    const read = await client.readResource({ uri: RESULT_VIEW_URI });
    const view = read.contents[0] as { mimeType?: string; text?: string; _meta?: { ui?: { csp?: { resourceDomains?: string[] } } } };
    expect(view.mimeType).toBe('text/html;profile=mcp-app');
    expect(view.text).toMatch(/^<!doctype html>/i);
    // One origin, PUBLIC_BASE_URL's (the harness's is http://localhost).
    expect(view._meta?.ui?.csp?.resourceDomains).toEqual(['http://localhost']);
    await expect(client.readResource({ uri: 'ui://model-access-service/nothing.html' })).rejects.toThrow(/Resource not found/);
    // 2026-07-28 answers an unknown resource with invalid params (-32602) naming the uri, not 2025's -32002 (docs/mcp.md).
    const code = await client.readResource({ uri: 'ui://model-access-service/nothing.html' }).then(() => undefined, (err: { code?: number; data?: unknown }) => ({ code: err.code, data: err.data }));
    expect(code).toEqual({ code: -32602, data: { uri: 'ui://model-access-service/nothing.html' } });
    const { tools } = await client.listTools();
    const generate = tools.find((t) => t.name === 'generate') as Record<string, unknown>;
    expect(generate._meta).toMatchObject({ ui: { resourceUri: RESULT_VIEW_URI } });
    expect(generate.execution).toBeUndefined();
    await client.close();
  });

  it('subscriptions/listen is acknowledged with nothing subscribed and ends at once', async () => {
    const { key } = await funded();
    const res = await post(key, 'subscriptions/listen', { notifications: { toolsListChanged: true } });
    expect(res.status).toBe(200);
    // The stream ends by itself: reading it to the end returns.
    const stream = await res.text();
    expect(stream).toContain('"notifications":{}');
    expect(stream).toContain('"resultType":"complete"');
  });

  it('a body over 16 MiB is refused with 413 on the 2026-07-28 path, never a 500', async () => {
    const { key } = await funded();
    const big = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'upload_file', arguments: { content: 'A'.repeat(17 * 1024 * 1024), filename: 'big.bin' }, _meta: META } });
    const res = await post(key, 'tools/call', {}, big);
    expect(res.status).toBe(413);
  });
});
