import { createHash, randomBytes } from 'node:crypto';
import http from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { issueAccessToken, makeAppConnection } from '../support/apps.ts';
import { csrfOf, hiddenFields, signUpPerson, type Person } from '../support/cookie-browser.ts';
import { makeAccount } from '../support/db.ts';
import { startJobHarness, type JobHarness } from '../support/jobs.ts';

/**
 * Loopback OAuth (docs/oauth.md) over plain HTTP: with the default PUBLIC_BASE_URL
 * (http://localhost:<port>), the MCP server at localhost, 127.0.0.1 and [::1] is one resource;
 * with an explicit PUBLIC_BASE_URL, only it is.
 */
const CALLBACK = 'http://127.0.0.1:47123/callback';

function pkce() {
  const verifier = randomBytes(48).toString('base64url');
  return { verifier, challenge: createHash('sha256').update(verifier).digest('base64url') };
}

async function registerClient(base: string): Promise<string> {
  const res = await fetch(`${base}/register`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ redirect_uris: [CALLBACK], client_name: 'Loopback client', token_endpoint_auth_method: 'none' }) });
  expect(res.status).toBe(201);
  return ((await res.json()) as { client_id: string }).client_id;
}

/** The consent page for `resource`, at the person's browser: Allow, and where the browser is sent. */
async function authorize(person: Person, clientId: string, resource: string) {
  const { verifier, challenge } = pkce();
  const q = new URLSearchParams({ client_id: clientId, redirect_uri: CALLBACK, response_type: 'code', code_challenge: challenge, code_challenge_method: 'S256', state: 's', resource });
  const res = await person.browser.fetch(`/authorize?${q.toString()}`);
  if (res.status === 303) return { verifier, to: new URL(res.headers.get('location')!) };
  const page = await res.text();
  expect(res.status, page.slice(0, 500)).toBe(200);
  const allowed = await person.browser.post('/authorize', { ...hiddenFields(page), _csrf: csrfOf(page)!, decision: 'allow', spend_cap_coins: '', lifetime: '30' });
  expect(allowed.status).toBe(303);
  return { verifier, to: new URL(allowed.headers.get('location')!) };
}

async function token(base: string, fields: Record<string, string>) {
  const res = await fetch(`${base}/token`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: new URLSearchParams(fields) });
  return { status: res.status, body: (await res.json()) as Record<string, string> };
}

/** tools/list at `url` with a Bearer token: the status. */
async function mcpStatus(url: string, accessToken?: string) {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...(accessToken ? { authorization: `Bearer ${accessToken}` } : {}) },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 't', version: '1' } } }),
  });
  await res.text();
  return { status: res.status, challenge: res.headers.get('www-authenticate') };
}

const metadataAt = async (url: string) => (await (await fetch(url)).json()) as Record<string, unknown>;

describe('with the default PUBLIC_BASE_URL', () => {
  let h: JobHarness;
  let port: string;
  let at: (host: string) => string;
  beforeAll(async () => {
    h = await startJobHarness({ publicBaseUrlIsDefault: true, worker: false });
    port = new URL(h.base).port;
    at = (host) => `http://${host}:${port}`;
  });
  afterAll(() => h.close());

  it('is the default loopback address, with the aliases on', () => {
    expect(h.deps.config.oauth.resource).toBe(`${at('localhost')}/api/v1/mcp`);
    expect(h.deps.config.oauth.loopbackAliases).toBe(true);
  });

  it('names the resource at the loopback host the client used; the authorization server stays one', async () => {
    const prm = await metadataAt(`${at('127.0.0.1')}/.well-known/oauth-protected-resource/api/v1/mcp`);
    expect(prm).toMatchObject({ resource: `${at('127.0.0.1')}/api/v1/mcp`, authorization_servers: [at('localhost')] });
    expect(await metadataAt(`${at('localhost')}/.well-known/oauth-protected-resource`)).toMatchObject({ resource: `${at('localhost')}/api/v1/mcp` });
    // fetch sets Host itself: the [::1] form (this machine may have no IPv6) is sent by hand.
    const viaIpv6Host = await new Promise<string>((resolve, reject) => {
      http.get({ host: '127.0.0.1', port, path: '/.well-known/oauth-protected-resource/api/v1/mcp', headers: { host: `[::1]:${port}` } }, (res) => {
        let body = '';
        res.on('data', (d: Buffer) => (body += d.toString()));
        res.on('end', () => resolve(body));
      }).on('error', reject);
    });
    expect((JSON.parse(viaIpv6Host) as { resource: string }).resource).toBe(`http://[::1]:${port}/api/v1/mcp`);
    // The authorization server's metadata, wherever it is read, has one issuer, and its endpoints are at it.
    for (const host of ['127.0.0.1', 'localhost']) {
      expect(await metadataAt(`${at(host)}/.well-known/oauth-authorization-server`)).toMatchObject({ issuer: at('localhost'), token_endpoint: `${at('localhost')}/token` });
    }
    // The MCP door's challenge points to the metadata at the same host.
    expect((await mcpStatus(`${at('127.0.0.1')}/api/v1/mcp`)).challenge).toContain(`resource_metadata="${at('127.0.0.1')}/.well-known/oauth-protected-resource/api/v1/mcp"`);
    expect((await mcpStatus(`${at('localhost')}/api/v1/mcp`)).challenge).toContain(`resource_metadata="${at('localhost')}/.well-known/oauth-protected-resource/api/v1/mcp"`);
  });

  it('issues a token for resource=127.0.0.1 that works at every loopback form; refresh takes another form', async () => {
    const person = await signUpPerson(at('localhost'), h.orm, 'loopback');
    const clientId = await registerClient(at('localhost'));
    const resource = `${at('127.0.0.1')}/api/v1/mcp`;
    const { verifier, to } = await authorize(person, clientId, resource);
    expect(to.searchParams.get('error')).toBeNull();
    expect(to.searchParams.get('iss')).toBe(at('localhost'));
    const exchanged = await token(at('localhost'), { grant_type: 'authorization_code', code: to.searchParams.get('code')!, code_verifier: verifier, client_id: clientId, redirect_uri: CALLBACK, resource });
    expect(exchanged.status, JSON.stringify(exchanged.body)).toBe(200);
    for (const host of ['127.0.0.1', 'localhost']) expect((await mcpStatus(`${at(host)}/api/v1/mcp`, exchanged.body.access_token)).status, host).toBe(200);
    const refreshed = await token(at('localhost'), { grant_type: 'refresh_token', refresh_token: exchanged.body.refresh_token!, client_id: clientId, resource: `http://[::1]:${port}/api/v1/mcp` });
    expect(refreshed.status, JSON.stringify(refreshed.body)).toBe(200);
    expect((await mcpStatus(`${at('127.0.0.1')}/api/v1/mcp`, refreshed.body.access_token)).status).toBe(200);
    // The token is bound to the one resource: stored once, as the configured URL.
    const rows = await h.orm.em.fork().execute<{ resource: string }[]>('select distinct t.resource from oauth_tokens t join oauth_codes c on c.client_id = t.client_id where t.client_id = ?', [clientId]);
    expect(rows.map((r) => r.resource)).toEqual([`${at('localhost')}/api/v1/mcp`]);
  });

  it('still refuses a resource at another host or port', async () => {
    const person = await signUpPerson(at('localhost'), h.orm, 'loopback-other');
    const clientId = await registerClient(at('localhost'));
    for (const resource of ['http://127.0.0.1:1/api/v1/mcp', `http://example.com:${port}/api/v1/mcp`]) {
      const { to } = await authorize(person, clientId, resource);
      expect(to.searchParams.get('error'), resource).toBe('invalid_target');
    }
    const { verifier, to } = await authorize(person, clientId, `${at('127.0.0.1')}/api/v1/mcp`);
    const refused = await token(at('localhost'), { grant_type: 'authorization_code', code: to.searchParams.get('code')!, code_verifier: verifier, client_id: clientId, redirect_uri: CALLBACK, resource: 'http://127.0.0.1:1/api/v1/mcp' });
    expect(refused.status).toBe(400);
    expect(refused.body.error).toBe('invalid_target');
  });
});

describe('with an explicit PUBLIC_BASE_URL', () => {
  let h: JobHarness;
  let port: string;
  beforeAll(async () => {
    // PUBLIC_BASE_URL is set to http://127.0.0.1:<port>: only it is the resource.
    h = await startJobHarness({ publicBaseUrlIsServed: true, worker: false });
    port = new URL(h.base).port;
  });
  afterAll(() => h.close());

  it('names only PUBLIC_BASE_URL, whatever host the client used', async () => {
    expect(h.deps.config.oauth.loopbackAliases).toBe(false);
    const prm = await metadataAt(`http://localhost:${port}/.well-known/oauth-protected-resource/api/v1/mcp`);
    expect(prm.resource).toBe(`${h.base}/api/v1/mcp`);
    expect((await mcpStatus(`http://localhost:${port}/api/v1/mcp`)).challenge).toContain(`resource_metadata="${h.base}/.well-known/oauth-protected-resource/api/v1/mcp"`);
  });

  it('refuses the loopback variant of the resource, at the consent page, the token endpoint and the MCP door', async () => {
    const person = await signUpPerson(h.base, h.orm, 'explicit');
    const clientId = await registerClient(h.base);
    const variant = `http://localhost:${port}/api/v1/mcp`;
    expect((await authorize(person, clientId, variant)).to.searchParams.get('error')).toBe('invalid_target');
    const { verifier, to } = await authorize(person, clientId, `${h.base}/api/v1/mcp`);
    const refused = await token(h.base, { grant_type: 'authorization_code', code: to.searchParams.get('code')!, code_verifier: verifier, client_id: clientId, redirect_uri: CALLBACK, resource: variant });
    expect(refused.status).toBe(400);
    expect(refused.body.error).toBe('invalid_target');
    // A token for the variant (as another server would bind it) is refused at the door; one for PUBLIC_BASE_URL's is not.
    const account = await makeAccount(h.orm, { coins: '1' });
    const app = await makeAppConnection(h.orm, account.id);
    expect((await mcpStatus(`${h.base}/api/v1/mcp`, await issueAccessToken(h.orm, app.id, variant))).status).toBe(401);
    expect((await mcpStatus(`${h.base}/api/v1/mcp`, await issueAccessToken(h.orm, app.id, `${h.base}/api/v1/mcp`))).status).toBe(200);
  });
});
