import fs from 'node:fs/promises';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import type { MikroORM } from '@mikro-orm/postgresql';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createMailer } from '../../adapters/mail/mailer.ts';
import type { CoreDeps } from '../../core/context.ts';
import { CookieBrowser, csrfOf } from '../support/cookie-browser.ts';
import { openTestOrm, testDeps, uniqueEmail } from '../support/db.ts';
import { createTestApp } from '../support/http.ts';
import { linkIn, textOfEml } from '../support/mail.ts';
import { startMailpit, type RunningMailpit } from '../support/mailpit.ts';

/**
 * Mail end to end (issue 34): the account pages over real HTTP, the service sending through a
 * real SMTP server (mailpit, SMTP_URL) and the links read back from it; and the no-SMTP mode,
 * which writes .eml files under DATA_DIR/mail and logs the link.
 */
let orm: MikroORM;
let mailpit: RunningMailpit;
let deps: CoreDeps;
let server: http.Server;
let base: string;
const PASSWORD = 'a long enough password';

beforeAll(async () => {
  orm = await openTestOrm();
  mailpit = await startMailpit();
  server = http.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  // The real mail adapter, as SMTP_URL configures it; links point at this server.
  deps = testDeps(orm, { publicBaseUrl: base, mailer: 'env', env: { SMTP_URL: mailpit.smtpUrl, MAIL_FROM: 'MAS tests <mas@test.example>' } });
  server.on('request', createTestApp({ deps, publicBaseUrl: base }));
});
afterAll(async () => {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
  await mailpit?.stop();
  await orm.close();
});

/** The path and query of a mailed link (it names this server). */
const local = (link: string) => {
  const url = new URL(link);
  expect(url.origin).toBe(base);
  return `${url.pathname}${url.search}`;
};
const linkOf = (text: string) => {
  const link = linkIn(text);
  expect(link).toBeDefined();
  return link!;
};

async function signUpForm(browser: CookieBrowser, email: string, password = PASSWORD) {
  const csrf = csrfOf(await (await browser.fetch('/signup')).text())!;
  return browser.post('/signup', { _csrf: csrf, email, password });
}

describe('sign-up through the page, the mail through SMTP', () => {
  it('answers "check your e-mail", mails a link, and the link (GET shows a button, POST redeems) confirms and signs in', async () => {
    const email = uniqueEmail('smtp');
    const browser = new CookieBrowser(base);
    const res = await signUpForm(browser, email);
    expect(res.status).toBe(303);
    expect(res.headers.get('location')).toBe('/signup/sent');
    expect(browser.cookie('mas_session')).toBeUndefined();
    const sent = await browser.fetch('/signup/sent');
    expect(await sent.text()).toContain(`Check your e-mail: we sent a link to ${email} to finish signing up`);

    const mail = await mailpit.waitFor(email, 'Confirm your e-mail address');
    expect(mail.From).toMatchObject({ Name: 'MAS tests', Address: 'mas@test.example' });
    const link = local(linkOf(mail.Text));
    expect(link).toMatch(/^\/signup\/verify\?token=mas_verify_/);
    // A link scanner's GET confirms nothing.
    const page = await (await browser.fetch(link)).text();
    expect(page).toContain('Confirm and sign in');
    const [before] = await orm.em.fork().execute<{ email_verified_at: Date | null }[]>('select email_verified_at from accounts where email = ?', [email]);
    expect(before!.email_verified_at).toBeNull();
    const confirmed = await browser.post('/signup/verify', { _csrf: csrfOf(page)!, token: new URL(link, base).searchParams.get('token')! });
    expect(confirmed.status).toBe(303);
    expect(confirmed.headers.get('location')).toBe('/account?verified=1');
    expect(browser.cookie('mas_session')).toMatch(/^mas_sess_/);
    expect(browser.cookie('mas_device')).toMatch(/^d1\./);
    const overview = await (await browser.fetch('/account?verified=1')).text();
    expect(overview).toContain('Your e-mail address is confirmed.');
    expect(overview).not.toContain('Send the link again');
    // Once only.
    const fresh = csrfOf(await (await browser.fetch(link)).text())!;
    const again = await browser.post('/signup/verify', { _csrf: fresh, token: new URL(link, base).searchParams.get('token')! });
    expect(again.status).toBe(400);
    expect(await again.text()).toContain('invalid, used or expired');
  });

  it('answers a taken e-mail with the same page, and mails its owner instead', async () => {
    const email = uniqueEmail('smtp-taken');
    await signUpForm(new CookieBrowser(base), email);
    const browser = new CookieBrowser(base);
    const res = await signUpForm(browser, email, 'another password, long');
    expect(res.status).toBe(303);
    expect(res.headers.get('location')).toBe('/signup/sent');
    const page = await (await browser.fetch('/signup/sent')).text();
    expect(page).toContain(`Check your e-mail: we sent a link to ${email} to finish signing up`);
    const mail = await mailpit.waitFor(email, 'Someone tried to sign up with your e-mail address');
    expect(mail.Text).toContain(`${base}/login`);
    expect(mail.Text).toContain(`${base}/password/forgot`);
  });

  it('an unconfirmed account signs in, sees the notice, has the link sent again, and cannot create a key', async () => {
    const email = uniqueEmail('smtp-resend');
    const browser = new CookieBrowser(base);
    await signUpForm(browser, email);
    await mailpit.waitFor(email, 'Confirm your e-mail address');
    const login = csrfOf(await (await browser.fetch('/login')).text())!;
    expect((await browser.post('/login', { _csrf: login, email, password: PASSWORD })).status).toBe(303);
    const overview = await (await browser.fetch('/account')).text();
    expect(overview).toContain('Confirm your e-mail address');
    const resent = await browser.post('/account/verify/resend', { _csrf: csrfOf(overview)! });
    expect(resent.status).toBe(303);
    expect(resent.headers.get('location')).toBe('/account?verification=sent#verify');
    for (;;) if ((await mailpit.messagesTo(email)).length >= 2) break;
    const keys = await browser.post('/account/keys', { _csrf: csrfOf(overview)!, name: 'early' });
    expect(keys.status).toBe(403);
    expect(await keys.text()).toContain('Confirm your e-mail address first');
  });
});

describe('password reset through the pages', () => {
  it('mails a 30-minute link that works once; it sets the password, signs out everywhere and signs this browser in', async () => {
    const email = uniqueEmail('smtp-reset');
    const owner = new CookieBrowser(base);
    await signUpForm(owner, email);
    const [account] = await orm.em.fork().execute<{ id: string }[]>('select id from accounts where email = ?', [email]);
    const loginPage = await (await owner.fetch('/login')).text();
    expect(loginPage).toContain('href="/password/forgot"');
    expect((await owner.post('/login', { _csrf: csrfOf(loginPage)!, email, password: PASSWORD })).status).toBe(303);

    const browser = new CookieBrowser(base);
    const forgot = await (await browser.fetch('/password/forgot')).text();
    const asked = await browser.post('/password/forgot', { _csrf: csrfOf(forgot)!, email });
    expect(asked.status).toBe(303);
    expect(asked.headers.get('location')).toBe('/password/forgot/sent');
    // The same answer for an address without an account.
    const nobody = await browser.post('/password/forgot', { _csrf: csrfOf(forgot)!, email: uniqueEmail('nobody') });
    expect([nobody.status, nobody.headers.get('location')]).toEqual([303, '/password/forgot/sent']);
    expect(await (await browser.fetch('/password/forgot/sent')).text()).toContain('If an account exists for that address, we sent it a link');

    const mail = await mailpit.waitFor(email, 'Reset your password');
    const link = local(linkOf(mail.Text));
    const token = new URL(link, base).searchParams.get('token')!;
    const [stored] = await orm.em.fork().execute<{ seconds: number }[]>(
      "select extract(epoch from expires_at - created_at)::int as seconds from account_tokens where account_id = ? and purpose = 'reset_password'",
      [account!.id],
    );
    expect(stored!.seconds).toBe(30 * 60);
    const form = await browser.fetch(link);
    expect(form.status).toBe(200);
    expect(form.headers.get('cache-control')).toBe('no-store');
    const formPage = await form.text();
    expect(formPage).toContain('Choose a new password');
    const done = await browser.post('/password/reset', { _csrf: csrfOf(formPage)!, token, new_password: 'my brand new password' });
    expect(done.status).toBe(303);
    expect(done.headers.get('location')).toBe('/account/settings?password=reset');
    expect((await browser.fetch('/account')).status).toBe(200);
    // The owner's other browser was signed out.
    expect((await owner.fetch('/account')).status).toBe(303);
    // Used: the link's page says so, clearly.
    const used = await browser.fetch(link);
    expect(used.status).toBe(400);
    const usedPage = await used.text();
    expect(usedPage).toContain('This password reset link is invalid, used or expired.');
    expect(usedPage).toContain('href="/password/forgot"');
    const reused = await browser.post('/password/reset', { _csrf: csrfOf(usedPage) ?? csrfOf(await (await browser.fetch('/account')).text())!, token, new_password: 'yet another password' });
    expect(reused.status).toBe(400);
  });

  it('refuses a link whose 30 minutes have passed with a clear page', async () => {
    const email = uniqueEmail('smtp-late');
    await signUpForm(new CookieBrowser(base), email);
    const browser = new CookieBrowser(base);
    const forgot = await (await browser.fetch('/password/forgot')).text();
    await browser.post('/password/forgot', { _csrf: csrfOf(forgot)!, email });
    const link = local(linkOf((await mailpit.waitFor(email, 'Reset your password')).Text));
    await orm.em.fork().execute(
      `update account_tokens set created_at = created_at - interval '31 minutes', expires_at = expires_at - interval '31 minutes' where purpose = 'reset_password' and account_id = (select id from accounts where email = ?)`,
      [email],
    );
    const late = await browser.fetch(link);
    expect(late.status).toBe(400);
    expect(await late.text()).toContain('This password reset link is invalid, used or expired.');
  });
});

describe('sign-in page limits', () => {
  it('answers 429 with Retry-After once the pair is blocked, with the same words for an unknown e-mail', async () => {
    const email = uniqueEmail('page-limit');
    await signUpForm(new CookieBrowser(base), email);
    const browser = new CookieBrowser(base);
    const csrf = csrfOf(await (await browser.fetch('/login')).text())!;
    const attempt = (e: string, password: string) => browser.post('/login', { _csrf: csrf, email: e, password });
    for (let i = 0; i < 5; i++) expect((await attempt(email, `wrong password ${i}`)).status).toBe(401);
    const blocked = await attempt(email, PASSWORD);
    expect(blocked.status).toBe(429);
    expect(Number(blocked.headers.get('retry-after'))).toBeGreaterThan(0);
    expect(await blocked.text()).toContain('Too many attempts. Try again in 1 minute.');
    const unknown = uniqueEmail('page-limit-unknown');
    for (let i = 0; i < 5; i++) expect((await attempt(unknown, `wrong password ${i}`)).status).toBe(401);
    const blockedToo = await attempt(unknown, PASSWORD);
    expect(blockedToo.status).toBe(429);
    expect(blockedToo.headers.get('retry-after')).not.toBeNull();
  });
});

describe('the low-balance form', () => {
  it('saves a threshold, turns it off when empty, and refuses a bad one naming the field', async () => {
    const email = uniqueEmail('smtp-low');
    const browser = new CookieBrowser(base);
    await signUpForm(browser, email);
    const link = local(linkOf((await mailpit.waitFor(email, 'Confirm your e-mail address')).Text));
    const page = await (await browser.fetch(link)).text();
    await browser.post('/signup/verify', { _csrf: csrfOf(page)!, token: new URL(link, base).searchParams.get('token')! });
    const overview = await (await browser.fetch('/account/settings')).text();
    expect(overview).toContain('E-mail me when my balance falls below');
    const saved = await browser.post('/account/low-balance', { _csrf: csrfOf(overview)!, threshold_coins: '250' });
    expect([saved.status, saved.headers.get('location')]).toEqual([303, '/account/settings?notice=saved#low-balance']);
    expect(await (await browser.fetch('/account/settings?notice=saved')).text()).toContain('we e-mail you when the balance falls below 250 coins');
    const bad = await browser.post('/account/low-balance', { _csrf: csrfOf(overview)!, threshold_coins: 'lots' });
    expect(bad.status).toBe(400);
    expect(await bad.text()).toMatch(/whole number of coins/);
    const off = await browser.post('/account/low-balance', { _csrf: csrfOf(overview)!, threshold_coins: '' });
    expect(off.status).toBe(303);
    expect(await (await browser.fetch('/account/settings?notice=saved')).text()).toContain('Saved: no low-balance e-mail.');
  });
});

describe('the mail adapter', () => {
  const capture = () => {
    const lines: Record<string, unknown>[] = [];
    const logger = pino(
      { level: 'info' },
      new Writable({
        write(chunk: Buffer, _enc, done) {
          lines.push(JSON.parse(chunk.toString()) as Record<string, unknown>);
          done();
        },
      }),
    );
    return { lines, logger };
  };

  it('without SMTP_URL writes each message to DATA_DIR/mail as an .eml file and logs its link', async () => {
    const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'mas-mail-'));
    const { lines, logger } = capture();
    const mailer = createMailer({ from: 'MAS <no-reply@test.example>', dataDir, logger });
    expect(mailer.mode).toBe('files');
    const link = `${base}/signup/verify?token=mas_verify_${'x'.repeat(43)}`;
    await mailer.send({ to: 'someone@test.example', subject: 'Confirm your e-mail address', text: `Open this link:\n\n${link}\n`, link });
    const files = await fs.readdir(path.join(dataDir, 'mail'));
    expect(files).toHaveLength(1);
    expect(files[0]).toMatch(/^\d{4}-\d\d-\d\dT.*\.eml$/);
    const eml = await fs.readFile(path.join(dataDir, 'mail', files[0]!), 'utf8');
    expect(eml).toMatch(/^To: someone@test\.example$/m);
    expect(eml).toMatch(/^Subject: Confirm your e-mail address$/m);
    expect(eml).toMatch(/^From: MAS <no-reply@test.example>$/m);
    expect(linkIn(textOfEml(eml))).toBe(link);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({ level: 30, mail: { to: 'someone@test.example', link, file: path.join(dataDir, 'mail', files[0]!) } });
    await fs.rm(dataDir, { recursive: true, force: true });
  });

  it('with SMTP_URL sends through the server and logs nothing of the message', async () => {
    const { lines, logger } = capture();
    const mailer = createMailer({ smtpUrl: mailpit.smtpUrl, from: 'MAS <mas@test.example>', dataDir: '/nonexistent', logger });
    const to = uniqueEmail('adapter');
    const link = `${base}/password/reset?token=mas_reset_${'y'.repeat(43)}`;
    await mailer.send({ to, subject: 'Reset your password', text: `Open: ${link}`, link });
    const got = await mailpit.waitFor(to, 'Reset your password');
    expect(got.Text).toContain(link);
    expect(JSON.stringify(lines)).not.toContain('mas_reset_');
  });
});
