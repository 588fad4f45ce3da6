import { Writable } from 'node:stream';
import OpenAI from 'openai';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type { MikroORM } from '@mikro-orm/postgresql';
import { useTestCatalog } from '../support/catalog.ts';
import { makeAccount, makeKey, openTestOrm, testDeps } from '../support/db.ts';
import { bearer, createTestApp, getJson, serve } from '../support/http.ts';

/**
 * What clients trip over (issue 32): errors carry OpenAI's `param`, which the SDK's
 * `error.param` shows; the request log carries the code of a refused request; and any unknown
 * path answers a JSON 404 that names the base URL, `/v1/…` included.
 */
const PUBLIC = 'http://api.example.test:8080';
const BASE_HINT = `This API's base URL is ${PUBLIC}/api/v1`;
let orm: MikroORM;
let served: Awaited<ReturnType<typeof serve>>;
const lines: Record<string, any>[] = [];

beforeAll(async () => {
  orm = await openTestOrm();
  const logger = pino({ level: 'info' }, new Writable({ write: (chunk: Buffer, _enc, done) => void (lines.push(JSON.parse(chunk.toString())), done()) }));
  // No upstream is ever called: every request here is refused before the provider.
  const providers = await useTestCatalog(orm, 'http://127.0.0.1:9');
  served = await serve(createTestApp({ deps: testDeps(orm, { providers }), logger, publicBaseUrl: PUBLIC }));
});
afterAll(async () => {
  await served.close();
  await orm.close();
});

async function customer(coins = '10') {
  const account = await makeAccount(orm, { coins });
  const { key } = await makeKey(orm, account.id);
  return { key, client: new OpenAI({ apiKey: key, baseURL: `${served.base}/api/v1`, maxRetries: 0 }) };
}
const chat = (key: string, body: unknown, requestId?: string) =>
  getJson(`${served.base}/api/v1/chat/completions`, {
    method: 'POST',
    headers: { ...bearer(key), 'content-type': 'application/json', ...(requestId ? { 'x-request-id': requestId } : {}) },
    body: JSON.stringify(body),
  });

describe('param, in the error body and in the SDK', () => {
  it('names a bad field as its dotted path; the SDK’s error.param has it', async () => {
    const { client } = await customer();
    const err = await client.chat.completions.create({ model: 'test/ok', messages: [{ role: 'user', content: 7 as never }] }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    const e = err as InstanceType<typeof OpenAI.BadRequestError>;
    expect(e.param).toBe('messages.0.content');
    expect(e.code).toBe('invalid_value');
    expect(e.type).toBe('invalid_request_error');

    const range = await client.chat.completions.create({ model: 'test/ok', messages: [{ role: 'user', content: 'hi' }], temperature: 3 }).catch((x: unknown) => x);
    expect((range as InstanceType<typeof OpenAI.BadRequestError>).param).toBe('temperature');
  });

  it('is null where no field is concerned, and always present, in OpenAI’s key order', async () => {
    const { key } = await customer('0');
    const broke = await chat(key, { model: 'test/ok', messages: [{ role: 'user', content: 'hi' }] });
    expect(broke.status).toBe(402);
    expect(Object.keys(broke.body.error)).toEqual(['message', 'type', 'param', 'code']);
    expect(broke.body.error).toMatchObject({ param: null, code: 'insufficient_balance' });
    const noKey = await getJson(`${served.base}/api/v1/balance`);
    expect(noKey.body.error).toMatchObject({ param: null, code: 'invalid_api_key' });
  });
});

describe('the request log', () => {
  const lineOf = (id: string) => lines.find((l) => l.request_id === id && l.req?.id === id);

  it('carries the error code of a 4xx and of a 5xx, and no secret', async () => {
    const { key } = await customer();
    await chat(key, { model: 'test/ok', messages: [{ role: 'user', content: 'hi' }], temperature: 3 }, 'pitfall-400');
    const { key: poorKey } = await customer('0');
    await chat(poorKey, { model: 'test/ok', messages: [{ role: 'user', content: 'hi' }] }, 'pitfall-402');
    await getJson(`${served.base}/v1/chat/completions`, { method: 'POST', headers: { 'x-request-id': 'pitfall-404' } });
    // The provider's address refuses connections: 502, nothing charged.
    const failed = await chat(key, { model: 'test/ok', messages: [{ role: 'user', content: 'hi' }] }, 'pitfall-502');
    expect(failed.status).toBe(502);
    await vi.waitFor(() => {
      expect(lineOf('pitfall-400')).toMatchObject({ level: 30, res: { statusCode: 400 }, code: 'invalid_value' });
      expect(lineOf('pitfall-402')).toMatchObject({ res: { statusCode: 402 }, code: 'insufficient_balance' });
      expect(lineOf('pitfall-404')).toMatchObject({ res: { statusCode: 404 }, code: 'unknown_route' });
      expect(lineOf('pitfall-502')).toMatchObject({ level: 50, res: { statusCode: 502 }, code: 'upstream_error' });
    });
    const ok = await getJson(`${served.base}/api/v1/balance`, { headers: { ...bearer(key), 'x-request-id': 'pitfall-200' } });
    expect(ok.status).toBe(200);
    await vi.waitFor(() => expect(lineOf('pitfall-200')).toBeDefined());
    expect(lineOf('pitfall-200')).not.toHaveProperty('code');
    const text = JSON.stringify(lines);
    expect(text).not.toContain(key);
    expect(text).not.toContain(poorKey);
  });
});

describe('unknown paths: a JSON 404 that names the base URL', () => {
  it('answers /v1/…, /nope and /api/v1/nope in the error shape, for any method', async () => {
    for (const [method, path] of [
      ['POST', '/v1/chat/completions'],
      ['GET', '/v1/models'],
      ['GET', '/v1'],
      ['GET', '/nope'],
      ['GET', '/api/v1/nope'],
      ['POST', '/api/v2/chat/completions'],
      ['GET', '/chat/completions'],
      ['POST', '/webhooks/paypal'],
    ] as const) {
      const res = await getJson(`${served.base}${path}`, { method, headers: { 'content-type': 'application/json' }, ...(method === 'POST' ? { body: '{}' } : {}) });
      expect(res.status, path).toBe(404);
      expect(res.headers.get('content-type'), path).toMatch(/^application\/json/);
      expect(res.headers.get('set-cookie'), path).toBeNull();
      expect(res.body, path).toEqual({ error: { message: expect.stringContaining(BASE_HINT), type: 'not_found_error', param: null, code: 'unknown_route' } });
      expect(res.body.error.message, path).toContain(`${method} ${path}`);
    }
  });

  it('the openai SDK pointed at …/v1 gets a NotFoundError whose message has the hint, not HTML', async () => {
    const { key } = await customer();
    const wrong = new OpenAI({ apiKey: key, baseURL: `${served.base}/v1`, maxRetries: 0 });
    const err = await wrong.chat.completions.create({ model: 'test/ok', messages: [{ role: 'user', content: 'hi' }] }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.NotFoundError);
    const e = err as InstanceType<typeof OpenAI.NotFoundError>;
    expect(e.message).toContain(BASE_HINT);
    expect(e.message).not.toMatch(/<html|<!doctype/i);
    expect(e.code).toBe('unknown_route');
    const models = await wrong.models.list().catch((x: unknown) => x);
    expect(models).toBeInstanceOf(OpenAI.NotFoundError);
    expect((models as Error).message).toContain(BASE_HINT);
  });

  it('a browser still gets the account pages’ HTML 404 outside the API’s paths, but never under /v1 or /api', async () => {
    const html = { accept: 'text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8' };
    const page = await fetch(`${served.base}/nope`, { headers: html });
    expect(page.status).toBe(404);
    expect(page.headers.get('content-type')).toMatch(/text\/html/);
    expect(await page.text()).toContain('There is no page at /nope');
    for (const path of ['/v1/chat/completions', '/api/v1/nope']) {
      const res = await fetch(`${served.base}${path}`, { headers: html });
      expect(res.status, path).toBe(404);
      expect(res.headers.get('content-type'), path).toMatch(/^application\/json/);
    }
    // The pages themselves still answer whatever the client accepts.
    expect((await fetch(`${served.base}/login`, { redirect: 'manual' })).status).toBe(200);
  });
});
