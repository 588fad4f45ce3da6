import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { MikroORM } from '@mikro-orm/postgresql';
import { openOrm } from '../../core/orm.ts';
import { parseCoins } from '../../core/money/coins.ts';
import { reserve, settle } from '../../core/money/holds.ts';
import { makeAccount, makeKey, openTestOrm } from '../support/db.ts';
import { bearer, getJson, startTestApi } from '../support/http.ts';

let orm: MikroORM;
let api: Awaited<ReturnType<typeof startTestApi>>;
let key: string;
let accountId: string;
beforeAll(async () => {
  orm = await openTestOrm();
  api = await startTestApi(orm);
  const account = await makeAccount(orm, { coins: '20', subscriptionCoins: '5' });
  accountId = account.id;
  key = (await makeKey(orm, account.id)).key;
});
afterAll(async () => {
  await api.close();
  await orm.close();
});

function expectErrorShape(body: any, type: string, code: string) {
  expect(Object.keys(body)).toEqual(['error']);
  expect(Object.keys(body.error)).toEqual(['message', 'type', 'param', 'code']);
  expect(body.error).toMatchObject({ type, code });
  expect(typeof body.error.message).toBe('string');
}

describe('REST errors', () => {
  it('answers malformed JSON with 400 in the error shape', async () => {
    const res = await getJson(`${api.url}/api/v1/balance`, {
      method: 'GET',
      headers: { ...bearer(key), 'content-type': 'application/json' },
      body: undefined,
    });
    expect(res.status).toBe(200);
    const bad = await fetch(`${api.url}/api/v1/wallet/history`, {
      method: 'POST',
      headers: { ...bearer(key), 'content-type': 'application/json' },
      body: '{"model": ',
    });
    expect(bad.status).toBe(400);
    expectErrorShape(await bad.json(), 'invalid_request_error', 'invalid_json');
  });

  it('answers an unknown API route with 404 and a wrong method with 405, never HTML (other paths are the account pages)', async () => {
    for (const path of ['/api/v1/nope', '/api/v2/balance', '/api', '/api/']) {
      const res = await fetch(`${api.url}${path}`, { headers: bearer(key) });
      expect(res.status).toBe(404);
      expect(res.headers.get('content-type')).toMatch(/application\/json/);
      expect(res.headers.get('set-cookie')).toBeNull();
      expectErrorShape(await res.json(), 'not_found_error', 'unknown_route');
    }
    // A browser (it asks for HTML) gets the pages' own 404 page outside the API's paths.
    const page = await fetch(`${api.url}/nope`, { headers: { accept: 'text/html,application/xhtml+xml,*/*;q=0.8' } });
    expect(page.status).toBe(404);
    expect(page.headers.get('content-type')).toMatch(/text\/html/);
    const wrong = await fetch(`${api.url}/api/v1/balance`, { method: 'DELETE', headers: bearer(key) });
    expect(wrong.status).toBe(405);
    expect(wrong.headers.get('allow')).toBe('GET, HEAD');
    expectErrorShape(await wrong.json(), 'invalid_request_error', 'method_not_allowed');
  });

  it('answers an oversized body with 413', async () => {
    const res = await fetch(`${api.url}/api/v1/wallet/history`, {
      method: 'POST',
      headers: { ...bearer(key), 'content-type': 'application/json' },
      body: JSON.stringify({ pad: 'x'.repeat(5 * 1024 * 1024) }),
    });
    expect(res.status).toBe(413);
    expectErrorShape(await res.json(), 'invalid_request_error', 'request_too_large');
  });

  it('answers a JSON route sent a body of another type with 415, naming both types', async () => {
    const json = JSON.stringify({ model: 'mas/echo', messages: [{ role: 'user', content: 'hi' }] });
    for (const path of ['/chat/completions', '/generations', '/generations/gen_nope/cancel']) {
      for (const type of ['text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x']) {
        const res = await getJson(`${api.url}/api/v1${path}`, { method: 'POST', headers: { ...bearer(key), 'content-type': type }, body: json });
        expect(res.status, `${path} ${type}`).toBe(415);
        expectErrorShape(res.body, 'invalid_request_error', 'unsupported_media_type');
        expect(res.body.error.message).toContain(`'${type.split(';')[0]}'`);
        expect(res.body.error.message).toContain('application/json');
      }
      // A body with no Content-Type at all.
      const untyped = await getJson(`${api.url}/api/v1${path}`, { method: 'POST', headers: bearer(key), body: new TextEncoder().encode(json) });
      expect(untyped.status).toBe(415);
      expectErrorShape(untyped.body, 'invalid_request_error', 'unsupported_media_type');
      expect(untyped.body.error.message).toMatch(/no Content-Type.*application\/json/);
    }
    // JSON, with a charset or as a +json type, still reaches the use case (which names the missing field).
    for (const type of ['application/json; charset=utf-8', 'application/merge-patch+json']) {
      const res = await getJson(`${api.url}/api/v1/chat/completions`, { method: 'POST', headers: { ...bearer(key), 'content-type': type }, body: '{}' });
      expect(res.status).toBe(400);
      expect(res.body.error.message).toMatch(/model/);
    }
    // No body and no Content-Type on a route that needs no body: fine (here, an unknown job).
    const cancel = await getJson(`${api.url}/api/v1/generations/gen_nope/cancel`, { method: 'POST', headers: bearer(key) });
    expect(cancel.status).toBe(404);
    const empty = await getJson(`${api.url}/api/v1/generations/gen_nope/cancel`, { method: 'POST', headers: { ...bearer(key), 'content-type': 'text/plain' }, body: '' });
    expect(empty.status).toBe(404);
  });

  it('answers text holding the NUL character (which PostgreSQL cannot store) with a 4xx, never 500, and charges nothing', async () => {
    // Found by schemathesis: a job's prompt with U+0000 was a 500 from the database.
    const before = (await getJson(`${api.url}/api/v1/balance`, { headers: bearer(key) })).body;
    const cases: [string, string, unknown][] = [
      ['GET', '/generations/gen_%00', undefined],
      ['POST', '/generations/gen_%00/cancel', undefined],
      ['GET', '/files/file_%00', undefined],
    ];
    for (const [method, path, body] of cases) {
      const res = await getJson(`${api.url}/api/v1${path}`, { method, headers: { ...bearer(key), ...(body ? { 'content-type': 'application/json' } : {}) }, ...(body ? { body: JSON.stringify(body) } : {}) });
      // The ids' own checks answer first (404); what reaches the database is a 400 (test/unit/nul-refusal.test.ts).
      expect(res.status, `${method} ${path}: ${JSON.stringify(res.body)}`).toBeGreaterThanOrEqual(400);
      expect(res.status, `${method} ${path}: ${JSON.stringify(res.body)}`).toBeLessThan(500);
    }
    expect((await getJson(`${api.url}/api/v1/balance`, { headers: bearer(key) })).body).toEqual(before);
  });

  it('names the field of an invalid query parameter', async () => {
    const res = await getJson(`${api.url}/api/v1/wallet/history?limit=500`, { headers: bearer(key) });
    expect(res.status).toBe(400);
    expectErrorShape(res.body, 'invalid_request_error', 'invalid_value');
    expect(res.body.error.message).toMatch(/'limit'/);
  });

  it('sends a request id on every response, and takes a sane incoming one', async () => {
    const a = await fetch(`${api.url}/api/v1/balance`, { headers: bearer(key) });
    expect(a.headers.get('x-request-id')).toMatch(/^req_/);
    const b = await fetch(`${api.url}/api/v1/balance`, { headers: { ...bearer(key), 'x-request-id': 'trace-42' } });
    expect(b.headers.get('x-request-id')).toBe('trace-42');
    const c = await fetch(`${api.url}/api/v1/balance`, { headers: { ...bearer(key), 'x-request-id': 'bad id $(rm)' } });
    expect(c.headers.get('x-request-id')).toMatch(/^req_/);
  });

  it('sends no ETag: answers are not cached, and hashing every body costs', async () => {
    const res = await fetch(`${api.url}/api/v1/models`, { headers: bearer(key) });
    expect(res.status).toBe(200);
    expect(res.headers.get('etag')).toBeNull();
  });
});

describe('a database that cannot be reached', () => {
  it('answers 503 in the error shape, on API routes and on /readyz', async () => {
    const down = await openOrm({ url: 'postgres://nobody:nothing@127.0.0.1:1/none' });
    const downApi = await startTestApi(down);
    try {
      const res = await getJson(`${downApi.url}/api/v1/balance`, { headers: bearer(key) });
      expect(res.status).toBe(503);
      expectErrorShape(res.body, 'server_error', 'database_unreachable');
      // The chat path runs its statements on its own pool: the same answer.
      const chat = await getJson(`${downApi.url}/api/v1/chat/completions`, {
        method: 'POST',
        headers: { ...bearer(key), 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'mas/echo', messages: [{ role: 'user', content: 'hi' }] }),
      });
      expect(chat.status).toBe(503);
      expectErrorShape(chat.body, 'server_error', 'database_unreachable');
      const ready = await getJson(`${downApi.url}/readyz`);
      expect(ready.status).toBe(503);
      expectErrorShape(ready.body, 'server_error', 'database_unreachable');
      expect((await getJson(`${downApi.url}/healthz`)).status).toBe(200);
    } finally {
      await downApi.close();
      await down.close();
    }
  });
});

describe('wallet history', () => {
  it('pages the history newest first, one API usage row per request', async () => {
    const em = orm.em.fork();
    const { holdId } = await reserve(em, { accountId, amount: parseCoins('3'), reference: 'req_history', expiresAt: new Date(Date.now() + 60_000) });
    await settle(em, holdId, parseCoins('1.25'));

    const all: any[] = [];
    let cursor: string | undefined;
    for (let page = 0; page < 10; page++) {
      const res = await getJson(`${api.url}/api/v1/wallet/history?limit=2${cursor ? `&starting_after=${cursor}` : ''}`, { headers: bearer(key) });
      expect(res.status).toBe(200);
      expect(res.body.object).toBe('list');
      all.push(...res.body.data);
      if (!res.body.has_more) break;
      cursor = res.body.data.at(-1).id;
    }
    const ids = all.map((e) => Number(e.id.slice(3)));
    expect(ids).toEqual([...ids].sort((x, y) => y - x));
    // The reservation and the release of the unused part are not rows of their own.
    expect(all.map((e) => e.type)).toEqual(['api_usage', 'subscription_grant', 'topup']);
    expect(all[0]).toEqual({
      id: expect.stringMatching(/^le_\d+$/),
      object: 'wallet_entry',
      type: 'api_usage',
      description: 'API usage',
      amount_coins: -1.25,
      balance_after_coins: 23.75,
      reference: 'req_history',
      app_connection_id: null,
      created_at: expect.any(String),
      details: 'API usage',
      model: null,
      input_tokens: null,
      output_tokens: null,
      generation_id: null,
      key_id: null,
      user_id: null,
    });
    expect(all[1]).toMatchObject({ amount_coins: 5, balance_after_coins: 25 });
    expect(all[2]).toMatchObject({ amount_coins: 20, balance_after_coins: 20 });
    const balance = await getJson(`${api.url}/api/v1/balance`, { headers: bearer(key) });
    expect(balance.body).toMatchObject({ coins: 23.75, subscription_coins: 3.75, purchased_coins: 20, held_coins: 0 });
  });
});
