import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import type { MikroORM } from '@mikro-orm/postgresql';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createProviderRegistry } from '../../adapters/providers/registry.ts';
import { loadCatalogFile } from '../../config/catalog.ts';
import { seedModels } from '../../core/catalog/catalog.ts';
import { chargesWritten, makeAccount, makeKey, openTestOrm } from '../support/db.ts';
import { bearer, getJson, startTestApi } from '../support/http.ts';

/**
 * REST POST /chat/completions and MCP `chat` parse a message with the same core schema
 * (core/chat/schema.ts): every message shape is accepted by both or refused by both, with the
 * same message naming the same field, and a refused call charges nothing.
 */
let orm: MikroORM;
let api: Awaited<ReturnType<typeof startTestApi>>;
beforeAll(async () => {
  orm = await openTestOrm();
  await seedModels(orm.em.fork(), await loadCatalogFile('config/models.yaml', 50n));
  api = await startTestApi(orm, { providers: createProviderRegistry({ local: { kind: 'local' } }) });
});
afterAll(async () => {
  await api.close();
  await orm.close();
});

const tool = { type: 'function', function: { name: 'lookup', parameters: { type: 'object', properties: { q: { type: 'string' } } } } };
const call = { id: 'call_1', type: 'function', function: { name: 'lookup', arguments: '{"q":"fox"}' } };

type Shape = { name: string; messages: unknown[]; tools?: unknown[]; refused?: { param: string; message: RegExp } };
const SHAPES: Shape[] = [
  { name: 'a plain string', messages: [{ role: 'user', content: 'Hello there' }] },
  { name: 'one text part', messages: [{ role: 'user', content: [{ type: 'text', text: 'Hello there' }] }] },
  { name: 'several text parts', messages: [{ role: 'user', content: [{ type: 'text', text: 'Hello ' }, { type: 'text', text: 'there' }] }] },
  { name: 'text parts on system and assistant messages', messages: [
    { role: 'system', content: [{ type: 'text', text: 'Be brief.' }] },
    { role: 'user', content: 'Hi' },
    { role: 'assistant', content: [{ type: 'text', text: 'Hello.' }] },
    { role: 'user', content: [{ type: 'text', text: 'Again' }] },
  ] },
  { name: 'a tool call and its result in text parts', tools: [tool], messages: [
    { role: 'user', content: 'Find a fox' },
    { role: 'assistant', content: null, tool_calls: [call] },
    { role: 'tool', tool_call_id: 'call_1', content: [{ type: 'text', text: '{"found":true}' }] },
  ] },
  { name: 'an image_url part', messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'https://example.com/a.png' } }] }],
    refused: { param: 'messages.0.content.0', message: /images are not supported/ } },
  { name: 'text and image parts mixed', messages: [{ role: 'user', content: [{ type: 'text', text: 'What is this?' }, { type: 'image_url', image_url: { url: 'https://example.com/a.png' } }] }],
    refused: { param: 'messages.0.content.1', message: /images are not supported/ } },
  { name: 'an unknown part type', messages: [{ role: 'user', content: [{ type: 'input_audio', input_audio: { data: 'AAAA', format: 'wav' } }] }],
    refused: { param: 'messages.0.content.0', message: /'input_audio' are not supported/ } },
  { name: 'a text part without text', messages: [{ role: 'user', content: [{ type: 'text' }] }],
    refused: { param: 'messages.0.content.0.text', message: /needs a string `text`/ } },
  { name: 'an empty parts array', messages: [{ role: 'user', content: [] }], refused: { param: 'messages.0.content', message: /./ } },
  { name: 'null content on a user message', messages: [{ role: 'user', content: null }], refused: { param: 'messages.0.content', message: /is required/ } },
  { name: 'a number as content', messages: [{ role: 'user', content: 42 }], refused: { param: 'messages.0.content', message: /./ } },
  { name: "the deprecated 'function' role", messages: [{ role: 'function', name: 'lookup', content: 'x' }], refused: { param: 'messages.0.role', message: /must be one of/ } },
  { name: 'a tool message without tool_call_id', messages: [{ role: 'user', content: 'x' }, { role: 'tool', content: 'y' }], refused: { param: 'messages.1.tool_call_id', message: /is required/ } },
];

let key: string;
let accountId: string;
beforeAll(async () => {
  const account = await makeAccount(orm, { coins: '100' });
  accountId = account.id;
  key = (await makeKey(orm, account.id)).key;
});

const balance = async () => (await chargesWritten(), await orm.em.fork().execute<{ c: string }[]>('select (subscription_micro + purchased_micro)::text as c from wallets where account_id = ?', [accountId]))[0]!.c;

async function mcp(args: Record<string, unknown>): Promise<CallToolResult> {
  const client = new Client({ name: 'chat-parity', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(`${api.url}/api/v1/mcp`), { requestInit: { headers: { Authorization: `Bearer ${key}` } } }));
  try {
    return (await client.callTool({ name: 'chat', arguments: args })) as CallToolResult;
  } finally {
    await client.close();
  }
}
const mcpError = (r: CallToolResult) => {
  const json = r.content.flatMap((c) => (c.type === 'text' && c.text.startsWith('{"error"') ? [c.text] : []))[0];
  return (JSON.parse(json!) as { error: { message: string; code: string }; status: number }).error;
};

describe('chat parity: REST and MCP accept and refuse the same message shapes', () => {
  it.each(SHAPES)('$name', async (shape) => {
    const before = await balance();
    const body = { model: 'mas/echo', messages: shape.messages, max_tokens: 16, ...(shape.tools && { tools: shape.tools }) };
    const rest = await getJson(`${api.url}/api/v1/chat/completions`, { method: 'POST', headers: { ...bearer(key), 'content-type': 'application/json' }, body: JSON.stringify(body) });
    const viaMcp = await mcp(body);
    if (!shape.refused) {
      expect(rest.status, JSON.stringify(rest.body)).toBe(200);
      expect(viaMcp.isError, JSON.stringify(viaMcp.content)).toBeFalsy();
      const answer = (viaMcp.structuredContent as { answer: string }).answer;
      // The echo model repeats the last message: parts joined into one text, on both surfaces.
      expect(answer).toBe(rest.body.choices[0].message.content);
      return;
    }
    expect(rest.status).toBe(400);
    expect(rest.body.error.param).toBe(shape.refused.param);
    expect(rest.body.error.message).toMatch(shape.refused.message);
    expect(viaMcp.isError).toBe(true);
    const error = mcpError(viaMcp);
    expect(error.message).toBe(rest.body.error.message);
    expect(error.message).toContain(`'${shape.refused.param}'`);
    expect(error.code).toBe(rest.body.error.code);
    expect(await balance()).toBe(before);
  });
});
