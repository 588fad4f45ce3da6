import type { MikroORM } from '@mikro-orm/postgresql';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeAccount, makeKey, openTestOrm, testDeps } from '../support/db.ts';
import { createTestApp, serve } from '../support/http.ts';

/**
 * The entry points added for OAuth and the admin API, tried as a hostile client would: malformed,
 * oversized and wrongly typed bodies, long single-token strings, repeated parameters, another
 * account's ids. Every answer is a 4xx (never a 500), and the server keeps answering.
 */
let orm: MikroORM;
let served: Awaited<ReturnType<typeof serve>>;
let base: string;
beforeAll(async () => {
  orm = await openTestOrm();
  served = await serve(createTestApp({ deps: testDeps(orm) }));
  base = served.base;
});
afterAll(async () => {
  await served.close();
  await orm.close();
});

const LONG = 'x'.repeat(200_000);
const form = (fields: Record<string, string>) => ({ method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: new URLSearchParams(fields).toString() });
const json = (body: string) => ({ method: 'POST', headers: { 'content-type': 'application/json' }, body });

describe('hostile input to the OAuth and admin entry points', () => {
  it('answers each with a 4xx, never a 500, and keeps serving', async () => {
    const account = await makeAccount(orm, { coins: '1' });
    const key = await makeKey(orm, account.id);
    const cases: [string, RequestInit?][] = [
      // The token endpoint.
      ['/token', form({ grant_type: 'authorization_code', client_id: 'mcl_nope', code: 'x', code_verifier: 'y' })],
      ['/token', form({ grant_type: 'authorization_code', client_id: `https://127.0.0.1/${LONG.slice(0, 1900)}`, code: 'x', code_verifier: 'y' })],
      ['/token', form({ grant_type: 'refresh_token', client_id: 'mcl_nope', refresh_token: LONG.slice(0, 50_000) })],
      ['/token', form({ grant_type: 'password', client_id: 'mcl_nope' })],
      ['/token', json('{"grant_type":')],
      ['/token', form({ grant_type: 'x'.repeat(150_000) })],
      // Registration.
      ['/register', json('{')],
      ['/register', json('[]')],
      ['/register', json(JSON.stringify({ redirect_uris: 'http://127.0.0.1/cb' }))],
      ['/register', json(JSON.stringify({ redirect_uris: Array.from({ length: 50 }, (_, i) => `http://127.0.0.1/${i}`) }))],
      ['/register', json(JSON.stringify({ redirect_uris: [`https://a.example/${LONG.slice(0, 5000)}`], client_name: LONG.slice(0, 5000) }))],
      ['/register', json(JSON.stringify({ redirect_uris: ['https://a.example/cb'], grant_types: ['implicit'] }))],
      ['/register', json(JSON.stringify({ redirect_uris: ['https://a.example/cb'], client_name: { a: 1 } }))],
      // Revocation.
      ['/revoke', form({ token: LONG.slice(0, 50_000), client_id: 'mcl_nope' })],
      ['/revoke', form({})],
      // The authorization endpoint (a page).
      ['/authorize'],
      ['/authorize?client_id=a&client_id=b'],
      [`/authorize?client_id=${LONG.slice(0, 5000)}`],
      ['/authorize?client_id=https%3A%2F%2F10.0.0.1%2Fclient.json&redirect_uri=x'],
      ['/authorize', form({ client_id: 'mcl_nope', decision: 'allow' })],
      // The MCP door with odd tokens.
      ['/api/v1/mcp', { method: 'POST', headers: { authorization: `Bearer mas_at_${LONG.slice(0, 5000)}`, 'content-type': 'application/json' }, body: '{}' }],
      // The admin API.
      ['/admin/graphql', json('{"query":"{ whoami { id } }"}')],
      ['/admin/graphql', { ...json('{"query":"{ whoami { id } }"}'), headers: { authorization: `Bearer ${key.key}`, 'content-type': 'application/json' } }],
      ['/admin/graphql', { ...json(`{"query":"${LONG}"}`), headers: { authorization: 'Bearer mas_admin_x', 'content-type': 'application/json' } }],
      // The admin pages.
      ['/admin/login', form({ email: LONG.slice(0, 10_000), password: 'x' })],
      ['/admin/login', form({ email: LONG.slice(0, 40_000), password: 'x' })],
      ['/authorize', form({ client_id: LONG.slice(0, 40_000) })],
      ['/admin/login/link?token=' + LONG.slice(0, 5000)],
      ['/admin/accounts/acct_nope'],
    ];
    for (const [path, init] of cases) {
      const res = await fetch(`${base}${path}`, { redirect: 'manual', ...init });
      const what = `${init?.method ?? 'GET'} ${path.slice(0, 80)}`;
      expect(res.status, what).toBeLessThan(500);
      // The machine endpoints refuse with a 4xx; a page may answer its form (200) or an error page.
      if ((init?.method === 'POST' && (path === '/admin/login' || path === '/authorize')) || !/^\/(authorize|admin\/login|admin\/accounts)/.test(path)) expect(res.status, what).toBeGreaterThanOrEqual(400);
      await res.arrayBuffer();
    }
    expect((await fetch(`${base}/.well-known/oauth-authorization-server`)).status).toBe(200);
  });
});
