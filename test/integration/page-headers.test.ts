import type { MikroORM } from '@mikro-orm/postgresql';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createContext, type CoreDeps } from '../../core/context.ts';
import { createCaller } from '../../core/router.ts';
import { CookieBrowser, csrfOf } from '../support/cookie-browser.ts';
import { makeAccount, makeKey, openTestOrm, testDeps } from '../support/db.ts';
import { createTestApp, serve } from '../support/http.ts';

/**
 * The headers of the pages (issue 34's browser walk): a signed-in page is never stored (Back after
 * signing out showed private data), framing is refused alike by both headers, and styles come
 * only from this site's files.
 */
let orm: MikroORM;
let deps: CoreDeps;
let served: Awaited<ReturnType<typeof serve>>;
beforeAll(async () => {
  orm = await openTestOrm();
  deps = testDeps(orm);
  served = await serve(createTestApp({ deps }));
});
afterAll(async () => {
  await served?.close();
  await orm?.close();
});

async function signedIn(): Promise<{ browser: CookieBrowser; keyId: string }> {
  const account = await makeAccount(orm, { coins: '5' });
  const keyId = (await makeKey(orm, account.id, 'laptop')).id;
  const link = await createCaller(createContext(deps, { kind: 'internal' })).accounts.loginLink({ account: account.id });
  const browser = new CookieBrowser(served.base);
  const csrf = csrfOf(await (await browser.fetch(`/login/link?token=${encodeURIComponent(link.token)}`)).text())!;
  const res = await browser.post('/login/link', { _csrf: csrf, token: link.token });
  expect(res.status).toBe(303);
  return { browser, keyId };
}

describe('page headers', () => {
  it('every signed-in account page says no-store', async () => {
    const { browser, keyId } = await signedIn();
    for (const path of ['/account', '/account/keys', `/account/keys/${keyId}/revoke`, '/account/apps', '/account/usage', '/account/usage.csv']) {
      const res = await browser.fetch(path, { headers: { accept: 'text/html' } });
      expect(res.status, path).toBe(200);
      expect(res.headers.get('cache-control'), path).toBe('no-store');
    }
  });

  it('framing is refused by both headers alike, and styles come only from this site', async () => {
    const { browser } = await signedIn();
    for (const path of ['/login', '/account', '/admin/login']) {
      const res = await browser.fetch(path, { headers: { accept: 'text/html' } });
      const csp = res.headers.get('content-security-policy') ?? '';
      expect(csp, path).toContain("frame-ancestors 'none'");
      expect(res.headers.get('x-frame-options'), path).toBe('DENY');
      const styleSrc = /style-src ([^;]*)/.exec(csp)?.[1];
      expect(styleSrc, path).toBe("'self'");
    }
  });
});
