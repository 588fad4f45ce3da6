import { createHash, randomBytes } from 'node:crypto';
import { escape, moneyText } from '../../adapters/web/html.ts';
import http, { type Server } from 'node:http';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listAppConnections, revokeAppConnection } from '../../core/apps/connections.ts';
import { MAX_ACTIVE_APP_CONNECTIONS } from '../../core/oauth/authorize.ts';
import { createContext } from '../../core/context.ts';
import { parseCoins } from '../../core/money/coins.ts';
import { credit } from '../../core/money/wallet.ts';
import { createCaller } from '../../core/router.ts';
import { chargesWritten, makeAccount, makeKey } from '../support/db.ts';
import { startJobHarness, type JobHarness } from '../support/jobs.ts';
import { refusal } from '../support/refusal.ts';
import { CookieBrowser, csrfOf, hiddenFields, signUpPerson, type Person } from '../support/cookie-browser.ts';

/**
 * The OAuth authorization server for MCP clients (docs/oauth.md) over real HTTP, with fetch as
 * the app and as the person's browser (cookies kept by hand): metadata, registration, consent,
 * PKCE-bound single-use codes, rotating refresh tokens, audience-checked access tokens,
 * revocation and spend caps. The issuer is the served URL itself, as in production.
 */
let h: JobHarness;
let base: string;
beforeAll(async () => {
  h = await startJobHarness({ publicBaseUrlIsServed: true });
  base = h.base;
});
afterAll(() => h.close());

/** The app's redirect URI: a loopback callback, as native clients (Claude Code, Cursor) register. Nothing needs to listen there. */
const CALLBACK = 'http://127.0.0.1:47123/callback';
const mcpResource = () => `${base}/api/v1/mcp`;

// ---------------------------------------------------------------------------------------------
// The person: signed up through the form, in a cookie-jar browser (test/support/cookie-browser.ts).

/** A person signs up through the sign-up form, and stays signed in in their browser. */
const signUp = (): Promise<Person> => signUpPerson(base, h.orm, 'oauth');

async function fund(person: Person, coins: string): Promise<void> {
  await credit(h.orm.em.fork(), { accountId: person.accountId, kind: 'topup', amount: parseCoins(coins), reference: 'fixture', idempotencyKey: `oauth-topup:${person.accountId}`, description: 'Top-up' });
}

const balanceOf = async (accountId: string) =>
  (await h.orm.em.fork().execute<{ c: string }[]>('select (subscription_micro + purchased_micro)::text as c from wallets where account_id = ?', [accountId]))[0]!.c;

// ---------------------------------------------------------------------------------------------
// The app: registration, PKCE, the token endpoint.

async function register(body: Record<string, unknown>) {
  const res = await fetch(`${base}/register`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

/** A registered public client; its id. */
async function registerClient(redirectUris: string[] = [CALLBACK], name = 'Test MCP client'): Promise<string> {
  const res = await register({ redirect_uris: redirectUris, client_name: name, token_endpoint_auth_method: 'none' });
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  return res.body.client_id as string;
}

function pkce() {
  const verifier = randomBytes(48).toString('base64url'); // 64 characters
  return { verifier, challenge: createHash('sha256').update(verifier).digest('base64url') };
}

interface AuthorizationRequest {
  clientId: string;
  redirectUri?: string;
  challenge: string;
  state?: string;
  resource?: string;
}

function authorizePath(r: AuthorizationRequest): string {
  const q = new URLSearchParams({ client_id: r.clientId, response_type: 'code', code_challenge: r.challenge, code_challenge_method: 'S256', resource: r.resource ?? mcpResource() });
  if (r.redirectUri !== undefined) q.set('redirect_uri', r.redirectUri);
  if (r.state !== undefined) q.set('state', r.state);
  return `/authorize?${q.toString()}`;
}

/** The consent page for a request: its CSRF token and the hidden fields it carries. */
async function consentPage(person: Person, r: AuthorizationRequest) {
  const res = await person.browser.fetch(authorizePath(r));
  const page = await res.text();
  expect(res.status, page.slice(0, 500)).toBe(200);
  return { page, csrf: csrfOf(page)!, fields: hiddenFields(page) };
}

/** The answer the browser gets after Allow or Deny: a 303 to the app. */
function location(res: Response): URL {
  expect(res.status).toBe(303);
  return new URL(res.headers.get('location')!);
}

interface Authorized {
  clientId: string;
  code: string;
  verifier: string;
  redirectUri: string;
  state: string;
}

/** The whole front channel: the consent page, Allow, and the code back at the app's redirect URI (checked for `state` and `iss`). */
async function authorize(person: Person, clientId: string, opts: { capCoins?: string; lifetime?: string; redirectUri?: string } = {}): Promise<Authorized> {
  const { verifier, challenge } = pkce();
  // Characters that must survive the consent form's hidden field and the redirect.
  const state = `st&"<'=${randomBytes(6).toString('hex')}`;
  const redirectUri = opts.redirectUri ?? CALLBACK;
  const { fields, csrf } = await consentPage(person, { clientId, redirectUri, challenge, state });
  const res = await person.browser.post('/authorize', { ...fields, _csrf: csrf, decision: 'allow', spend_cap_coins: opts.capCoins ?? '', lifetime: opts.lifetime ?? '30' });
  const to = location(res);
  expect(`${to.origin}${to.pathname}`).toBe(redirectUri);
  expect(to.searchParams.get('state')).toBe(state);
  expect(to.searchParams.get('iss')).toBe(base);
  const code = to.searchParams.get('code');
  expect(code).toMatch(/^mas_ac_/);
  return { clientId, code: code!, verifier, redirectUri, state };
}

async function token(fields: Record<string, string>) {
  const res = await fetch(`${base}/token`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: new URLSearchParams(fields) });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

/** Trades a code for tokens, as a client does; any field can be overridden to test a refusal. */
const exchange = (a: Authorized, overrides: Record<string, string> = {}) =>
  token({ grant_type: 'authorization_code', code: a.code, code_verifier: a.verifier, client_id: a.clientId, redirect_uri: a.redirectUri, resource: mcpResource(), ...overrides });

const refresh = (clientId: string, refreshToken: string) => token({ grant_type: 'refresh_token', refresh_token: refreshToken, client_id: clientId, resource: mcpResource() });

/** The OAuth error a refused token request answers with: 400 and the RFC's code. */
function oauthError(res: { status: number; body: Record<string, unknown> }): string {
  expect(res.status, JSON.stringify(res.body)).toBe(400);
  expect(res.body.error_description).toEqual(expect.any(String));
  return res.body.error as string;
}

interface Connected extends Authorized {
  access: string;
  refresh: string;
  connectionId: string;
}

/** Register (unless a client is given), authorize and exchange: a connected app with its tokens and connection id. */
async function connectApp(person: Person, opts: { clientId?: string; capCoins?: string; lifetime?: string } = {}): Promise<Connected> {
  const clientId = opts.clientId ?? (await registerClient());
  const authorized = await authorize(person, clientId, opts);
  const res = await exchange(authorized);
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  expect(res.body).toMatchObject({ token_type: 'Bearer', access_token: expect.stringMatching(/^mas_at_/), refresh_token: expect.stringMatching(/^mas_rt_/), expires_in: expect.any(Number) });
  const [row] = await h.orm.em.fork().execute<{ id: string }[]>('select c.id from app_connections c where c.account_id = ? and c.client_id = ? order by c.created_at desc limit 1', [
    person.accountId,
    clientId,
  ]);
  return { ...authorized, access: res.body.access_token as string, refresh: res.body.refresh_token as string, connectionId: row!.id };
}

const connection = async (id: string) =>
  (
    await h.orm.em.fork().execute<{ revoked_at: Date | null; key_revoked_at: Date | null; spend_cap_micro: string | null; key_kind: string }[]>(
      'select c.revoked_at, k.revoked_at as key_revoked_at, c.spend_cap_micro::text, k.kind as key_kind from app_connections c join api_keys k on k.id = c.key_id where c.id = ?',
      [id],
    )
  )[0]!;

// ---------------------------------------------------------------------------------------------
// The MCP server, with an access token.

/** A raw MCP request (tools/list): its status and challenge, for the door's checks. */
async function mcpDoor(authorization?: string, path = '/api/v1/mcp') {
  const res = await fetch(`${base}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...(authorization ? { authorization } : {}) },
    body: '{"jsonrpc":"2.0","id":1,"method":"tools/list"}',
  });
  await res.text();
  return { status: res.status, challenge: res.headers.get('www-authenticate') };
}
const mcpStatus = async (accessToken: string) => (await mcpDoor(`Bearer ${accessToken}`)).status;

async function mcpClient(accessToken: string): Promise<Client> {
  const client = new Client({ name: 'oauth-test', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(mcpResource()), { requestInit: { headers: { Authorization: `Bearer ${accessToken}` } } }));
  return client;
}
const callTool = (client: Client, name: string, args: Record<string, unknown> = {}) => client.callTool({ name, arguments: args }) as Promise<CallToolResult>;
const toolText = (r: CallToolResult) => r.content.flatMap((c) => (c.type === 'text' ? [c.text] : [])).join('\n');
/** The JSON part of an isError result: `{error: {type, code, message}, status}`. */
function toolError(r: CallToolResult) {
  expect(r.isError, toolText(r)).toBe(true);
  const json = r.content.flatMap((c) => (c.type === 'text' && c.text.startsWith('{"error"') ? [c.text] : []))[0];
  return JSON.parse(json!) as { error: { type: string; code: string; message: string }; status: number };
}

// ---------------------------------------------------------------------------------------------

describe('discovery', () => {
  // An MCP client finds everything from a 401 at the MCP server: resource metadata, then the authorization server's.
  it('publishes authorization server and protected resource metadata naming the served URL', async () => {
    const as = await (await fetch(`${base}/.well-known/oauth-authorization-server`)).json();
    expect(as).toMatchObject({
      issuer: base,
      authorization_endpoint: `${base}/authorize`,
      token_endpoint: `${base}/token`,
      registration_endpoint: `${base}/register`,
      revocation_endpoint: `${base}/revoke`,
      code_challenge_methods_supported: ['S256'],
      client_id_metadata_document_supported: true,
      authorization_response_iss_parameter_supported: true,
    });
    for (const path of ['/.well-known/oauth-protected-resource/api/v1/mcp', '/.well-known/oauth-protected-resource']) {
      const prm = await (await fetch(`${base}${path}`)).json();
      expect(prm, path).toMatchObject({ resource: `${base}/api/v1/mcp`, authorization_servers: [base] });
    }
  });

  // RFC 9728 section 5.1 and RFC 6750 section 3.1: the challenge points to the metadata, and says invalid_token only when a token was sent.
  it('answers 401 at the MCP server with a WWW-Authenticate naming the resource metadata', async () => {
    const metadata = `resource_metadata="${base}/.well-known/oauth-protected-resource/api/v1/mcp"`;
    const none = await mcpDoor();
    expect(none.status).toBe(401);
    expect(none.challenge).toContain(metadata);
    expect(none.challenge).not.toContain('error=');
    for (const bad of ['Bearer mas_at_bogus', `Bearer mas_at_${randomBytes(32).toString('base64url')}`, 'Bearer mas_not_a_key']) {
      const res = await mcpDoor(bad);
      expect(res.status, bad).toBe(401);
      expect(res.challenge, bad).toContain(metadata);
      expect(res.challenge, bad).toContain('error="invalid_token"');
    }
  });
});

describe('registration', () => {
  // Only https, loopback http or private-use schemes may receive codes (RFC 8252; docs/oauth.md).
  it('refuses redirect URIs that are not https, loopback http or a private-use scheme', async () => {
    for (const uri of ['http://evil.example/cb', 'https://app.example/cb#frag', 'https://user:pw@app.example/cb', 'file:///etc/passwd']) {
      const res = await register({ redirect_uris: [uri], token_endpoint_auth_method: 'none' });
      expect(res.status, uri).toBe(400);
      expect(res.body.error, uri).toBe('invalid_redirect_uri');
    }
    expect((await register({ redirect_uris: [], token_endpoint_auth_method: 'none' })).body.error).toBe('invalid_redirect_uri');
    // javascript: and data: are refused by the MCP SDK's schema before the service's own check (docs/oauth.md, "Errors").
    for (const uri of ['javascript:alert(1)', 'data:text/html,hi']) {
      const res = await register({ redirect_uris: [uri], token_endpoint_auth_method: 'none' });
      expect(res.status, uri).toBe(400);
      expect(res.body.error, uri).toBe('invalid_client_metadata');
    }
  });

  // Only the code flow with refresh tokens: other grants are refused at registration.
  it('refuses unsupported grant or response types with invalid_client_metadata', async () => {
    expect((await register({ redirect_uris: [CALLBACK], grant_types: ['client_credentials'] })).body.error).toBe('invalid_client_metadata');
    expect((await register({ redirect_uris: [CALLBACK], response_types: ['token'] })).body.error).toBe('invalid_client_metadata');
  });

  // Every client is public: a request for a secret gets none, so no secret is ever stored or sent.
  it('answers a confidential registration as a public client, without a secret', async () => {
    const res = await register({ redirect_uris: [CALLBACK, 'cursor://anysphere.cursor-mcp/oauth/callback'], client_name: 'Confidential?', token_endpoint_auth_method: 'client_secret_post' });
    expect(res.status).toBe(201);
    expect(res.body).toMatchObject({ client_id: expect.stringMatching(/^mcl_/), token_endpoint_auth_method: 'none', redirect_uris: [CALLBACK, 'cursor://anysphere.cursor-mcp/oauth/callback'] });
    expect(res.body).not.toHaveProperty('client_secret');
    expect(res.body).not.toHaveProperty('client_secret_expires_at');
  });
});

describe('authorization request', () => {
  let person: Person;
  let clientId: string;
  beforeAll(async () => {
    person = await signUp();
    clientId = await registerClient([CALLBACK]);
  });

  // When the client or its redirect URI is wrong, nothing may go to that URI: an error page, never a redirect.
  it('shows an error page, and never redirects, for an unregistered redirect URI or an unknown client', async () => {
    const { challenge } = pkce();
    const cases = [
      { clientId, redirectUri: 'https://evil.example/callback', challenge, state: 's' },
      { clientId, redirectUri: 'http://127.0.0.1:47123/elsewhere', challenge, state: 's' },
      { clientId, redirectUri: 'http://localhost:47123/callback', challenge, state: 's' },
      { clientId: 'mcl_doesnotexist', redirectUri: CALLBACK, challenge, state: 's' },
      { clientId: 'not-a-client', redirectUri: CALLBACK, challenge, state: 's' },
    ];
    for (const r of cases) {
      // Signed in, and signed out: the client is checked before any sign-in redirect.
      for (const browser of [person.browser, new CookieBrowser(base)]) {
        const res = await browser.fetch(authorizePath(r));
        expect(res.status, JSON.stringify(r)).toBe(400);
        expect(res.headers.get('location'), JSON.stringify(r)).toBeNull();
        expect(res.headers.get('content-type')).toMatch(/text\/html/);
        expect(await res.text()).toContain('This app cannot connect');
      }
    }
  });

  // RFC 8252 section 7.3: a loopback redirect URI matches on any port, since native apps get one from the system.
  it('accepts a loopback redirect URI on another port than registered', async () => {
    const loopbackClient = await registerClient(['http://127.0.0.1:1111/callback']);
    const { challenge } = pkce();
    const res = await person.browser.fetch(authorizePath({ clientId: loopbackClient, redirectUri: 'http://127.0.0.1:2222/callback', challenge }));
    expect(res.status).toBe(200);
    const page = await res.text();
    expect(page).toContain('127.0.0.1 (this computer)');
    expect(hiddenFields(page).redirect_uri).toBe('http://127.0.0.1:2222/callback');
    // The form may be redirected to the app (form-action), the page cannot be framed, and is never cached.
    const csp = res.headers.get('content-security-policy')!;
    expect(csp).toContain("form-action 'self' http://127.0.0.1:2222");
    expect(csp).toContain("frame-ancestors 'none'");
    expect(res.headers.get('cache-control')).toBe('no-store');
  });

  // Signed out: sign in first, then back to this very request.
  it('sends a signed-out person to sign in, and back to the request afterwards', async () => {
    const { challenge } = pkce();
    const path = authorizePath({ clientId, redirectUri: CALLBACK, challenge, state: 'xyz' });
    const res = await new CookieBrowser(base).fetch(path);
    expect(res.status).toBe(303);
    const to = new URL(res.headers.get('location')!, base);
    expect(to.pathname).toBe('/login');
    expect(new URL(to.searchParams.get('next')!, base).searchParams.get('code_challenge')).toBe(challenge);
  });

  // RFC 8707: this server issues tokens only for its MCP server; the error goes back to the app, with iss (RFC 9207).
  it('sends invalid_target back to the app for another resource', async () => {
    const { challenge } = pkce();
    const res = await person.browser.fetch(authorizePath({ clientId, redirectUri: CALLBACK, challenge, state: 'st', resource: 'https://other.example/mcp' }));
    const to = location(res);
    expect(`${to.origin}${to.pathname}`).toBe(CALLBACK);
    expect(to.searchParams.get('error')).toBe('invalid_target');
    expect(to.searchParams.get('state')).toBe('st');
    expect(to.searchParams.get('iss')).toBe(base);
    expect(to.searchParams.get('code')).toBeNull();
  });

  // PKCE is required, S256 only: the error goes back to the app.
  it('sends invalid_request back to the app without PKCE S256', async () => {
    const res = await person.browser.fetch(`/authorize?${new URLSearchParams({ client_id: clientId, redirect_uri: CALLBACK, response_type: 'code', state: 'p' }).toString()}`);
    expect(location(res).searchParams.get('error')).toBe('invalid_request');
    const plain = await person.browser.fetch(
      `/authorize?${new URLSearchParams({ client_id: clientId, redirect_uri: CALLBACK, response_type: 'code', code_challenge: 'a'.repeat(43), code_challenge_method: 'plain' }).toString()}`,
    );
    expect(location(plain).searchParams.get('error')).toBe('invalid_request');
  });

  // The person says no: access_denied with state and iss, and no code is kept.
  it('denies with access_denied, state and iss', async () => {
    const { challenge } = pkce();
    const { fields, csrf } = await consentPage(person, { clientId, redirectUri: CALLBACK, challenge, state: 'deny-state' });
    const before = await codesOf(clientId);
    const to = location(await person.browser.post('/authorize', { ...fields, _csrf: csrf, decision: 'deny' }));
    expect(`${to.origin}${to.pathname}`).toBe(CALLBACK);
    expect(to.searchParams.get('error')).toBe('access_denied');
    expect(to.searchParams.get('state')).toBe('deny-state');
    expect(to.searchParams.get('iss')).toBe(base);
    expect(to.searchParams.get('code')).toBeNull();
    expect(await codesOf(clientId)).toBe(before);
  });

  // The consent form is CSRF-protected: a page on another site cannot make a signed-in person allow an app.
  it('refuses a consent posted without its CSRF token, or from another site, and issues no code', async () => {
    const { challenge } = pkce();
    const { fields, csrf } = await consentPage(person, { clientId, redirectUri: CALLBACK, challenge, state: 'csrf' });
    const before = await codesOf(clientId);
    const noToken = await person.browser.post('/authorize', { ...fields, decision: 'allow' });
    expect(noToken.status).toBe(403);
    expect(noToken.headers.get('location')).toBeNull();
    const otherSite = await person.browser.fetch('/authorize', {
      method: 'POST',
      headers: { origin: 'https://evil.example', 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({ ...fields, _csrf: csrf, decision: 'allow' }),
    });
    expect(otherSite.status).toBe(403);
    expect(await codesOf(clientId)).toBe(before);
  });
});

const codesOf = async (clientId: string) => (await h.orm.em.fork().execute<{ n: number }[]>('select count(*)::int as n from oauth_codes where client_id = ?', [clientId]))[0]!.n;

describe('token endpoint', () => {
  let person: Person;
  beforeAll(async () => {
    person = await signUp();
  });

  // PKCE: only the app that started the request can redeem its code.
  it('refuses a wrong code_verifier with invalid_grant', async () => {
    const a = await authorize(person, await registerClient());
    expect(oauthError(await exchange(a, { code_verifier: pkce().verifier }))).toBe('invalid_grant');
    expect(oauthError(await exchange(a, { code_verifier: 'short' }))).toBe('invalid_grant');
  });

  // RFC 6749 section 4.1.2: a code used twice may have been stolen, so what it made is revoked.
  it('refuses a reused code with invalid_grant and revokes the connection the first exchange made', async () => {
    const app = await connectApp(person);
    expect(await mcpStatus(app.access)).toBe(200);
    expect(oauthError(await exchange(app))).toBe('invalid_grant');
    expect(await mcpStatus(app.access)).toBe(401);
    const row = await connection(app.connectionId);
    expect(row.revoked_at).not.toBeNull();
    expect(row.key_revoked_at).not.toBeNull();
    expect(oauthError(await refresh(app.clientId, app.refresh))).toBe('invalid_grant');
  });

  // The code is bound to the redirect URI of its request.
  it('refuses a redirect_uri that differs from the authorization request with invalid_grant', async () => {
    const a = await authorize(person, await registerClient([CALLBACK, 'http://127.0.0.1:47123/other']));
    expect(oauthError(await exchange(a, { redirect_uri: 'http://127.0.0.1:47123/other' }))).toBe('invalid_grant');
  });

  // The code is bound to its client.
  it('refuses a code presented by another client with invalid_grant', async () => {
    const a = await authorize(person, await registerClient());
    expect(oauthError(await exchange(a, { client_id: await registerClient() }))).toBe('invalid_grant');
  });

  // RFC 8707: the code is bound to the resource it was authorized for.
  it('refuses a resource that differs from the code with invalid_target', async () => {
    const a = await authorize(person, await registerClient());
    expect(oauthError(await exchange(a, { resource: 'https://other.example/mcp' }))).toBe('invalid_target');
  });

  // The audience of an access token is the MCP server only: REST and the connector link refuse it.
  it('accepts an access token only at the MCP server', async () => {
    const app = await connectApp(person);
    expect(await mcpStatus(app.access)).toBe(200);
    const auth = { authorization: `Bearer ${app.access}` };
    expect((await fetch(`${base}/api/v1/balance`, { headers: auth })).status).toBe(401);
    const chat = await fetch(`${base}/api/v1/chat/completions`, {
      method: 'POST',
      headers: { ...auth, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'mas/echo', messages: [{ role: 'user', content: 'hi' }] }),
    });
    expect(chat.status).toBe(401);
    expect((await mcpDoor(undefined, `/api/v1/mcp/${app.access}`)).status).toBe(401);
  });

  // An access token lives an hour; past its expiry it is refused like an unknown one.
  it('refuses an expired access token at the MCP server', async () => {
    const app = await connectApp(person);
    await h.orm.em.fork().execute(`update oauth_tokens set expires_at = now() - interval '1 minute' where connection_id = ? and kind = 'access'`, [app.connectionId]);
    const door = await mcpDoor(`Bearer ${app.access}`);
    expect(door.status).toBe(401);
    expect(door.challenge).toContain('error="invalid_token"');
    // The app refreshes, as a client does on that 401, and goes on.
    const renewed = await refresh(app.clientId, app.refresh);
    expect(renewed.status, JSON.stringify(renewed.body)).toBe(200);
    expect(await mcpStatus(renewed.body.access_token as string)).toBe(200);
  });

  // The lifetime the person chose ends the connection: its tokens and its refresh token are refused.
  it('refuses the tokens of an expired connection, and its refresh with invalid_grant', async () => {
    const app = await connectApp(person, { lifetime: '7' });
    expect(await mcpStatus(app.access)).toBe(200);
    await h.orm.em.fork().execute(`update app_connections set expires_at = now() - interval '1 minute' where id = ?`, [app.connectionId]);
    expect(await mcpStatus(app.access)).toBe(401);
    expect(oauthError(await refresh(app.clientId, app.refresh))).toBe('invalid_grant');
  });

  // OAuth 2.1 section 4.3.1: refresh tokens rotate; presenting a used one means it leaked, and the whole connection ends.
  it('rotates refresh tokens, and a reused refresh token revokes the whole connection', async () => {
    const app = await connectApp(person);
    const rotated = await refresh(app.clientId, app.refresh);
    expect(rotated.status, JSON.stringify(rotated.body)).toBe(200);
    const next = rotated.body as { access_token: string; refresh_token: string };
    expect(next.access_token).not.toBe(app.access);
    expect(next.refresh_token).not.toBe(app.refresh);

    const client = await mcpClient(next.access_token);
    const { tools } = await client.listTools();
    expect(tools.map((t) => t.name)).toContain('get_balance');
    expect((await callTool(client, 'get_balance')).structuredContent).toMatchObject({ object: 'balance' });
    await client.close();

    expect(oauthError(await refresh(app.clientId, app.refresh))).toBe('invalid_grant');
    expect(await mcpStatus(next.access_token)).toBe(401);
    const row = await connection(app.connectionId);
    expect(row.revoked_at).not.toBeNull();
    expect(row.key_revoked_at).not.toBeNull();
    expect(oauthError(await refresh(app.clientId, next.refresh_token))).toBe('invalid_grant');
  });

  // A refresh token is bound to its client.
  it("refuses another client's refresh token with invalid_grant, and leaves the connection alone", async () => {
    const app = await connectApp(person);
    expect(oauthError(await refresh(await registerClient(), app.refresh))).toBe('invalid_grant');
    expect(await mcpStatus(app.access)).toBe(200);
  });

  // RFC 7009: revoking a token ends the connection and its key; an unknown token is not an error.
  it('revokes through /revoke: the access token is refused afterwards', async () => {
    const app = await connectApp(person);
    expect(await mcpStatus(app.access)).toBe(200);
    const revoke = (t: string) => fetch(`${base}/revoke`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: new URLSearchParams({ token: t, client_id: app.clientId }) });
    expect((await revoke(app.access)).status).toBe(200);
    expect(await mcpStatus(app.access)).toBe(401);
    expect((await connection(app.connectionId)).key_revoked_at).not.toBeNull();
    expect(oauthError(await refresh(app.clientId, app.refresh))).toBe('invalid_grant');
    expect((await revoke(`mas_at_${randomBytes(32).toString('base64url')}`)).status).toBe(200);
  });
});

describe('what a connected app can do', () => {
  // An app's token acts for its own account only: another account's job is as unknown as a missing one.
  it("cannot read another account's generation", async () => {
    const a = await signUp();
    const app = await connectApp(a);
    const b = await makeAccount(h.orm, { coins: '100' });
    const bKey = await makeKey(h.orm, b.id);
    const { generation: bJob } = await createCaller(createContext(h.deps, { kind: 'bearer', token: bKey.key })).generations.create({
      model: 'mas/image-demo',
      prompt: 'the secret prompt of account B',
      settings: { size: 128 },
    });
    const client = await mcpClient(app.access);
    const theirs = await callTool(client, 'get_generation', { id: bJob.id });
    const unknown = await callTool(client, 'get_generation', { id: 'gen_doesnotexist000000000' });
    expect(toolError(theirs)).toMatchObject({ status: 404, error: { type: 'not_found_error', code: 'generation_not_found' } });
    expect(toolError(theirs).error.code).toBe(toolError(unknown).error.code);
    // B's own key does see it: the refusal is about the account, not a missing job.
    expect((await createCaller(createContext(h.deps, { kind: 'bearer', token: bKey.key })).generations.get({ id: bJob.id })).id).toBe(bJob.id);
    expect(toolText(theirs)).not.toContain('secret prompt');
    expect(theirs.structuredContent).toBeUndefined();
    await client.close();
  });

  // The person's spend cap is enforced where coins are reserved: past it, the call is refused and nothing is charged.
  it('refuses a call past the spend cap with spend_cap_reached (402), and charges nothing', async () => {
    const person = await signUp();
    await fund(person, '100');
    const app = await connectApp(person, { capCoins: '0.000002' });
    expect((await connection(app.connectionId)).spend_cap_micro).toBe('2');
    const before = await balanceOf(person.accountId);
    const client = await mcpClient(app.access);
    const refused = toolError(await callTool(client, 'chat', { model: 'mas/echo', prompt: 'Hello there', max_tokens: 30 }));
    expect(refused.error.code).toBe('spend_cap_reached');
    expect(refused.status).toBe(402);
    expect(await balanceOf(person.accountId)).toBe(before);
    await client.close();
  });

  // What an app reserves names its connection, which is how its cap is counted and how the ledger shows it.
  it('names the app connection in the holds of its calls, within a larger cap', async () => {
    const person = await signUp();
    await fund(person, '100');
    const app = await connectApp(person, { capCoins: '50' });
    const client = await mcpClient(app.access);
    const chat = await callTool(client, 'chat', { model: 'mas/echo', prompt: 'Hello there', max_tokens: 30 });
    expect(chat.isError, toolText(chat)).toBeFalsy();
    const id = (chat.structuredContent as { id: string }).id;
    await chargesWritten();
    const holds = await h.orm.em.fork().execute<{ status: string; account_id: string; reference: string }[]>(
      `select status, account_id, reference from holds where metadata->>'app_connection_id' = ?`,
      [app.connectionId],
    );
    expect(holds).toEqual([{ status: 'settled', account_id: person.accountId, reference: id }]);
    // The charge, priced by hand from config/models.yaml: mas/echo is 100 and 400 coins per
    // million tokens in-app, 50 and 200 micro-coins a token at API_PRICE_PERCENT 50. The input
    // is 9 tokens (3 for the message, 1 for the role, 2 for "Hello there", 3 to prime the
    // reply); the echo's answer is longer than 30 tokens, so it is cut at max_tokens.
    expect(chat.structuredContent).toMatchObject({ finish_reason: 'length', usage: { prompt_tokens: 9, completion_tokens: 30 } });
    const charge = (9n * 50_000_000n + 30n * 200_000_000n + 999_999n) / 1_000_000n;
    expect(charge).toBe(6_450n);
    expect(await balanceOf(person.accountId)).toBe(String(100_000_000n - charge));
    await client.close();
  });

  // An app's key is its connection's: it does not use up one of the 10 API keys, and is not listed with them.
  it('does not count app keys toward the 10-key limit, nor list them', async () => {
    const person = await signUp();
    const app = await connectApp(person);
    expect((await connection(app.connectionId)).key_kind).toBe('app');
    const me = createCaller(createContext(h.deps, { kind: 'session', token: person.session }));
    for (let i = 0; i < 10; i++) await me.account.keys.create({ name: `key ${i}` });
    expect(await refusal(me.account.keys.create({ name: 'one too many' }))).toMatchObject({ code: 'limit_reached' });
    const listed = (await me.account.keys.list()).data;
    expect(listed).toHaveLength(10);
    expect(listed.every((k) => !k.name.startsWith('App:'))).toBe(true);
    expect((await me.account.apps.list()).data.map((c) => c.id)).toContain(app.connectionId);
    expect(await mcpStatus(app.access)).toBe(200);
  });
});

describe('client ID metadata documents', () => {
  let docs: Server;
  let docsBase: string;
  const served = new Map<string, unknown>();
  beforeAll(async () => {
    docs = http.createServer((req, res) => {
      const doc = served.get(req.url ?? '');
      if (doc === undefined) return void res.writeHead(404).end();
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(doc));
    });
    await new Promise<void>((r) => docs.listen(0, '127.0.0.1', () => r()));
    docsBase = `http://127.0.0.1:${(docs.address() as { port: number }).port}`;
  });
  afterAll(async () => {
    docs.closeAllConnections();
    await new Promise((r) => docs.close(r));
  });

  /** Serves a document at a new path; its URL. */
  function serveDocument(make: (url: string) => unknown): string {
    const path = `/clients/${randomBytes(6).toString('hex')}.json`;
    served.set(path, make(`${docsBase}${path}`));
    return `${docsBase}${path}`;
  }

  // The MCP authorization spec of 2025-11-25: the client_id is a URL whose JSON describes the app; no registration needed.
  it('shows the document\'s client name and redirect host, and completes the flow with the URL as client_id', async () => {
    const person = await signUp();
    const clientId = serveDocument((url) => ({ client_id: url, client_name: 'Documented App', redirect_uris: [CALLBACK], token_endpoint_auth_method: 'none' }));
    const { page } = await consentPage(person, { clientId, redirectUri: CALLBACK, challenge: pkce().challenge });
    expect(page).toContain('Documented App');
    expect(page).toContain('127.0.0.1 (this computer)');
    expect(page).toContain(clientId);
    const app = await connectApp(person, { clientId });
    expect(await mcpStatus(app.access)).toBe(200);
  });

  // A document must name itself: another URL's client_id would let one app pose as another.
  it('refuses a document whose client_id is not its own URL, with an error page', async () => {
    const person = await signUp();
    const clientId = serveDocument(() => ({ client_id: 'https://claude.ai/oauth/client.json', client_name: 'Claude', redirect_uris: [CALLBACK] }));
    const res = await person.browser.fetch(authorizePath({ clientId, redirectUri: CALLBACK, challenge: pkce().challenge }));
    expect(res.status).toBe(400);
    expect(res.headers.get('location')).toBeNull();
    expect(await res.text()).toContain('its client_id is not its own URL');
  });
});

// Reconnecting an app (docs/oauth.md, "Reconnecting an app"): the new approval replaces the
// connection in place. One row, both dates; the old sign-in's tokens stop; the key, its spend
// (which the cap counts) and its jobs carry over; the new cap and lifetime apply.
describe('reconnecting an app', () => {
  const rows = async (accountId: string) =>
    h.orm.em
      .fork()
      .execute<{ id: string; client_id: string; created_at: Date; reconnected_at: Date | null; revoked_at: Date | null; spend_cap_micro: string | null; key_id: string }[]>(
        'select id, client_id, created_at, reconnected_at, revoked_at, spend_cap_micro::text, key_id from app_connections where account_id = ? order by created_at',
        [accountId],
      );

  it('the same client twice: one connection with both dates; the old tokens stop, the spend carries over under the new cap', async () => {
    const person = await signUp();
    await fund(person, '100');
    const clientId = await registerClient([CALLBACK], 'Reconnecting client');
    const first = await connectApp(person, { clientId, capCoins: '50' });
    const client = await mcpClient(first.access);
    const chat = await callTool(client, 'chat', { model: 'mas/echo', prompt: 'hello', max_tokens: 8 });
    expect(chat.isError, toolText(chat)).toBeFalsy();
    await client.close();
    await chargesWritten();
    const [before] = await rows(person.accountId);
    const spent = (await listAppConnections(h.orm.em.fork(), person.accountId)).data[0]!.spent_coins;

    // The consent page says what allowing again does, with the spend so far; a new app's does not.
    const { page: consent } = await consentPage(person, { clientId, redirectUri: CALLBACK, challenge: pkce().challenge, state: 's' });
    expect(consent.replace(/<[^>]+>/g, '')).toContain(`Allowing again replaces that connection: its earlier sign-in stops, and the spend cap you choose here also counts the ${escape(moneyText(spent))} it has spent so far.`);
    const { page: fresh } = await consentPage(person, { clientId: await registerClient([CALLBACK], 'Never connected'), redirectUri: CALLBACK, challenge: pkce().challenge, state: 's' });
    expect(fresh).not.toContain('replaces that connection');

    const second = await connectApp(person, { clientId, capCoins: '20', lifetime: '7' });
    expect(second.connectionId).toBe(first.connectionId);
    const after = await rows(person.accountId);
    expect(after).toHaveLength(1);
    expect(after[0]).toMatchObject({ id: first.connectionId, key_id: before!.key_id, revoked_at: null, spend_cap_micro: '20000000' });
    expect(new Date(after[0]!.created_at).getTime()).toBe(new Date(before!.created_at).getTime());
    expect(after[0]!.reconnected_at).not.toBeNull();

    // The earlier sign-in is replaced: its access token is refused, its refresh token unknown (and its use revokes nothing).
    expect(await mcpStatus(first.access)).toBe(401);
    expect(oauthError(await refresh(clientId, first.refresh))).toBe('invalid_grant');
    expect(await mcpStatus(second.access)).toBe(200);
    expect((await connection(first.connectionId)).revoked_at).toBeNull();

    // The account's list and page: one row, its first date and the re-connection, the spend so far.
    const [listed] = (await listAppConnections(h.orm.em.fork(), person.accountId)).data;
    expect(listed).toMatchObject({ id: first.connectionId, spent_coins: spent, spend_cap_coins: 20, reconnected_at: expect.any(String) });
    expect(spent).toBeGreaterThan(0);
    const page = await (await person.browser.fetch('/account/apps')).text();
    expect(page.match(/Reconnecting client/g)).toHaveLength(2); // the name, and the revoke button's label
    expect(page).toContain(', re-connected ');
  });

  it('a client registered again under the same name and redirect host replaces it too; another app does not', async () => {
    const person = await signUp();
    const first = await connectApp(person, { clientId: await registerClient([CALLBACK], 'Registers every run') });
    const again = await connectApp(person, { clientId: await registerClient([CALLBACK], 'Registers every run') });
    expect(again.connectionId).toBe(first.connectionId);
    expect(await mcpStatus(first.access)).toBe(401);
    expect(await mcpStatus(again.access)).toBe(200);
    const other = await connectApp(person, { clientId: await registerClient([CALLBACK], 'Another app') });
    expect(other.connectionId).not.toBe(first.connectionId);
    const all = await rows(person.accountId);
    expect(all.map((r) => [r.id, r.client_id])).toEqual([
      [first.connectionId, again.clientId],
      [other.connectionId, other.clientId],
    ]);
    expect(await mcpStatus(again.access)).toBe(200);
  });

  /** A live connection row of this account, made as before the reconnecting rule (duplicates were possible then). */
  async function insertConnection(accountId: string, clientId: string, name: string, host: string, createdAt: Date, expiresAt: Date | null = null): Promise<string> {
    const keyId = `key_${randomBytes(10).toString('hex')}`;
    const id = `app_${randomBytes(10).toString('hex')}`;
    await h.orm.em.fork().execute(`insert into api_keys (id, account_id, name, prefix, key_hash, kind) values (?, ?, 'App', 'mas_x', ?, 'app')`, [keyId, accountId, randomBytes(32).toString('hex')]);
    await h.orm.em.fork().execute(
      `insert into app_connections (id, account_id, key_id, client_id, client_name, redirect_host, created_at, expires_at) values (?, ?, ?, ?, ?, ?, ?, ?)`,
      [id, accountId, keyId, clientId, name, host, createdAt, expiresAt],
    );
    return id;
  }

  it('two live duplicates from before: the newer is kept and replaced, the older revoked with its key', async () => {
    const person = await signUp();
    const clientId = await registerClient([CALLBACK], 'Duplicated app');
    const older = await insertConnection(person.accountId, clientId, 'Duplicated app', '127.0.0.1', new Date(Date.now() - 2 * 86_400_000));
    const newer = await insertConnection(person.accountId, clientId, 'Duplicated app', '127.0.0.1', new Date(Date.now() - 86_400_000));
    const app = await connectApp(person, { clientId });
    expect(app.connectionId).toBe(newer);
    expect(await connection(older)).toMatchObject({ revoked_at: expect.anything(), key_revoked_at: expect.anything() });
    expect(await connection(newer)).toMatchObject({ revoked_at: null, key_revoked_at: null });
    expect((await rows(person.accountId)).filter((r) => r.revoked_at === null).map((r) => r.id)).toEqual([newer]);
  });

  it(`at ${MAX_ACTIVE_APP_CONNECTIONS} connected apps, one of them can still be connected again; a new one cannot`, async () => {
    const person = await signUp();
    const clientId = await registerClient([CALLBACK], 'Full house app');
    const app = await connectApp(person, { clientId });
    for (let i = 1; i < MAX_ACTIVE_APP_CONNECTIONS; i++) await insertConnection(person.accountId, `https://other${i}.example/c`, `Other ${i}`, `other${i}.example`, new Date());
    const again = await connectApp(person, { clientId, capCoins: '3' });
    expect(again.connectionId).toBe(app.connectionId);
    expect(await mcpStatus(again.access)).toBe(200);
    // A new app is refused on the consent page, as before.
    const { challenge } = pkce();
    const { fields, csrf } = await consentPage(person, { clientId: await registerClient([CALLBACK], 'One too many'), redirectUri: CALLBACK, challenge, state: 's' });
    const refused = await person.browser.post('/authorize', { ...fields, _csrf: csrf, decision: 'allow', spend_cap_coins: '', lifetime: '30' });
    expect(refused.headers.get('location')).toBeNull();
    expect(await refused.text()).toContain('Disconnect one first');
  });

  it('an expired connection is not revived either: connecting again makes a new one and leaves it as it was', async () => {
    const person = await signUp();
    const clientId = await registerClient([CALLBACK], 'Expired app');
    const expired = await insertConnection(person.accountId, clientId, 'Expired app', '127.0.0.1', new Date(Date.now() - 86_400_000), new Date(Date.now() - 1000));
    const app = await connectApp(person, { clientId });
    expect(app.connectionId).not.toBe(expired);
    expect((await rows(person.accountId)).map((r) => [r.id, r.reconnected_at, r.revoked_at])).toEqual([
      [expired, null, null],
      [app.connectionId, null, null],
    ]);
  });

  it('a revoked connection is not revived: connecting again makes a new one', async () => {
    const person = await signUp();
    const clientId = await registerClient([CALLBACK], 'Revoked then back');
    const first = await connectApp(person, { clientId });
    await revokeAppConnection(h.orm.em.fork(), person.accountId, first.connectionId);
    const second = await connectApp(person, { clientId });
    expect(second.connectionId).not.toBe(first.connectionId);
    expect(await mcpStatus(first.access)).toBe(401);
    expect(await mcpStatus(second.access)).toBe(200);
  });
});
