import type { MikroORM } from '@mikro-orm/postgresql';
import { Router } from 'express';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHttpApp } from '../../adapters/http/app.ts';
import { restAdapter } from '../../adapters/rest/rest.ts';
import { openTestOrm, silentLogger, testDeps } from '../support/db.ts';
import { getJson, serve } from '../support/http.ts';

/** The shared HTTP pieces, and adapters mounted side by side, each with its own error mapping. */
let orm: MikroORM;
let served: Awaited<ReturnType<typeof serve>>;
let base: string;
beforeAll(async () => {
  orm = await openTestOrm();
  const deps = testDeps(orm);
  // A second surface, as MCP or the pages will be: its own routes and its own idea of an error.
  const other = Router();
  other.get('/hello', (_req, res) => void res.json({ hello: 'world' }));
  other.use((_req, res) => void res.status(404).type('text/plain').send('not here'));
  const app = createHttpApp({
    deps,
    logger: silentLogger,
    publicBaseUrl: 'http://localhost',
    adapters: [{ path: '/api/v1/other', router: other }, restAdapter(deps, { publicBaseUrl: 'http://localhost', logger: silentLogger })],
  });
  served = await serve(app);
  base = served.base;
});
afterAll(async () => {
  await served.close();
  await orm.close();
});

describe('the HTTP app', () => {
  it('mounts each adapter at its path; each answers its own unknown routes', async () => {
    expect(await getJson(`${base}/api/v1/other/hello`)).toMatchObject({ status: 200, body: { hello: 'world' } });
    const otherMiss = await fetch(`${base}/api/v1/other/nope`);
    expect(otherMiss.status).toBe(404);
    expect(await otherMiss.text()).toBe('not here');
    const restMiss = await getJson(`${base}/api/v1/nope`);
    expect(restMiss).toMatchObject({ status: 404, body: { error: { type: 'not_found_error', code: 'unknown_route' } } });
    const outside = await getJson(`${base}/nowhere`);
    expect(outside).toMatchObject({ status: 404, body: { error: { type: 'not_found_error', code: 'unknown_route' } } });
  });

  it('sends the security headers on every surface: no inline script, no framing, no referrer to other sites, no sniffing', async () => {
    for (const path of ['/healthz', '/api/v1/balance', '/api/v1/other/hello', '/api/v1/docs']) {
      const res = await fetch(`${base}${path}`);
      const csp = res.headers.get('content-security-policy') ?? '';
      expect(csp, path).toContain("frame-ancestors 'none'");
      expect(csp, path).toMatch(/script-src 'self'(;|$)/);
      expect(res.headers.get('x-content-type-options'), path).toBe('nosniff');
      expect(res.headers.get('referrer-policy'), path).toBe('same-origin');
      expect(res.headers.get('x-powered-by'), path).toBeNull();
    }
  });

  it('the API reference page loads its script from a file, which the policy allows', async () => {
    const page = await (await fetch(`${base}/api/v1/docs`)).text();
    expect(page).not.toMatch(/<script>[^<]/);
    expect(page).toContain('<script src="docs/init.js"></script>');
    const init = await fetch(`${base}/api/v1/docs/init.js`);
    expect(init.headers.get('content-type')).toMatch(/javascript/);
    expect(await init.text()).toContain('SwaggerUIBundle');
  });
});

describe('behind a proxy (TRUST_PROXY)', () => {
  it('takes the address the proxy saw, not one the client wrote into X-Forwarded-For', async () => {
    const echo = Router();
    echo.get('/ip', (req, res) => void res.json({ ip: req.ip }));
    const app = createHttpApp({ deps: testDeps(orm), logger: silentLogger, publicBaseUrl: 'http://localhost', trustProxy: 1, adapters: [{ path: '/echo', router: echo }] });
    const behind = await serve(app);
    try {
      // nginx appends the address it saw ($proxy_add_x_forwarded_for) to whatever the client sent.
      const ip = async (xff: string) => ((await (await fetch(`${behind.base}/echo/ip`, { headers: { 'x-forwarded-for': xff } })).json()) as { ip: string }).ip;
      expect(await ip('203.0.113.7')).toBe('203.0.113.7');
      expect(await ip('6.6.6.6, 203.0.113.7')).toBe('203.0.113.7');
    } finally {
      await behind.close();
    }
  });
});
