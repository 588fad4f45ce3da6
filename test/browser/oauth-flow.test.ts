import http, { type Server } from 'node:http';
import type { MikroORM } from '@mikro-orm/postgresql';
import { auth, UnauthorizedError, type OAuthClientProvider } from '@modelcontextprotocol/sdk/client/auth.js';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { OAuthClientInformationMixed, OAuthClientMetadata, OAuthTokens } from '@modelcontextprotocol/sdk/shared/auth.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../../adapters/embedded/postgres.ts';
import { createProviderRegistry } from '../../adapters/providers/registry.ts';
import { loadCatalogFile } from '../../config/catalog.ts';
import { seedModels, validateCatalog } from '../../core/catalog/catalog.ts';
import { createContext, type CoreDeps } from '../../core/context.ts';
import { createCaller } from '../../core/router.ts';
import { launchChromium, shotAndInspect } from '../support/browser.ts';
import { TEST_CATALOG } from '../support/catalog.ts';
import { chargesWritten, makeAccount, openTestOrm, testDeps, uniqueEmail } from '../support/db.ts';
import { createTestApp } from '../support/http.ts';

/**
 * The whole OAuth connection of an MCP client, as Claude or Cursor make it: the MCP SDK
 * client's own OAuth support (its OAuthClientProvider and `auth()`) against the real server,
 * and a real Chromium in which a person signs in and presses Allow. The app's callback is a
 * real local HTTP server, as a native client's is.
 */
let orm: MikroORM;
let deps: CoreDeps;
let server: Server;
let base: string;
let browser: Browser;
let page: Page;
let callback: { server: Server; url: string; codes: URLSearchParams[] };

beforeAll(async () => {
  orm = await openTestOrm();
  await seedModels(orm.em.fork(), await loadCatalogFile('config/models.yaml', 50n));
  await seedModels(orm.em.fork(), validateCatalog(TEST_CATALOG, 50n));
  // The issuer and the MCP resource are this server's real URL, so the port is chosen first.
  const port = await freePort();
  base = `http://127.0.0.1:${port}`;
  deps = testDeps(orm, { publicBaseUrl: base, providers: createProviderRegistry({ local: { kind: 'local' } }) });
  const app = createTestApp({ deps, publicBaseUrl: base });
  server = await new Promise<Server>((resolve) => {
    const s = app.listen(port, '127.0.0.1', () => resolve(s));
  });
  callback = await startCallbackServer();
  browser = await launchChromium();
  page = await (await browser.newContext()).newPage();
});
afterAll(async () => {
  await browser?.close();
  callback?.server.closeAllConnections();
  callback?.server.close();
  server?.closeAllConnections();
  await new Promise((r) => server?.close(r));
  await orm?.close();
});

/** The app's redirect URI: a loopback server that records what the authorization server sends back. */
async function startCallbackServer() {
  const codes: URLSearchParams[] = [];
  const s = http.createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://127.0.0.1');
    if (url.pathname === '/callback') codes.push(url.searchParams);
    res.writeHead(200, { 'content-type': 'text/html' }).end('<p>You can close this window.</p>');
  });
  await new Promise<void>((resolve) => s.listen(0, '127.0.0.1', resolve));
  return { server: s, url: `http://127.0.0.1:${(s.address() as { port: number }).port}/callback`, codes };
}

/** What an MCP client keeps: its registration, tokens and PKCE verifier, and where it would open the browser. */
class TestClientProvider implements OAuthClientProvider {
  client?: OAuthClientInformationFull;
  saved?: OAuthTokens;
  verifier = '';
  authorizationUrl?: URL;
  invalidated: string[] = [];
  redirectUrl = '';
  get clientMetadata(): OAuthClientMetadata {
    return { client_name: 'Test Agent', redirect_uris: [this.redirectUrl], grant_types: ['authorization_code', 'refresh_token'], response_types: ['code'], token_endpoint_auth_method: 'none' };
  }
  state = () => 'state-42';
  clientInformation = () => this.client;
  saveClientInformation = (info: OAuthClientInformationMixed) => void (this.client = info as OAuthClientInformationFull);
  tokens = () => this.saved;
  saveTokens = (tokens: OAuthTokens) => void (this.saved = tokens);
  redirectToAuthorization = (url: URL) => void (this.authorizationUrl = url);
  saveCodeVerifier = (v: string) => void (this.verifier = v);
  codeVerifier = () => this.verifier;
  invalidateCredentials = (scope: string) => {
    this.invalidated.push(scope);
    if (scope === 'all' || scope === 'tokens') this.saved = undefined;
  };
}
type OAuthClientInformationFull = OAuthClientInformationMixed & { client_id: string };

const mcpUrl = () => new URL(`${base}/api/v1/mcp`);
const connect = async (provider: OAuthClientProvider) => {
  const client = new Client({ name: 'test-agent', version: '1.0.0' });
  const transport = new StreamableHTTPClientTransport(mcpUrl(), { authProvider: provider });
  await client.connect(transport);
  return { client, transport };
};
const textOf = (r: CallToolResult) => r.content.flatMap((c) => (c.type === 'text' ? [c.text] : [])).join('\n');
const shot = (name: string) => shotAndInspect(page, name);

describe('an MCP client connects with OAuth: sign in, Allow, no key copied', () => {
  const email = uniqueEmail('oauth');
  const password = 'a long and secret passphrase';
  const provider = new TestClientProvider();
  let accountId = '';

  it('discovers the server from the 401, registers, and sends the person to sign in and consent', async () => {
    const account = await makeAccount(orm, { coins: '50' });
    accountId = account.id;
    const admin = createCaller(createContext(deps, { kind: 'internal' }));
    await orm.em.fork().execute('update accounts set email = ? where id = ?', [email, accountId]);
    await admin.accounts.setPassword({ account: accountId, password });

    Object.assign(provider, { redirectUrl: callback.url });
    // The first connection has no token: the transport meets the 401, follows resource_metadata,
    // registers the client and hands over the authorization URL.
    await expect(connect(provider)).rejects.toBeInstanceOf(UnauthorizedError);
    expect(provider.client?.client_id).toMatch(/^mcl_/);
    expect(provider.client).not.toHaveProperty('client_secret');
    const url = provider.authorizationUrl!;
    expect(url.origin + url.pathname).toBe(`${base}/authorize`);
    expect(url.searchParams.get('code_challenge_method')).toBe('S256');
    expect(url.searchParams.get('resource')).toBe(`${base}/api/v1/mcp`);

    // The person, signed out, signs in and comes back to the consent page.
    await page.goto(url.href);
    await page.waitForURL(/\/login\?next=/);
    await page.getByLabel('Email').fill(email);
    await page.getByLabel('Password').fill(password);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.waitForURL(/\/authorize\?/);
    await expect(page.getByRole('heading', { name: 'Connect Test Agent?' }).isVisible()).resolves.toBe(true);
    // The redirect host is in plain sight, since a name can lie; so is what the app may do.
    await expect(page.locator('.redirect-host').textContent()).resolves.toBe('127.0.0.1 (this computer)');
    await expect(page.getByText("spend this account's coins").isVisible()).resolves.toBe(true);
    await expect(page.getByLabel('Access ends after').inputValue()).resolves.toBe('30');
    await page.getByLabel(/Spend cap/).fill('20');
    await page.getByLabel('Access ends after').selectOption('7');
    await shot('oauth-consent.png');
    await page.getByRole('button', { name: 'Allow' }).click();
    await page.waitForURL((u) => u.href.startsWith(callback.url));

    const answer = callback.codes.at(-1)!;
    expect(answer.get('state')).toBe('state-42');
    expect(answer.get('iss')).toBe(base);
    expect(answer.get('code')).toMatch(/^mas_ac_/);
  });

  it('exchanges the code with PKCE, and the token calls the tools and spends the account coins', async () => {
    await new StreamableHTTPClientTransport(mcpUrl(), { authProvider: provider }).finishAuth(callback.codes.at(-1)!.get('code')!);
    expect(provider.saved?.access_token).toMatch(/^mas_at_/);
    expect(provider.saved?.refresh_token).toMatch(/^mas_rt_/);
    expect(provider.saved?.expires_in).toBeGreaterThan(3500);

    const { client } = await connect(provider);
    const balance = (await client.callTool({ name: 'get_balance', arguments: {} })) as CallToolResult;
    expect(balance.isError ?? false).toBe(false);
    expect(balance.structuredContent).toMatchObject({ coins: 50 });
    const chat = (await client.callTool({ name: 'chat', arguments: { model: 'mas/echo', prompt: 'Hello from an app', max_tokens: 20 } })) as CallToolResult;
    expect(chat.isError ?? false, textOf(chat)).toBe(false);
    await client.close();

    // Billed to the account, through the app's own key, and the ledger names the connection.
    const [conn] = await orm.em.fork().execute<{ id: string; key_id: string; spend_cap_micro: string; expires_at: Date }[]>(
      'select id, key_id, spend_cap_micro::text, expires_at from app_connections where account_id = ?',
      [accountId],
    );
    expect(conn!.spend_cap_micro).toBe('20000000');
    expect(new Date(conn!.expires_at).getTime() - Date.now()).toBeGreaterThan(6.9 * 86_400_000);
    await chargesWritten();
    const holds = await orm.em.fork().execute<{ app: string; key: string; status: string }[]>(
      `select metadata->>'app_connection_id' as app, metadata->>'key_id' as key, status from holds where account_id = ?`,
      [accountId],
    );
    expect(holds).toEqual([{ app: conn!.id, key: conn!.key_id, status: 'settled' }]);
    const [key] = await orm.em.fork().execute<{ kind: string }[]>('select kind from api_keys where id = ?', [conn!.key_id]);
    expect(key!.kind).toBe('app');
  });

  it('refreshes: a new pair, the old refresh token used up, the new access token works', async () => {
    const before = provider.saved!;
    const result = await auth(provider, { serverUrl: mcpUrl() });
    expect(result).toBe('AUTHORIZED');
    expect(provider.saved!.access_token).not.toBe(before.access_token);
    expect(provider.saved!.refresh_token).not.toBe(before.refresh_token);
    const { client } = await connect(provider);
    expect(((await client.callTool({ name: 'get_balance', arguments: {} })) as CallToolResult).isError ?? false).toBe(false);
    await client.close();
  });

  it('the person revokes the app on the Connected apps page; its next call is refused and it must sign in again', async () => {
    await page.goto(`${base}/account/apps`);
    const row = page.getByRole('row', { name: /Test Agent/ });
    await expect(row.textContent()).resolves.toMatch(/127\.0\.0\.1/);
    await shot('oauth-connected-apps.png');
    await page.getByRole('button', { name: 'Revoke Test Agent' }).click();
    await page.waitForURL(/\/account\/apps$/);
    await expect(page.getByRole('row', { name: /Test Agent/ }).textContent()).resolves.toMatch(/revoked/);

    // The access token is refused (401), the refresh fails (the connection is gone), and the
    // client is sent to the authorization URL again: the way a client starts sign-in anew.
    provider.authorizationUrl = undefined;
    await expect(connect(provider)).rejects.toBeInstanceOf(UnauthorizedError);
    expect(provider.authorizationUrl).toBeDefined();
    const raw = await fetch(mcpUrl(), { method: 'POST', headers: { authorization: 'Bearer ' + 'mas_at_' + 'x'.repeat(43), 'content-type': 'application/json' }, body: '{}' });
    expect(raw.status).toBe(401);
    expect(raw.headers.get('www-authenticate')).toContain('error="invalid_token"');
  });
});
