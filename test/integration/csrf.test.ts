import type { MikroORM } from '@mikro-orm/postgresql';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openTestOrm, testDeps, uniqueEmail } from '../support/db.ts';
import { createTestApp, serve } from '../support/http.ts';

/** CSRF on the account pages' forms, over real HTTP: the token, its cookie and the Origin must all agree. */
let orm: MikroORM;
let served: Awaited<ReturnType<typeof serve>>;
let base: string;
beforeAll(async () => {
  orm = await openTestOrm();
  const app = createTestApp({ deps: testDeps(orm) });
  served = await serve(app);
  base = served.base;
});
afterAll(async () => {
  await served.close();
  await orm.close();
});

/** A browser's first visit to the sign-up page: its cookies and the form's token. */
async function visit() {
  const res = await fetch(`${base}/signup`);
  const cookies = res.headers.getSetCookie().map((c) => c.split(';')[0]).join('; ');
  const token = /name="_csrf" value="([^"]+)"/.exec(await res.text())![1]!;
  return { cookies, token };
}

const signUp = (cookies: string, fields: Record<string, string>, headers: Record<string, string> = {}) =>
  fetch(`${base}/signup`, {
    method: 'POST',
    redirect: 'manual',
    headers: { cookie: cookies, 'content-type': 'application/x-www-form-urlencoded', ...headers },
    body: new URLSearchParams({ email: uniqueEmail('csrf'), password: 'a long enough password', ...fields }),
  });

describe('CSRF on forms', () => {
  it('accepts the form with its token and cookies', async () => {
    const { cookies, token } = await visit();
    const res = await signUp(cookies, { _csrf: token }, { origin: base });
    expect(res.status).toBe(303);
    // Sign-up answers "check your e-mail" (the mailed link signs in): the address for that page rides in an HttpOnly cookie, not the URL.
    expect(res.headers.get('location')).toBe('/signup/sent');
    expect(res.headers.getSetCookie().some((c) => c.startsWith('mas_signup_email=') && /HttpOnly/i.test(c) && /SameSite=Lax/i.test(c))).toBe(true);
  });

  it('refuses a form without its token, with a token of another visitor, or from another site', async () => {
    const mine = await visit();
    const theirs = await visit();
    expect((await signUp(mine.cookies, {})).status).toBe(403);
    expect((await signUp(mine.cookies, { _csrf: theirs.token })).status).toBe(403);
    expect((await signUp(mine.cookies, { _csrf: mine.token }, { origin: 'https://evil.example' })).status).toBe(403);
    expect((await signUp('', { _csrf: mine.token })).status).toBe(403);
  });

  it('a form too large, or with too many fields, is a 4xx page, never a 500', async () => {
    const { cookies, token } = await visit();
    const big = await signUp(cookies, { _csrf: token, email: 'x'.repeat(64 * 1024) });
    expect(big.status).toBe(413);
    expect(big.headers.get('content-type')).toMatch(/text\/html/);
    const many = Object.fromEntries(Array.from({ length: 50 }, (_, i) => [`f${i}`, 'x']));
    expect((await signUp(cookies, { _csrf: token, ...many })).status).toBe(413);
    expect((await fetch(`${base}/login`)).status).toBe(200);
  });
});
