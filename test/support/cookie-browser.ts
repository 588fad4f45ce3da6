import type { MikroORM } from '@mikro-orm/postgresql';
import { expect } from 'vitest';
import { uniqueEmail } from './db.ts';
import { linkFromMailDir, testMailbox, tokenOf } from './mail.ts';

/**
 * A person's browser without a browser: a cookie jar over fetch that never follows redirects,
 * for tests that walk the account pages and the OAuth consent flow step by step.
 */
export class CookieBrowser {
  private readonly jar = new Map<string, string>();
  private readonly base: string;

  constructor(base: string) {
    this.base = base;
  }

  async fetch(pathOrUrl: string, init: RequestInit = {}): Promise<Response> {
    const headers = new Headers(init.headers);
    if (this.jar.size > 0) headers.set('cookie', [...this.jar].map(([k, v]) => `${k}=${v}`).join('; '));
    const res = await fetch(new URL(pathOrUrl, this.base), { ...init, headers, redirect: 'manual' });
    for (const line of res.headers.getSetCookie()) {
      const [pair, ...attrs] = line.split(';');
      const eq = pair!.indexOf('=');
      const name = pair!.slice(0, eq).trim();
      const value = pair!.slice(eq + 1).trim();
      const expired = attrs.some((a) => /^\s*expires=/i.test(a) && new Date(a.split('=')[1]!).getTime() < Date.now());
      if (value === '' || expired) this.jar.delete(name);
      else this.jar.set(name, value);
    }
    return res;
  }

  cookie(name: string): string | undefined {
    return this.jar.get(name);
  }

  /** A form posted from this site's page: its Origin is the site's. */
  post(path: string, fields: Record<string, string>): Promise<Response> {
    return this.fetch(path, { method: 'POST', headers: { origin: this.base, 'content-type': 'application/x-www-form-urlencoded' }, body: new URLSearchParams(fields) });
  }
}

/** The CSRF token a page's form carries. */
export const csrfOf = (page: string) => /name="_csrf" value="([^"]+)"/.exec(page)?.[1];

const unescapeHtml = (s: string) => s.replace(/&quot;/g, '"').replace(/&#39;/g, "'").replace(/&lt;/g, '<').replace(/&gt;/g, '>').replace(/&amp;/g, '&');

/** The request a form carries in its hidden fields (the consent page's), its CSRF token apart. */
export const hiddenFields = (page: string): Record<string, string> =>
  Object.fromEntries([...page.matchAll(/<input type="hidden" name="(\w+)" value="([^"]*)">/g)].filter((m) => m[1] !== '_csrf').map((m) => [m[1]!, unescapeHtml(m[2]!)]));

/** A person signed up through the sign-up form, still signed in in their browser. */
export interface Person {
  browser: CookieBrowser;
  email: string;
  accountId: string;
  /** The session cookie, for calling core as this person (account.keys.list and the like). */
  session: string;
}

/**
 * Signs a new person up through the real sign-up form of the service at `base`, and follows the
 * confirmation link mailed to them (from the test mailbox, or from the .eml files of `mailDir`
 * for a service started without SMTP_URL): confirmed and signed in, as a person is.
 */
export async function signUpPerson(base: string, orm: MikroORM, tag: string, opts: { mailDir?: string } = {}): Promise<Person> {
  const browser = new CookieBrowser(base);
  const csrf = csrfOf(await (await browser.fetch('/signup')).text())!;
  const email = uniqueEmail(tag);
  const res = await browser.post('/signup', { _csrf: csrf, email, password: 'a long enough password' });
  expect(res.status).toBe(303);
  expect(res.headers.get('location')).toBe('/signup/sent');
  const token = opts.mailDir ? tokenOf(await linkFromMailDir(opts.mailDir, email, 'mas_verify_')) : testMailbox.tokenFor(email, 'verify');
  const page = await (await browser.fetch(`/signup/verify?${new URLSearchParams({ token }).toString()}`)).text();
  const verified = await browser.post('/signup/verify', { _csrf: csrfOf(page)!, token });
  expect(verified.status).toBe(303);
  const [row] = await orm.em.fork().execute<{ id: string }[]>('select id from accounts where email = ?', [email]);
  return { browser, email, accountId: row!.id, session: browser.cookie('mas_session')! };
}
