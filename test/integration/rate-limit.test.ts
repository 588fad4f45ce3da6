import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { MikroORM } from '@mikro-orm/postgresql';
import { makeAccount, makeKey, openTestOrm } from '../support/db.ts';
import { bearer, startTestApi } from '../support/http.ts';

let orm: MikroORM;
let api: Awaited<ReturnType<typeof startTestApi>>;
beforeAll(async () => {
  orm = await openTestOrm();
  api = await startTestApi(orm, { perMinute: 120 });
});
afterAll(async () => {
  await api.close();
  await orm.close();
});

describe('rate limit: 120 requests per minute per key', () => {
  it('answers the 121st with 429, Retry-After and the x-ratelimit headers, which every answer carries', async () => {
    const account = await makeAccount(orm, { coins: '1' });
    const { key } = await makeKey(orm, account.id);
    const other = (await makeKey(orm, account.id)).key;
    const statuses: number[] = [];
    let last: Response | undefined;
    for (let i = 1; i <= 121; i++) {
      // Alternate endpoints: the limit counts every endpoint of the key.
      last = await fetch(`${api.url}/api/v1/${i % 2 ? 'balance' : 'models'}`, { headers: bearer(key) });
      statuses.push(last.status);
      if (i === 1) {
        expect(last.headers.get('x-ratelimit-limit-requests')).toBe('120');
        expect(last.headers.get('x-ratelimit-remaining-requests')).toBe('119');
        expect(last.headers.get('x-ratelimit-reset-requests')).toMatch(/^\d+s$/);
      }
      if (i < 121) await last.arrayBuffer();
    }
    expect(statuses.slice(0, 120).every((s) => s === 200)).toBe(true);
    expect(statuses[120]).toBe(429);
    const body = (await last!.json()) as { error: unknown };
    expect(body.error).toMatchObject({ type: 'rate_limit_error', code: 'rate_limit_exceeded' });
    expect(Number(last!.headers.get('retry-after'))).toBeGreaterThan(0);
    expect(last!.headers.get('x-ratelimit-remaining-requests')).toBe('0');
    expect(last!.headers.get('x-ratelimit-reset-requests')).toMatch(/^\d+s$/);

    // Another key of the same account has its own count.
    expect((await fetch(`${api.url}/api/v1/balance`, { headers: bearer(other) })).status).toBe(200);
  });

  it('answers a revoked key 401, not 429, on the chat path that remembers recent keys', async () => {
    const account = await makeAccount(orm, { coins: '1' });
    const k = await makeKey(orm, account.id);
    const chat = () =>
      fetch(`${api.url}/api/v1/chat/completions`, {
        method: 'POST',
        headers: { ...bearer(k.key), 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'nobody/nothing', messages: [{ role: 'user', content: 'hi' }] }),
      });
    // The first chat call puts the key in the cache (its model is unknown: 404, no matter).
    expect((await chat()).status).toBe(404);
    for (let i = 2; i <= 120; i++) await (await fetch(`${api.url}/api/v1/balance`, { headers: bearer(k.key) })).arrayBuffer();
    expect((await chat()).status).toBe(429);
    await orm.em.fork().execute('update api_keys set revoked_at = now() where id = ?', [k.id]);
    expect((await chat()).status).toBe(401);
  });
});
