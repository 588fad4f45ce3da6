import { randomBytes } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import { createInvitation } from '../../core/organizations/invitations.ts';
import { testMailbox } from '../support/mail.ts';
import type { MikroORM } from '@mikro-orm/postgresql';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createContext, type CoreDeps } from '../../core/context.ts';
import { createCaller } from '../../core/router.ts';
import { createOrganization } from '../../core/organizations/organizations.ts';
import { makeAppConnection } from '../support/apps.ts';
import { artifactPath, inspectPage, launchChromium } from '../support/browser.ts';
import { makeAccount, makeFailedJob, makeKey, openTestOrm, testDeps, uniqueEmail } from '../support/db.ts';
import { createTestApp } from '../support/http.ts';

/**
 * Every account, admin and public page in a real Chromium, Swagger UI included, at a phone's
 * width (390×844) and a laptop's (1280×800), with a realistic amount of data (ten keys, long
 * error texts, long ids), served with PUBLIC_BASE_URL set (to the test server's own address):
 *   - the page is no wider than the window (document.documentElement.scrollWidth);
 *   - axe-core finds no serious or critical accessibility violation (WCAG 2 A and AA rules);
 *   - at 390 px, every control a finger hits is at least 44 × 44 px (WCAG 2.5.5; a link inside a
 *     sentence is exempt, as 2.5.5 says; a checkbox counts with its label);
 *   - no page's text names an issue ("issue 31"), shows a placeholder ({PUBLIC_BASE_URL}) or
 *     says "localhost";
 * and a screenshot of each goes to test/artifacts/walk/.
 */
let orm: MikroORM;
let deps: CoreDeps;
let served: { base: string; close: () => Promise<void> };
let browser: Browser;
const internal = () => createCaller(createContext(deps, { kind: 'internal' }));

const VIEWPORTS = [
  { name: '390', width: 390, height: 844 },
  { name: '1280', width: 1280, height: 800 },
] as const;

let accountId = '';
let keyId = '';
let jobId = '';
let adminToken = '';
// Organizations (docs/organizations.md): one the person owns, with a member and a waiting invitation.
let orgId = '';
let memberId = '';
let invitationPath = '';
// The admin pages' organization is the same one.
let organizationId = '';
beforeAll(async () => {
  orm = await openTestOrm();
  // PUBLIC_BASE_URL is set, to the server's own address: no page may fall back to "localhost".
  const server = await new Promise<Server>((resolve) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => resolve(s));
  });
  const base = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  deps = testDeps(orm, { publicBaseUrl: base });
  server.on('request', createTestApp({ deps, publicBaseUrl: base }));
  served = {
    base,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
  browser = await launchChromium();

  // A person with a long e-mail, money, nine keys and an app's key, history and failed jobs with long errors.
  const account = await makeAccount(orm, { coins: '1234.5' });
  accountId = account.id;
  await orm.em.fork().execute('update accounts set email = ? where id = ?', [`a.rather.long.name.for.testing.${randomBytes(3).toString('hex')}@example-company-domain.test`, accountId]);
  for (let i = 0; i < 8; i++) await makeKey(orm, accountId, `key number ${i} for a service with a long name`);
  keyId = (await makeKey(orm, accountId, 'laptop')).id;
  await makeAppConnection(orm, accountId, { name: 'A research agent with a long name', capMicro: 50_000_000n });
  for (let i = 0; i < 3; i++) jobId = await makeFailedJob(orm, accountId, keyId, `The provider failed: upstream answered 503 Service Unavailable with a long body that goes on ${'and on '.repeat(30)}until the end.`);
  const org = await createOrganization(orm.em.fork(), { personId: accountId, organizationId: null }, { name: 'A research team with a rather long organization name' });
  orgId = org.id;
  memberId = (await makeAccount(orm)).id;
  await orm.em.fork().execute(`insert into organization_members (organization_id, account_id, role, spend_limit_micro, spend_limit_period) values (?, ?, 'member', 25000000, 'monthly')`, [orgId, memberId]);
  const invited = uniqueEmail('walk-invited');
  await createInvitation({ mailer: deps.mailer, logger: deps.logger, clock: () => new Date(), config: deps.config }, orm.em.fork(), { personId: accountId, organizationId: null }, { id: orgId, email: invited, role: 'admin' });
  invitationPath = new URL((await testMailbox.next(invited)).link!).pathname;
  // The admin's organization pages: the same organization, with a member's key and coins.
  organizationId = orgId;
  await internal().keys.create({ account: memberId, organization: organizationId, name: 'the team build server' });
  await internal().wallet.topUp({ organization: organizationId, coins: '500' });
  const admin = await internal().admin.users.create({ email: uniqueEmail('walk-admin'), role: 'operator' });
  adminToken = admin.login_token;
});
afterAll(async () => {
  await browser?.close();
  await served?.close();
  await orm?.close();
});


interface Finding {
  page: string;
  viewport: string;
  scrollWidth: number;
  width: number;
  wide: string[];
  violations: string[];
  /** At 390 px: the controls smaller than 44 × 44 px. */
  small: string[];
  /** Text no page may show. */
  leaks: string[];
}

/** The controls a finger hits that are smaller than 44 × 44 px (WCAG 2.5.5), outside sentences. */
const SMALL_TARGETS = `(() => {
  const inSentence = (el) => {
    let block = el.parentElement;
    while (block && getComputedStyle(block).display.startsWith('inline')) block = block.parentElement;
    if (!block) return false;
    const clone = block.cloneNode(true);
    clone.querySelectorAll('a, button, summary, select, input, label, code, time, span.fig').forEach((c) => c.remove());
    return /[A-Za-z]{3,}/.test(clone.textContent || '');
  };
  const out = [];
  for (const el of document.querySelectorAll('a[href], button, summary, select, textarea, input:not([type="hidden"])')) {
    const style = getComputedStyle(el);
    if (style.visibility === 'hidden' || el.closest('[hidden], details:not([open]) > :not(summary)')) continue;
    let r = el.getBoundingClientRect();
    if (r.width === 0 && r.height === 0) continue;
    if (el.matches('input[type="checkbox"], input[type="radio"]') && el.closest('label')) r = el.closest('label').getBoundingClientRect();
    if (el.tagName === 'A' && inSentence(el)) continue;
    if (r.width + 0.5 < 44 || r.height + 0.5 < 44) {
      const name = (el.getAttribute('aria-label') || el.textContent || el.getAttribute('name') || '').trim().replace(/\\s+/g, ' ').slice(0, 30);
      out.push(el.tagName.toLowerCase() + ' "' + name + '" ' + Math.round(r.width) + '×' + Math.round(r.height));
    }
  }
  return out;
})()`;

const LEAKS = [/issue \d+/i, /\{PUBLIC_BASE_URL\}/, /localhost/i];

/** Opens each path in a fresh page of `context` at each viewport, and measures it. */
async function walk(context: BrowserContext, area: string, paths: string[]): Promise<Finding[]> {
  const findings: Finding[] = [];
  for (const viewport of VIEWPORTS) {
    const page: Page = await context.newPage();
    await page.setViewportSize({ width: viewport.width, height: viewport.height });
    for (const path of paths) {
      const res = await page.goto(`${served.base}${path}`);
      expect(res?.status(), `${path} answers`).toBeLessThan(500);
      const { scrollWidth, width, wide, violations } = await inspectPage(page);
      const small = viewport.width === 390 ? ((await page.evaluate(SMALL_TARGETS)) as string[]) : [];
      const text = (await page.evaluate('document.body.innerText')) as string;
      const leaks = LEAKS.filter((re) => re.test(text)).map((re) => `${re.source}: "${re.exec(text)![0]}"`);
      const name = `${area}${path.replace(/\b(acct|key|gen)_\w+/g, '$1').replace(/%2F/g, '-').replace(/[^\w]+/g, '-').replace(/-+$/, '')}-${viewport.name}.png`;
      await page.screenshot({ path: await artifactPath(`walk/${name}`), fullPage: true });
      findings.push({ page: path, viewport: viewport.name, scrollWidth, width, wide, violations, small, leaks });
    }
    await page.close();
  }
  return findings;
}

const tooWide = (f: Finding[]) => f.filter((x) => x.scrollWidth > x.width).map((x) => `${x.page} at ${x.viewport}: ${x.scrollWidth} px (${x.wide.join(', ')})`);
const inaccessible = (f: Finding[]) => f.filter((x) => x.violations.length > 0).map((x) => `${x.page} at ${x.viewport}: ${x.violations.join('; ')}`);
const smallTargets = (f: Finding[]) => f.filter((x) => x.small.length > 0).map((x) => `${x.page} at ${x.viewport}: ${x.small.slice(0, 6).join('; ')}${x.small.length > 6 ? ` and ${x.small.length - 6} more` : ''}`);
const leaked = (f: Finding[]) => f.filter((x) => x.leaks.length > 0).map((x) => `${x.page} at ${x.viewport}: ${x.leaks.join('; ')}`);
/** Everything a walk must not find. */
const problems = (f: Finding[]) => ({ tooWide: tooWide(f), inaccessible: inaccessible(f), smallTargets: smallTargets(f), leaked: leaked(f) });
const NONE = { tooWide: [], inaccessible: [], smallTargets: [], leaked: [] };

// Each page is loaded, measured, checked by axe and photographed twice: a walk takes a while on a loaded
// 2-core machine. The three walks, each in a context of its own, run at once (Chromium renders them in
// processes of its own, so they share the cores rather than queue).
describe.concurrent('every page fits a phone and a laptop, and passes axe', { timeout: 300_000 }, () => {
  it('signed-out pages', async () => {
    const context = await browser.newContext();
    const findings = await walk(context, 'public', [
      '/',
      '/models',
      '/models/mas/echo',
      '/models/mas/image-demo',
      '/docs',
      '/docs/quickstart',
      '/docs/api',
      '/api/v1/docs',
      '/login',
      '/signup',
      '/signup/sent',
      '/signup/verify?token=x',
      '/password/forgot',
      '/password/forgot/sent',
      '/password/reset?token=x',
      '/login/link?token=x',
      '/authorize?client_id=x',
      '/admin/login',
      '/no-such-page',
      invitationPath,
      '/invitations/mas_invite_unknown',
    ]);
    await context.close();
    expect(problems(findings)).toEqual(NONE);
  });

  it('account pages', async () => {
    const context = await browser.newContext();
    const link = await internal().accounts.loginLink({ account: accountId });
    const page = await context.newPage();
    await page.goto(`${served.base}/login/link?token=${encodeURIComponent(link.token)}`);
    await page.getByRole('button', { name: /Sign in|Continue/ }).click();
    await page.waitForURL(/\/account$/);
    await page.close();
    const findings = await walk(context, 'account', [
      '/account',
      '/account/keys',
      `/account/keys/${keyId}/edit`,
      `/account/keys/${keyId}/revoke`,
      '/account/billing',
      '/account/settings',
      '/account/apps',
      '/account/usage',
      '/account/usage?from=2026-02-30&to=2026-03-01',
      `/account/generations/${jobId}`,
      '/account/organizations',
      `/account/organizations/${orgId}`,
      `/account/organizations/${orgId}/members/${memberId}`,
      `/account/organizations/${orgId}/usage`,
      `/account/keys?organization=${orgId}`,
      `/account?organization=${orgId}`,
      `/account/billing?organization=${orgId}`,
      `/account/usage?organization=${orgId}`,
      invitationPath,
    ]);
    await context.close();
    expect(problems(findings)).toEqual(NONE);
  });

  it('admin pages', async () => {
    const context = await browser.newContext();
    const page = await context.newPage();
    await page.goto(`${served.base}/admin/login/link?token=${encodeURIComponent(adminToken)}`);
    await page.getByLabel(/Choose a password/).fill('a long admin passphrase 2026');
    await page.getByRole('button', { name: 'Continue' }).click();
    await page.waitForURL(/\/admin$/);
    await page.close();
    const findings = await walk(context, 'admin', [
      '/admin',
      '/admin/accounts',
      `/admin/accounts/${accountId}`,
      `/admin/accounts/${accountId}/disable`,
      `/admin/accounts/${accountId}/keys/${keyId}/revoke`,
      '/admin/jobs',
      '/admin/jobs?status=failed',
      '/admin/jobs?from=2026-13-45',
      '/admin/margin?from=2026-02-30',
      `/admin/jobs/${jobId}`,
      '/admin/models',
      `/admin/models/${encodeURIComponent('mas/image-demo')}`,
      '/admin/audit',
      '/admin/margin',
      '/admin/admins',
      '/admin/organizations',
      `/admin/organizations/${organizationId}`,
      `/admin/organizations/${organizationId}/top-up`,
    ]);
    await context.close();
    expect(problems(findings)).toEqual(NONE);
  });
});
