import type { MikroORM } from '@mikro-orm/postgresql';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createContext, type CoreDeps } from '../../core/context.ts';
import { createCaller } from '../../core/router.ts';
import { artifactPath, launchChromium } from '../support/browser.ts';
import { makeAccount, makeFailedJob, makeKey, openTestOrm, testDeps, uniqueEmail } from '../support/db.ts';
import { createTestApp, serve } from '../support/http.ts';
import { signUpVerified } from '../support/sign-up.ts';

/** The admin pages (issue 18) in a real Chromium: an operator signs in with a link, looks, adjusts a balance, signs out. */
let orm: MikroORM;
let deps: CoreDeps;
let served: Awaited<ReturnType<typeof serve>>;
let browser: Browser;
let context: BrowserContext;
let page: Page;
beforeAll(async () => {
  orm = await openTestOrm();
  deps = testDeps(orm);
  served = await serve(createTestApp({ deps }));
  browser = await launchChromium();
  context = await browser.newContext();
  page = await context.newPage();
});
afterAll(async () => {
  await browser?.close();
  await served?.close();
  await orm?.close();
});


const internal = () => createCaller(createContext(deps, { kind: 'internal' }));

describe('the admin pages', () => {
  let accountId = '';
  let accountEmail = '';

  it('signed out, /admin goes to the admin sign-in page', async () => {
    await page.goto(`${served.base}/admin/accounts`);
    await page.waitForURL(/\/admin\/login\?next=%2Fadmin%2Faccounts$/);
    expect(await page.getByRole('button', { name: 'Sign in' }).isVisible()).toBe(true);
  });

  it('an operator opens the one-time link, chooses a password and lands on the dashboard', async () => {
    const account = await makeAccount(orm, { coins: '20' });
    accountId = account.id;
    accountEmail = account.email;
    const job = await makeFailedJob(orm, account.id, (await makeKey(orm, account.id)).id);
    const created = await internal().admin.users.create({ email: uniqueEmail('admin'), role: 'operator' });
    await page.goto(`${served.base}/admin/login/link?token=${encodeURIComponent(created.login_token)}`);
    await page.getByLabel(/Choose a password/).fill('a long admin passphrase 2026');
    await page.getByRole('button', { name: 'Continue' }).click();
    await page.waitForURL(/\/admin$/);
    expect(await page.getByRole('heading', { name: 'Dashboard' }).isVisible()).toBe(true);
    expect(await page.getByRole('heading', { name: /Spend per day/ }).isVisible()).toBe(true);
    expect(await page.locator('svg.chart rect').count()).toBe(30);
    expect(await page.getByRole('heading', { name: 'Newest failed jobs' }).isVisible()).toBe(true);
    await page.screenshot({ path: await artifactPath('admin-dashboard.png'), fullPage: true });
    // A failed job's page links to its workflow in the Temporal UI.
    await page.locator('tr', { hasText: job }).getByRole('link', { name: job }).click();
    await page.waitForURL(new RegExp(`/admin/jobs/${job}$`));
    const link = page.getByRole('link', { name: 'This job in the Temporal UI' });
    expect(await link.getAttribute('href')).toBe(`http://temporal-ui.test/namespaces/default/workflows/${job}`);
    await page.goto(`${served.base}/admin`);
    // The cookie is the admin session's, only for /admin.
    const cookie = (await context.cookies()).find((c) => c.name === 'mas_admin_session');
    expect(cookie).toMatchObject({ httpOnly: true, sameSite: 'Strict', path: '/admin' });
    expect(cookie!.value).toMatch(/^mas_asess_/);
  });

  it('finds an account by email, adjusts its balance, and the audit log shows it', async () => {
    await page.getByRole('link', { name: 'Accounts' }).click();
    await page.getByLabel('Email starts with').fill(accountEmail);
    await page.getByRole('button', { name: 'Find' }).click();
    await page.getByRole('link', { name: accountEmail }).click();
    await page.waitForURL(new RegExp(`/admin/accounts/${accountId}$`));
    expect(await page.locator('#balance').textContent()).toBe('20 coins · $0.02');
    // The account's jobs in the Temporal UI: its workflow list filtered by the MasAccountId search attribute.
    expect(await page.getByRole('link', { name: "This account's jobs in the Temporal UI" }).getAttribute('href')).toBe(
      `http://temporal-ui.test/namespaces/default/workflows?query=${encodeURIComponent(`MasAccountId = "${accountId}"`)}`,
    );
    await page.getByLabel(/^Coins/).fill('+5');
    await page.getByLabel(/^Reason/).fill('goodwill after outage');
    await page.getByLabel(/I understand/).check();
    await page.getByRole('button', { name: 'Adjust balance' }).click();
    await page.waitForURL(/done=adjusted$/);
    expect(await page.getByRole('status').textContent()).toMatch(/adjusted/);
    expect(await page.locator('#balance').textContent()).toBe('25 coins · $0.03');

    await page.getByRole('link', { name: 'Audit log' }).click();
    await page.waitForURL(/\/admin\/audit$/);
    const row = page.locator('tr', { hasText: accountId }).filter({ hasText: 'goodwill after outage' });
    expect(await row.count()).toBeGreaterThan(0);

    await page.getByRole('link', { name: 'Jobs', exact: true }).click();
    expect(await page.getByRole('heading', { name: 'Jobs' }).isVisible()).toBe(true);
    expect(await page.locator('table.jobs tbody tr').count()).toBeGreaterThan(0);
  });

  it('a viewer sees no adjustment form, and a direct POST is refused in the pages\' words', async () => {
    const viewer = await internal().admin.users.create({ email: uniqueEmail('viewer'), role: 'viewer' });
    const session = await createCaller(createContext(deps, { kind: 'admin', token: null })).admin.session.redeemLink({ token: viewer.login_token, new_password: 'a long viewer passphrase 2026' });
    const admin = `mas_admin_session=${session.token}`;
    const got = await fetch(`${served.base}/admin/accounts/${accountId}`, { headers: { cookie: admin } });
    expect(got.status).toBe(200);
    const cookies = [admin, ...got.headers.getSetCookie().map((c) => c.split(';')[0])].join('; ');
    const form = await got.text();
    // The only form a viewer gets is the sign-out form; no adjustment, no refusal about tokens.
    expect([...form.matchAll(/<form method="post" action="([^"]+)"/g)].map((m) => m[1])).toEqual(['/admin/logout']);
    expect(form).not.toContain('Adjust balance');
    expect(form).toContain('Your admin role (viewer) can read but not change anything. Ask an operator.');
    const field = (name: string) => new RegExp(`name="${name}" value="([^"]+)"`).exec(form)![1]!;
    const res = await fetch(`${served.base}/admin/accounts/${accountId}/adjust`, {
      method: 'POST',
      redirect: 'manual',
      headers: { cookie: cookies, origin: served.base, 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({ _csrf: field('_csrf'), idempotency_key: 'viewer-try', coins: '+1', reason: 'should not happen', confirm: 'yes' }),
    });
    expect(res.status).toBe(403);
    const refusal = await res.text();
    expect(refusal).toContain('role="alert">Your admin role (viewer) can read but not change anything. Ask an operator.</p>');
    expect(refusal).not.toMatch(/admin token/);
  });

  it('signs out; an account session or no cookie cannot open /admin', async () => {
    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.waitForURL(/\/admin\/login$/);
    await page.goto(`${served.base}/admin`);
    await page.waitForURL(/\/admin\/login\?next=%2Fadmin$/);

    const session = await signUpVerified(deps, { email: uniqueEmail('notadmin'), password: 'an account password, long' });
    for (const cookie of [`mas_session=${session.token}`, `mas_admin_session=${session.token}`, '']) {
      const res = await fetch(`${served.base}/admin`, { redirect: 'manual', headers: cookie ? { cookie } : {} });
      expect(res.status).toBe(303);
      expect(res.headers.get('location')).toBe('/admin/login?next=%2Fadmin');
    }
  });
});
