import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import type { MikroORM } from '@mikro-orm/postgresql';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadCatalogFile } from '../../config/catalog.ts';
import { seedModels } from '../../core/catalog/catalog.ts';
import { makeAccount, makeKey, openTestOrm } from '../support/db.ts';
import { bearer, getJson, startTestApi } from '../support/http.ts';

/**
 * A setting of the wrong type says what came in, on REST and MCP alike (the message is core's,
 * core/generations/validate.ts): `{"size": "256"}` for the demo image model, whose sizes are
 * numbers. Refused before anything is reserved: nothing is charged.
 */
let orm: MikroORM;
let api: Awaited<ReturnType<typeof startTestApi>>;
beforeAll(async () => {
  orm = await openTestOrm();
  await seedModels(orm.em.fork(), await loadCatalogFile('config/models.yaml', 50n));
  api = await startTestApi(orm);
});
afterAll(async () => {
  await api.close();
  await orm.close();
});

describe('a setting of the wrong type', () => {
  it.each([
    [{ size: '256' }, 'settings.size', `Invalid value for 'settings.size': must be one of the numbers 128, 256, 512, got the string "256".`],
    [{ delay_ms: '10' }, 'settings.delay_ms', `Invalid value for 'settings.delay_ms': must be a number, got the string "10".`],
  ])('%j: REST and MCP say what they got', async (settings, param, message) => {
    const account = await makeAccount(orm, { coins: '10' });
    const { key } = await makeKey(orm, account.id);
    const body = { model: 'mas/image-demo', prompt: 'a fox', settings };
    const rest = await getJson(`${api.url}/api/v1/generations`, { method: 'POST', headers: { ...bearer(key), 'content-type': 'application/json' }, body: JSON.stringify(body) });
    expect(rest.status).toBe(400);
    expect(rest.body.error).toMatchObject({ type: 'invalid_request_error', param, message });

    const client = new Client({ name: 'setting-types', version: '1.0.0' });
    await client.connect(new StreamableHTTPClientTransport(new URL(`${api.url}/api/v1/mcp`), { requestInit: { headers: { Authorization: `Bearer ${key}` } } }));
    const result = (await client.callTool({ name: 'generate', arguments: { ...body, wait_seconds: 1 } })) as CallToolResult;
    await client.close();
    expect(result.isError).toBe(true);
    const json = result.content.flatMap((c) => (c.type === 'text' && c.text.startsWith('{"error"') ? [c.text] : []))[0]!;
    expect(JSON.parse(json)).toMatchObject({ error: { type: 'invalid_request_error', message }, status: 400 });

    const [wallet] = await orm.em.fork().execute<{ c: string }[]>('select (subscription_micro + purchased_micro)::text as c from wallets where account_id = ?', [account.id]);
    expect(wallet!.c).toBe('10000000');
  });
});
