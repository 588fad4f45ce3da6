import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import type { Router } from 'express';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRestApp } from '../../adapters/rest/app.ts';
import { png, seededRandom } from '../../adapters/providers/media/formats.ts';
import { makeAccount, makeKey, silentLogger, testDeps } from '../support/db.ts';
import { bearer } from '../support/http.ts';
import { startJobHarness, type JobHarness } from '../support/jobs.ts';

/**
 * The OpenAPI document stays current (every route of the REST API is in it, and nothing
 * else), and real responses match it.
 */
let h: JobHarness;
let doc: any;
beforeAll(async () => {
  h = await startJobHarness();
  doc = await (await fetch(`${h.base}/api/v1/openapi.json`)).json();
});
afterAll(() => h.close());

/** Every (method, path) the express app serves under /api/v1, in OpenAPI's path syntax. */
function servedRoutes(): string[] {
  const app = createRestApp({ deps: testDeps(h.orm), logger: silentLogger, publicBaseUrl: 'http://localhost' }) as unknown as { router: Router };
  const out = new Set<string>();
  const walk = (stack: any[]) => {
    for (const layer of stack) {
      if (layer.route) {
        for (const method of Object.keys(layer.route.methods).filter((m) => m !== '_all')) {
          out.add(`${method} ${String(layer.route.path).replace(/\/\*(\w+)/g, '/{$1}').replace(/:(\w+)/g, '{$1}')}`);
        }
      } else if (layer.handle?.stack) walk(layer.handle.stack);
    }
  };
  walk(app.router.stack);
  for (const ops of ['get /healthz', 'get /readyz', 'get /metrics']) out.delete(ops);
  return [...out].sort();
}

describe('OpenAPI document', () => {
  it('is OpenAPI 3.1 with the bearer scheme and the error shape', () => {
    expect(doc.openapi).toBe('3.1.0');
    expect(doc.components.securitySchemes.bearerAuth).toMatchObject({ type: 'http', scheme: 'bearer' });
    expect(doc.components.schemas.Error.properties.error.required.sort()).toEqual(['code', 'message', 'type']);
    expect(doc.paths['/openapi.json'].get.security).toEqual([]);
  });

  it('lists exactly the routes the REST API serves', () => {
    const documented = Object.entries(doc.paths).flatMap(([p, ops]) => Object.keys(ops as object).map((m) => `${m} ${p}`)).sort();
    expect(documented).toEqual(servedRoutes());
  });

  it('describes the real responses of the API', async () => {
    const ajv = new Ajv2020({ strict: false, allErrors: true });
    addFormats.default(ajv);
    ajv.addSchema({ $id: 'openapi', components: doc.components });
    const check = async (method: string, path: string, template: string, init: RequestInit = {}): Promise<any> => {
      const res = await fetch(`${h.base}/api/v1${path}`, { method: method.toUpperCase(), ...init });
      const body = await res.json();
      const op = doc.paths[template]?.[method];
      expect(op, `${method} ${template} is documented`).toBeDefined();
      const response = op.responses[String(res.status)];
      expect(response, `${method} ${template} documents status ${res.status}: ${JSON.stringify(body)}`).toBeDefined();
      const schema = JSON.parse(JSON.stringify(response.content['application/json'].schema).replaceAll('"#/components/', '"openapi#/components/'));
      const valid = ajv.validate(schema, body);
      expect(valid, `${method} ${path} ${res.status}: ${ajv.errorsText()}`).toBe(true);
      return body;
    };

    const account = await makeAccount(h.orm, { coins: '50' });
    const { key } = await makeKey(h.orm, account.id);
    const auth = { headers: bearer(key) };
    const post = (body: unknown, extra: Record<string, string> = {}) => ({ headers: { ...bearer(key), 'content-type': 'application/json', ...extra }, body: JSON.stringify(body) });

    await check('get', '/balance', '/balance', auth);
    await check('get', '/balance', '/balance');
    await check('get', '/wallet/history', '/wallet/history', auth);
    await check('get', '/wallet/history?limit=0', '/wallet/history', auth);
    await check('get', '/models', '/models', auth);
    await check('get', '/models/mas/echo', '/models/{id}', auth);
    await check('get', '/models/nobody/none', '/models/{id}', auth);
    await check('post', '/chat/completions', '/chat/completions', post({ model: 'mas/echo', messages: [{ role: 'user', content: 'hi' }], max_tokens: 16 }));
    await check('post', '/chat/completions', '/chat/completions', post({ model: 'mas/echo', messages: [] }));
    const job = await check('post', '/generations', '/generations', post({ model: 'mas/image-demo', prompt: 'x', settings: { size: 128 } }, { prefer: 'wait=20' }));
    await check('get', `/generations/${job.id}`, '/generations/{id}', auth);
    await check('post', `/generations/${job.id}/cancel`, '/generations/{id}/cancel', auth);
    const slow = await check('post', '/generations', '/generations', post({ model: 'mas/image-demo', prompt: 'x', settings: { delay_ms: 10_000 } }));
    await check('post', `/generations/${slow.id}/cancel`, '/generations/{id}/cancel', auth);
    await check('post', '/generations', '/generations', post({ model: 'mas/video-demo', prompt: 'x', settings: { duration: 10, resolution: 128 } }));
    const form = new FormData();
    form.append('file', new Blob([png(8, 8, seededRandom(new Uint8Array([1])))]), 'a.png');
    const file = await check('post', '/files', '/files', { method: 'POST', headers: bearer(key), body: form });
    await check('get', `/files/${file.id}`, '/files/{id}', auth);
    await check('get', '/webhook_secret', '/webhook_secret', auth);
  });

  it('serves a readable reference page with its assets from the service itself', async () => {
    const page = await fetch(`${h.base}/api/v1/docs`);
    expect(page.headers.get('content-type')).toMatch(/text\/html/);
    const html = await page.text();
    expect(html).not.toMatch(/https?:\/\/(?!localhost)/);
    for (const asset of ['docs/assets/swagger-ui.css', 'docs/assets/swagger-ui-bundle.js']) {
      expect(html).toContain(asset);
      expect((await fetch(`${h.base}/api/v1/${asset}`)).status).toBe(200);
    }
  });
});
