import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type { MikroORM } from '@mikro-orm/postgresql';
import { createContext } from '../../core/context.ts';
import { createCaller } from '../../core/router.ts';
import { generateKeySecret } from '../../core/keys/key-secret.ts';
import { makeAccount, makeKey, openTestOrm, testDeps } from '../support/db.ts';
import { bearer, getJson, startTestApi } from '../support/http.ts';

let orm: MikroORM;
let api: Awaited<ReturnType<typeof startTestApi>>;
beforeAll(async () => {
  orm = await openTestOrm();
  api = await startTestApi(orm);
});
afterAll(async () => {
  await api.close();
  await orm.close();
});

const operator = () => createCaller(createContext(testDeps(orm), { kind: 'internal' }));

describe('API keys', () => {
  it('create, use, revoke, refused on the very next request', async () => {
    const account = await makeAccount(orm, { coins: '5' });
    const created = await operator().keys.create({ account: account.email, name: 'ci' });
    expect(created.key).toMatch(/^mas_[0-9A-Za-z]{38}$/);
    expect(created.key.startsWith(created.prefix)).toBe(true);

    const ok = await getJson(`${api.url}/api/v1/balance`, { headers: bearer(created.key) });
    expect(ok.status).toBe(200);
    expect(ok.body).toEqual({ object: 'balance', coins: 5, subscription_coins: 0, purchased_coins: 5, held_coins: 0, paid_account: true });

    // Only the hash is stored.
    const [stored] = await orm.em.fork().execute<{ key_hash: string }[]>('select key_hash from api_keys where id = ?', [created.id]);
    expect(stored!.key_hash).not.toContain(created.key.slice(4, 20));
    expect(stored!.key_hash).toMatch(/^[0-9a-f]{64}$/);

    await operator().keys.revoke({ id: created.id });
    const refused = await getJson(`${api.url}/api/v1/balance`, { headers: bearer(created.key) });
    expect(refused.status).toBe(401);

    // last_used_at is written off the request path, so it may land a moment later.
    await vi.waitFor(async () => {
      const listed = await operator().keys.list({ account: account.id });
      expect(listed.data).toHaveLength(1);
      expect(listed.data[0]!.revoked_at).not.toBeNull();
      expect(listed.data[0]!.last_used_at).not.toBeNull();
    });
  });

  it('refuses an 11th active key with a clear 400-class error, and counts only active keys', async () => {
    const account = await makeAccount(orm);
    const results = await Promise.allSettled(Array.from({ length: 12 }, () => operator().keys.create({ account: account.id })));
    const ok = results.filter((r) => r.status === 'fulfilled') as PromiseFulfilledResult<{ id: string }>[];
    expect(ok).toHaveLength(10);
    const refused = results.find((r) => r.status === 'rejected') as PromiseRejectedResult;
    expect(refused.reason.cause).toMatchObject({ code: 'limit_reached', reason: 'key_limit_reached' });
    expect(refused.reason.cause.message).toMatch(/10 active API keys/);

    await operator().keys.revoke({ id: ok[0]!.value.id });
    await expect(operator().keys.create({ account: account.id })).resolves.toMatchObject({ object: 'api_key' });
  });

  it('answers the four kinds of bad key identically with 401', async () => {
    const account = await makeAccount(orm);
    const revoked = await makeKey(orm, account.id);
    await operator().keys.revoke({ id: revoked.id });
    const cases: Record<string, Record<string, string>> = {
      missing: {},
      malformed: { authorization: 'Bearer not-a-key' },
      unknown: bearer(generateKeySecret()),
      revoked: bearer(revoked.key),
    };
    const answers = await Promise.all(
      Object.values(cases).map((headers) => getJson(`${api.url}/api/v1/balance`, { headers })),
    );
    for (const a of answers) {
      expect(a.status).toBe(401);
      expect(a.body).toEqual(answers[0]!.body);
    }
    expect(answers[0]!.body.error).toMatchObject({ type: 'authentication_error', code: 'invalid_api_key' });
  });

  it('never accepts a key in the query string', async () => {
    const account = await makeAccount(orm, { coins: '1' });
    const { key } = await makeKey(orm, account.id);
    for (const name of ['api_key', 'key', 'access_token', 'authorization']) {
      const res = await getJson(`${api.url}/api/v1/balance?${name}=${key}`);
      expect(res.status).toBe(401);
    }
    const other = await getJson(`${api.url}/api/v1/balance`, { headers: { authorization: `Basic ${Buffer.from(`${key}:`).toString('base64')}` } });
    expect(other.status).toBe(401);
  });

  it('lets a key see only its own account', async () => {
    const a = await makeAccount(orm, { coins: '1' });
    const b = await makeAccount(orm, { coins: '2' });
    const ka = await makeKey(orm, a.id);
    const kb = await makeKey(orm, b.id);
    expect((await getJson(`${api.url}/api/v1/balance`, { headers: bearer(ka.key) })).body.coins).toBe(1);
    expect((await getJson(`${api.url}/api/v1/balance`, { headers: bearer(kb.key) })).body.coins).toBe(2);
  });
});
