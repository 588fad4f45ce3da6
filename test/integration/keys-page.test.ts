import type { MikroORM } from '@mikro-orm/postgresql';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { useTestCatalog } from '../support/catalog.ts';
import { csrfOf, signUpPerson, type Person } from '../support/cookie-browser.ts';
import { openTestOrm } from '../support/db.ts';
import { startTestApi } from '../support/http.ts';

/**
 * The API keys page (adapters/web): post/redirect/get for a new key, whose secret reaches the
 * page once through an encrypted flash cookie; the limit fields of the create and edit forms.
 */
let orm: MikroORM;
let api: Awaited<ReturnType<typeof startTestApi>>;
beforeAll(async () => {
  orm = await openTestOrm();
  const providers = await useTestCatalog(orm, 'http://127.0.0.1:9/v1');
  api = await startTestApi(orm, { providers });
});
afterAll(async () => {
  await api.close();
  await orm.close();
});

const SECRET = /mas_[0-9A-Za-z]{38}/g;
const keysOf = async (accountId: string) =>
  orm.em.fork().execute<{ id: string; name: string; key_hash: string; spend_limit_micro: string | null; spend_limit_period: string | null; expires_at: Date | null; allowed_models: string[] | null }[]>(
    'select id, name, key_hash, spend_limit_micro::text, spend_limit_period, expires_at, allowed_models from api_keys where account_id = ? order by created_at',
    [accountId],
  );

/** Posts the create form with these fields (repeated names allowed). */
async function postCreate(person: Person, fields: [string, string][]) {
  const csrf = csrfOf(await (await person.browser.fetch('/account/keys')).text())!;
  return person.browser.fetch('/account/keys', {
    method: 'POST',
    headers: { origin: api.url, 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams([['_csrf', csrf], ...fields]),
  });
}

describe('creating a key: post/redirect/get', () => {
  it('redirects (303) after the POST; the next GET shows the secret once, reloads show it no more and create nothing', async () => {
    const person = await signUpPerson(api.url, orm, 'keys-prg');
    const created = await postCreate(person, [['name', 'laptop']]);
    expect(created.status).toBe(303);
    const location = created.headers.get('location')!;
    expect(location).toBe('/account/keys');
    // The flash cookie: HttpOnly, SameSite=Strict, only for the keys page, 60 seconds; the secret is not readable in it.
    const setCookie = created.headers.getSetCookie().find((c) => c.startsWith('mas_flash='))!;
    expect(setCookie).toMatch(/HttpOnly/i);
    expect(setCookie).toMatch(/SameSite=Strict/i);
    expect(setCookie).toMatch(/Path=\/account\/keys(;|$)/);
    expect(setCookie).toMatch(/Max-Age=60/);
    expect(setCookie).not.toMatch(/mas_[0-9A-Za-z]{38}/);

    const shown = await person.browser.fetch(location);
    expect(shown.status).toBe(200);
    expect(shown.headers.get('cache-control')).toBe('no-store');
    const secrets = (await shown.text()).match(SECRET) ?? [];
    // One secret: shown as the key, and in the three requests ready to run with it (curl, Python, JavaScript).
    expect(secrets).toHaveLength(4);
    expect(new Set(secrets).size).toBe(1);
    const [stored] = await keysOf(person.accountId);
    expect(stored!.key_hash).toMatch(/^[0-9a-f]{64}$/);
    expect(stored!.key_hash).not.toContain(secrets[0]!.slice(4, 20));

    for (let reload = 0; reload < 2; reload++) {
      const again = await person.browser.fetch(location);
      expect(again.status).toBe(200);
      expect((await again.text()).match(SECRET)).toBeNull();
    }
    expect(await keysOf(person.accountId)).toHaveLength(1);

    // The new key works.
    const balance = await fetch(`${api.url}/api/v1/balance`, { headers: { authorization: `Bearer ${secrets[0]}` } });
    expect(balance.status).toBe(200);
  });

  it('a flash cookie of another session, or tampered with, shows nothing', async () => {
    const alice = await signUpPerson(api.url, orm, 'keys-flash-a');
    const bob = await signUpPerson(api.url, orm, 'keys-flash-b');
    const created = await postCreate(alice, [['name', 'stolen']]);
    const flash = created.headers.getSetCookie().find((c) => c.startsWith('mas_flash='))!.split(';')[0]!;
    const asBob = await fetch(`${api.url}/account/keys`, { headers: { cookie: `mas_session=${bob.session}; ${flash}` } });
    expect(asBob.status).toBe(200);
    expect((await asBob.text()).match(SECRET)).toBeNull();
    const value = flash.slice('mas_flash='.length);
    const tampered = `mas_flash=${value.slice(0, -2)}${value.endsWith('A') ? 'B' : 'A'}${value.slice(-1)}`;
    const page = await fetch(`${api.url}/account/keys`, { headers: { cookie: `mas_session=${alice.session}; ${tampered}` } });
    expect(page.status).toBe(200);
    expect((await page.text()).match(SECRET)).toBeNull();
  });

  it('takes the limits from the form, and a bad one is the form again with the message, creating nothing', async () => {
    const person = await signUpPerson(api.url, orm, 'keys-limits');
    const created = await postCreate(person, [
      ['name', 'ci'],
      ['spend_limit_coins', '12.5'],
      ['spend_limit_period', 'monthly'],
      ['expires_at', '2099-12-31'],
      ['allowed_models', 'test/ok'],
      ['allowed_models', 'test/image'],
    ]);
    expect(created.status).toBe(303);
    const [key] = await keysOf(person.accountId);
    expect(key).toMatchObject({ name: 'ci', spend_limit_micro: '12500000', spend_limit_period: 'monthly', allowed_models: ['test/image', 'test/ok'] });
    expect(new Date(key!.expires_at!).toISOString()).toBe('2099-12-31T23:59:59.999Z');
    const list = await (await person.browser.fetch('/account/keys')).text();
    expect(list.replace(/<[^>]+>/g, '')).toContain('0 coins · $0.00 of 12.5 coins this month, 12.5 coins · $0.01 left');

    const refused = await postCreate(person, [['name', 'bad'], ['spend_limit_coins', '-3'], ['spend_limit_period', 'total']]);
    expect(refused.status).toBe(400);
    expect(await refused.text()).toMatch(/spend_limit_coins/);
    const past = await postCreate(person, [['name', 'old'], ['expires_at', '2001-01-01']]);
    expect(past.status).toBe(400);
    expect(await past.text()).toMatch(/in the future/);
    expect(await keysOf(person.accountId)).toHaveLength(1);
  });
});

describe('editing a key', () => {
  it("changes the limits and redirects; another account's key is 404", async () => {
    const person = await signUpPerson(api.url, orm, 'keys-edit');
    await postCreate(person, [['name', 'server'], ['spend_limit_coins', '3']]);
    const [key] = await keysOf(person.accountId);
    const form = await person.browser.fetch(`/account/keys/${key!.id}/edit`);
    expect(form.status).toBe(200);
    const body = await form.text();
    expect(body).toContain('value="3"');
    const csrf = csrfOf(body)!;
    const saved = await person.browser.fetch(`/account/keys/${key!.id}/edit`, {
      method: 'POST',
      headers: { origin: api.url, 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams([['_csrf', csrf], ['name', 'server 2'], ['spend_limit_coins', ''], ['spend_limit_period', 'total'], ['expires_at', ''], ['allowed_models', 'test/ok']]),
    });
    expect(saved.status).toBe(303);
    expect(saved.headers.get('location')).toBe('/account/keys');
    expect((await keysOf(person.accountId))[0]).toMatchObject({ name: 'server 2', spend_limit_micro: null, spend_limit_period: null, expires_at: null, allowed_models: ['test/ok'] });

    const stranger = await signUpPerson(api.url, orm, 'keys-edit-other');
    expect((await stranger.browser.fetch(`/account/keys/${key!.id}/edit`)).status).toBe(404);
    const strangerCsrf = csrfOf(await (await stranger.browser.fetch('/account/keys')).text())!;
    const attempt = await stranger.browser.fetch(`/account/keys/${key!.id}/edit`, {
      method: 'POST',
      headers: { origin: api.url, 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams([['_csrf', strangerCsrf], ['name', 'mine now']]),
    });
    expect(attempt.status).toBe(404);
    expect((await keysOf(person.accountId))[0]!.name).toBe('server 2');
  });

  it('disables a key and enables it again: the key answers 401 api_key_disabled meanwhile, and the list says so', async () => {
    const person = await signUpPerson(api.url, orm, 'keys-disable');
    await postCreate(person, [['name', 'batch']]);
    const secret = (await (await person.browser.fetch('/account/keys')).text()).match(SECRET)![0]!;
    const [key] = await keysOf(person.accountId);
    const save = async (disabled: boolean) => {
      const csrf = csrfOf(await (await person.browser.fetch(`/account/keys/${key!.id}/edit`)).text())!;
      const fields: [string, string][] = [['_csrf', csrf], ['name', 'batch'], ['spend_limit_coins', ''], ['expires_at', '']];
      if (disabled) fields.push(['disabled', 'on']);
      const res = await person.browser.fetch(`/account/keys/${key!.id}/edit`, { method: 'POST', headers: { origin: api.url, 'content-type': 'application/x-www-form-urlencoded' }, body: new URLSearchParams(fields) });
      expect(res.status).toBe(303);
    };
    const balance = () => fetch(`${api.url}/api/v1/balance`, { headers: { authorization: `Bearer ${secret}` } });
    await save(true);
    const refused = await balance();
    expect(refused.status).toBe(401);
    expect(((await refused.json()) as { error: { code: string } }).error.code).toBe('api_key_disabled');
    expect(await (await person.browser.fetch('/account/keys')).text()).toContain('batch (disabled)');
    expect(await (await person.browser.fetch(`/account/keys/${key!.id}/edit`)).text()).toMatch(/name="disabled" checked/);
    await save(false);
    expect((await balance()).status).toBe(200);
  });
});

describe('the list of keys', () => {
  it('names the key in each Revoke and Edit link, so that their accessible names differ', async () => {
    const person = await signUpPerson(api.url, orm, 'keys-a11y');
    for (const name of ['laptop', 'ci', 'phone']) await postCreate(person, [['name', name]]);
    const page = await (await person.browser.fetch('/account/keys')).text();
    const revokes = [...page.matchAll(/<a href="\/account\/keys\/key_\w+\/revoke" aria-label="([^"]+)">/g)].map((m) => m[1]);
    expect(revokes).toEqual(['Revoke key laptop', 'Revoke key ci', 'Revoke key phone']);
    const edits = [...page.matchAll(/<a href="\/account\/keys\/key_\w+\/edit" aria-label="([^"]+)">/g)].map((m) => m[1]);
    expect(edits).toEqual(['Edit key laptop', 'Edit key ci', 'Edit key phone']);
  });
});
