import { randomBytes } from 'node:crypto';
import type { MikroORM } from '@mikro-orm/postgresql';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { VIEWER_REFUSAL } from '../../adapters/web/admin/shared.ts';
import { createContext, type CoreDeps } from '../../core/context.ts';
import { createGeneration } from '../../core/generations/create-generation.ts';
import { createGenerationInput } from '../../core/generations/schema.ts';
import type { GenerationStarter } from '../../core/ports.ts';
import { createCaller } from '../../core/router.ts';
import { launchChromium, shotAndInspect } from '../support/browser.ts';
import { CookieBrowser, csrfOf } from '../support/cookie-browser.ts';
import { makeAccount, makeKey, openTestOrm, testDeps, uniqueEmail } from '../support/db.ts';
import { createTestApp, serve } from '../support/http.ts';

/**
 * Every operator action of the admin pages (issue 34) in a real Chromium: each with a reason and
 * an "I understand" confirmation, post/redirect/get, a notice, and its entry in the audit log;
 * the job search with its filters and cursor paging; a viewer who sees no action and is refused
 * in the pages' words; and no admin page wider than a phone's or a laptop's screen.
 */
let orm: MikroORM;
let deps: CoreDeps;
let served: Awaited<ReturnType<typeof serve>>;
let browser: Browser;
let context: BrowserContext;
let page: Page;
const tag = randomBytes(4).toString('hex');
const canceledWorkflows: string[] = [];
/** Temporal is a third-party service here: the workflow a cancel stops is recorded, not run. */
const starter: GenerationStarter = {
  start: async () => undefined,
  cancel: async (id: string) => void canceledWorkflows.push(id),
  state: async () => ({ state: 'open' }) as never,
  deliverWebhook: async () => undefined,
};

const internal = () => createCaller(createContext(deps, { kind: 'internal' }));
const LONG_ERROR = `The provider failed: ${'upstream-said-no-'.repeat(30)}end`;
const MODEL = `test/admin-pages-${tag}`;

let accountId = '';
let accountEmail = '';
let otherId = '';
let runningJob = '';
let succeededJob = '';
let failedJob = '';
let appId = '';
let runnerId = '';

/** An ended job (and the hold it ended), as the job path leaves one. */
async function insertJob(account: string, key: string, status: 'failed' | 'succeeded', model = 'mas/image-demo') {
  const id = `gen_${randomBytes(12).toString('hex')}`;
  const hold = `hold_${randomBytes(12).toString('hex')}`;
  const em = orm.em.fork();
  const succeeded = status === 'succeeded';
  await em.execute(
    `insert into holds (id, account_id, amount_micro, from_subscription_micro, from_purchased_micro, status, captured_micro, reference, expires_at, ended_at)
     values (?, ?, 2000000, 0, 2000000, ?, ?, ?, now() + interval '1 hour', now())`,
    [hold, account, succeeded ? 'settled' : 'released', succeeded ? 2000000 : 0, id],
  );
  await em.execute(
    `insert into generations (id, account_id, key_id, model_id, status, prompt, settings, inputs, price_micro, cost_micro, hold_id, error, completed_at)
     values (?, ?, ?, ?, ?, 'a lighthouse', '{}', '{}', 2000000, ?, ?, ?::jsonb, now())`,
    [id, account, key, model, status, succeeded ? 2000000 : 0, hold, succeeded ? null : JSON.stringify({ message: LONG_ERROR, code: 'upstream_error' })],
  );
  return id;
}

/** A running job: accepted as the API accepts one (its price held), then started. */
async function runningJobOf(account: string, key: string) {
  const principal = { kind: 'api_key' as const, accountId: account, keyId: key, paid: true, fromCache: false };
  const { generation } = await createGeneration(deps, orm.em.fork(), principal, createGenerationInput.parse({ model: MODEL, prompt: 'a lighthouse', settings: {} }));
  await orm.em.fork().execute(`update generations set status = 'running', started_at = now() where id = ?`, [generation.id]);
  return generation.id;
}

beforeAll(async () => {
  orm = await openTestOrm();
  deps = testDeps(orm, { generations: starter });
  served = await serve(createTestApp({ deps }));
  browser = await launchChromium();
  context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  page = await context.newPage();

  const account = await makeAccount(orm, { coins: '50' });
  accountId = account.id;
  accountEmail = account.email;
  const laptop = await makeKey(orm, account.id, 'laptop');
  await makeKey(orm, account.id, 'ci');
  const appKey = await makeKey(orm, account.id, 'app key');
  appId = `app_${randomBytes(10).toString('hex')}`;
  await orm.em.fork().execute(
    `insert into app_connections (id, account_id, key_id, client_id, client_name, redirect_host, spend_cap_micro) values (?, ?, ?, 'https://app.example/c', 'Notes app', 'app.example', 20000000)`,
    [appId, account.id, appKey.id],
  );
  // 30 failed jobs: more than one page of 25.
  for (let i = 0; i < 30; i++) failedJob = await insertJob(account.id, laptop.id, 'failed');
  succeededJob = await insertJob(account.id, laptop.id, 'succeeded');
  await internal().admin.models.create({
    model: { id: MODEL, name: 'Admin pages image', type: 'image', generation_types: ['text-to-image'], provider: { name: 'local', model: 'image' }, settings: {}, pricing: { base: 10 }, deadline_seconds: 120 },
    reason: 'for the admin pages test',
  });
  const runner = await makeAccount(orm, { coins: '50' });
  runnerId = runner.id;
  runningJob = await runningJobOf(runner.id, (await makeKey(orm, runner.id)).id);
  const other = await makeAccount(orm);
  otherId = other.id;
  const otherKey = await makeKey(orm, other.id);
  await insertJob(other.id, otherKey.id, 'failed', 'mas/audio-demo');
  await insertJob(other.id, otherKey.id, 'failed', 'mas/audio-demo');

  const operator = await internal().admin.users.create({ email: uniqueEmail('operator'), role: 'operator' });
  await page.goto(`${served.base}/admin/login/link?token=${encodeURIComponent(operator.login_token!)}`);
  await page.getByLabel(/Choose a password/).fill('a long admin passphrase 2026');
  await page.getByRole('button', { name: 'Continue' }).click();
  await page.waitForURL(/\/admin$/);
});
afterAll(async () => {
  await browser?.close();
  await served?.close();
  await orm?.close();
});

/** Fills the reason, ticks "I understand" and submits, within `scope` (a form or the page). */
async function confirm(scope: Page | ReturnType<Page['locator']>, reason: string, button: string | RegExp) {
  await scope.getByLabel(/^Reason/).fill(reason);
  await scope.getByLabel(/I understand/).check();
  await scope.getByRole('button', { name: button }).click();
}

const status = () => page.getByRole('status').textContent();
const reasonOf = (what: string) => `${what} ${tag}`;
const auditRows = async () => {
  await page.goto(`${served.base}/admin/audit`);
  return page.locator('#audit tbody tr').allTextContents();
};

describe('operator actions on an account', () => {
  it('revokes a key from its row, through a confirmation page, and the notice says so', async () => {
    await page.goto(`${served.base}/admin/accounts/${accountId}`);
    await page.getByRole('link', { name: 'Revoke key laptop' }).click();
    await page.waitForURL(/\/keys\/key_[^/]+\/revoke$/);
    expect(await page.getByRole('heading', { name: 'Revoke an API key' }).isVisible()).toBe(true);
    await confirm(page, reasonOf('leaked key'), 'Revoke key');
    await page.waitForURL(new RegExp(`/admin/accounts/${accountId}\\?done=key_revoked$`));
    expect(await status()).toBe('The key was revoked.');
    expect(await page.locator('tr', { hasText: 'laptop' }).textContent()).toMatch(/revoked/);
    expect(await page.getByRole('link', { name: 'Revoke key laptop' }).count()).toBe(0);
    expect(await page.getByRole('link', { name: 'Revoke key ci' }).count()).toBe(1);
  });

  it('revokes an app connection, ends the sessions, disables and enables the account, tops up, grants and adjusts', async () => {
    const steps: [string, string, string, string, RegExp | null][] = [
      ['Revoke app Notes app', 'Revoke app connection', 'app revoked', 'The app connection was revoked.', null],
      ['End the account’s sessions', 'End sessions', 'sessions ended', 'The account’s sessions were ended.', null],
      ['Disable the account', 'Disable account', 'abuse report', 'The account was disabled.', /^disabled/],
      ['Enable the account', 'Enable account', 'report cleared', 'The account was enabled.', /^active$/],
    ];
    for (const [link, button, reason, notice, state] of steps) {
      await page.goto(`${served.base}/admin/accounts/${accountId}`);
      await page.getByRole('link', { name: link }).click();
      await confirm(page, reasonOf(reason), button);
      await page.waitForURL(/\?done=/);
      expect(await status(), link).toBe(notice);
      if (state) expect(await page.locator('#account-state').textContent(), link).toMatch(state);
    }
    expect(await page.locator('tr', { hasText: 'Notes app' }).textContent()).toMatch(/revoked/);

    for (const [link, coins, button, reason, notice] of [
      ['Top up purchased coins', '5', 'Top up', 'bank transfer', 'The coins were added.'],
      ['Grant subscription coins', '3', 'Grant subscription coins', 'annual plan', 'The subscription coins were granted.'],
    ] as const) {
      await page.getByRole('link', { name: link }).click();
      await page.getByRole('textbox', { name: /coins to add/i }).fill(coins);
      await confirm(page, reasonOf(reason), button);
      await page.waitForURL(/\?done=/);
      expect(await status()).toBe(notice);
    }
    expect(await page.locator('#balance').textContent()).toBe('58 coins · $0.06');

    const adjust = page.locator('#adjust');
    await adjust.getByLabel(/Coins/).fill('-1.5');
    await confirm(adjust, reasonOf('goodwill correction'), 'Adjust balance');
    await page.waitForURL(/done=adjusted$/);
    expect(await page.locator('#balance').textContent()).toBe('56.5 coins · $0.06');
  });

  it('each action is in the audit log with its reason', async () => {
    const rows = await auditRows();
    for (const [action, reason] of [
      ['key.revoke', 'leaked key'],
      ['app_connection.revoke', 'app revoked'],
      ['account.end_sessions', 'sessions ended'],
      ['account.disable', 'abuse report'],
      ['account.enable', 'report cleared'],
      ['wallet.top_up', 'bank transfer'],
      ['wallet.grant_subscription', 'annual plan'],
      ['wallet.adjust', 'goodwill correction'],
    ]) {
      expect(rows.some((r) => r.includes(action!) && r.includes(reasonOf(reason!))), action).toBe(true);
    }
    // Times for people, with the exact time in the title.
    const time = page.locator('#audit tbody tr').first().locator('time');
    expect(await time.textContent()).toMatch(/^\d{1,2} [A-Z][a-z]{2} \d{4}, \d{2}:\d{2} UTC$/);
    expect(await time.getAttribute('datetime')).toMatch(/^\d{4}-\d{2}-\d{2}T/);
  });

  it('a form without its reason or its confirmation is a 400 naming it, and nothing happens', async () => {
    const cookies = (await context.cookies()).map((c) => `${c.name}=${c.value}`).join('; ');
    const form = await (await fetch(`${served.base}/admin/accounts/${accountId}/disable`, { headers: { cookie: cookies } })).text();
    const post = (fields: Record<string, string>) =>
      fetch(`${served.base}/admin/accounts/${accountId}/disable`, {
        method: 'POST',
        redirect: 'manual',
        headers: { cookie: cookies, origin: served.base, 'content-type': 'application/x-www-form-urlencoded' },
        body: new URLSearchParams({ _csrf: csrfOf(form)!, ...fields }),
      });
    const unconfirmed = await post({ reason: 'no box ticked' });
    expect(unconfirmed.status).toBe(400);
    expect(await unconfirmed.text()).toMatch(/role="alert">Tick “I understand” to confirm/);
    const noReason = await post({ confirm: 'yes', reason: '  ' });
    expect(noReason.status).toBe(400);
    expect(await noReason.text()).toMatch(/role="alert">Reason:/);
    const [row] = await orm.em.fork().execute<{ disabled_at: Date | null }[]>('select disabled_at from accounts where id = ?', [accountId]);
    expect(row!.disabled_at).toBeNull();
  });
});

describe('the job page', () => {
  it('cancels a running job, with the Temporal UI link, and says so', async () => {
    await page.goto(`${served.base}/admin/jobs/${runningJob}`);
    expect(await page.getByRole('link', { name: 'This job in the Temporal UI' }).getAttribute('href')).toBe(`http://temporal-ui.test/namespaces/default/workflows/${runningJob}`);
    expect(await page.getByRole('button', { name: 'Refund job' }).count()).toBe(0);
    await confirm(page, reasonOf('stuck job'), 'Cancel job');
    await page.waitForURL(/done=canceled$/);
    expect(await status()).toBe('The job was canceled and its price refunded.');
    expect(await page.locator('#job-status').textContent()).toBe('canceled');
    expect(canceledWorkflows).toContain(runningJob);
  });

  it('refunds a succeeded job once: the form is gone afterwards', async () => {
    await page.goto(`${served.base}/admin/jobs/${succeededJob}`);
    expect(await page.getByRole('button', { name: 'Cancel job' }).count()).toBe(0);
    await confirm(page, reasonOf('bad result'), 'Refund job');
    await page.waitForURL(/done=refunded$/);
    expect(await status()).toBe('The job was refunded.');
    expect(await page.locator('#job-refund').textContent()).toMatch(/^2 coins · <\$0\.01, /);
    expect(await page.getByRole('button', { name: 'Refund job' }).count()).toBe(0);
  });

  it('a failed job offers no action and shows its whole error', async () => {
    await page.goto(`${served.base}/admin/jobs/${failedJob}`);
    expect(await page.locator('form.admin-action').count()).toBe(0);
    expect(await page.locator('.job-error-full').textContent()).toBe(LONG_ERROR);
    const rows = await auditRows();
    expect(rows.some((r) => r.includes('generation.cancel') && r.includes(reasonOf('stuck job')))).toBe(true);
    expect(rows.some((r) => r.includes('generation.refund') && r.includes(reasonOf('bad result')))).toBe(true);
  });
});

describe('the models pages', () => {
  it('lists the models with their state and prices, and edits, disables, enables, schedules and cancels a price change', async () => {
    await page.goto(`${served.base}/admin`);
    await page.getByRole('link', { name: 'Models' }).click();
    const row = page.locator('#models tr', { hasText: MODEL });
    expect(await row.textContent()).toMatch(/image.*enabled.*base 10/);
    await row.getByRole('link', { name: 'Admin pages image' }).click();
    await page.waitForURL(new RegExp(`/admin/models/${encodeURIComponent(MODEL)}$`));

    const edit = page.locator('#edit-model');
    await edit.getByLabel('Name').fill('Admin pages image, renamed');
    await edit.getByLabel('Job deadline (seconds)').fill('300');
    await edit.getByLabel('Expected job time (seconds)').fill('40');
    await confirm(edit, reasonOf('rename model'), 'Save model');
    await page.waitForURL(/done=updated$/);
    expect(await page.getByRole('heading', { level: 1 }).textContent()).toBe('Model Admin pages image, renamed');
    expect(await page.locator('dt', { hasText: 'Expected job time (seconds)' }).locator('xpath=following-sibling::dd[1]').textContent()).toBe('40');

    await confirm(page.locator('#disable-model'), reasonOf('provider outage'), 'Disable model');
    await page.waitForURL(/done=disabled$/);
    expect(await page.locator('#model-state').textContent()).toMatch(/^disabled since/);
    await confirm(page.locator('#enable-model'), reasonOf('provider back'), 'Enable model');
    await page.waitForURL(/done=enabled$/);
    expect(await page.locator('#model-state').textContent()).toBe('enabled');

    const next = new Date(Date.now() + 3 * 86_400_000);
    const local = next.toISOString().slice(0, 16);
    const prices = page.locator('#set-prices');
    await prices.getByLabel(/^Prices/).fill('{"base": 12}');
    await prices.getByLabel(/^Starts at/).fill(local);
    await confirm(prices, reasonOf('price rise'), 'Schedule prices');
    await page.waitForURL(/done=prices_set$/);
    expect(await page.locator('#price-schedule').textContent()).toMatch(/base 12/);
    expect(await page.locator('#model-prices').textContent()).toMatch(/^base 10/);

    await page.getByRole('link', { name: /^Cancel the change from / }).click();
    await confirm(page, reasonOf('price rise dropped'), 'Cancel price change');
    await page.waitForURL(/done=prices_canceled$/);
    expect(await page.locator('#price-schedule').count()).toBe(0);

    const rows = await auditRows();
    for (const [action, reason] of [
      ['model.update', 'rename model'],
      ['model.disable', 'provider outage'],
      ['model.enable', 'provider back'],
      ['model.set_prices', 'price rise'],
      ['model.cancel_prices', 'price rise dropped'],
    ]) {
      expect(rows.some((r) => r.includes(reasonOf(reason!))), action).toBe(true);
    }
  });

  it('bad prices come back as a 400 naming the field, the form kept', async () => {
    await page.goto(`${served.base}/admin/models/${encodeURIComponent(MODEL)}`);
    const prices = page.locator('#set-prices');
    await prices.getByLabel(/^Prices/).fill('{"base": ');
    await confirm(prices, reasonOf('typo'), 'Schedule prices');
    expect(await page.getByRole('alert').first().textContent()).toMatch(/^Prices: not valid JSON/);
    const field = page.getByRole('textbox', { name: /^Prices \(in-app/ });
    expect(await field.inputValue()).toBe('{"base": ');
    // The error is beside the field too, and the field says so to a screen reader.
    expect(await field.getAttribute('aria-invalid')).toBe('true');
    expect(await page.locator(`#${await field.getAttribute('aria-describedby')}`).textContent()).toMatch(/^Prices: not valid JSON/);
    // A missing reason: beside the reason's field.
    // The page is now the action's own confirmation page, with its one form.
    const again = page.locator('form.admin-action');
    await field.fill('{}');
    await again.getByRole('textbox', { name: /^Reason/ }).fill('');
    await again.getByRole('checkbox').check();
    // The browser would stop an empty required field itself: this is what a form sent anyway gets.
    await again.evaluate((form) => {
      const f = form as unknown as { noValidate: boolean; requestSubmit(): void };
      f.noValidate = true;
      f.requestSubmit();
    });
    await page.waitForLoadState();
    const reason = page.getByRole('textbox', { name: /^Reason/ });
    expect(await reason.getAttribute('aria-invalid')).toBe('true');
    expect(await page.locator('#reason-error').textContent()).toBe('Reason: say why, for the audit log.');
  });
});

describe('the admins page', () => {
  it('creates an admin with a reason and a confirmation, shows their one-time link once, and audits it', async () => {
    const email = uniqueEmail('newadmin');
    await page.goto(`${served.base}/admin`);
    await page.getByRole('link', { name: 'Admins' }).click();
    const form = page.locator('#create-admin');
    await form.getByLabel('Email').fill(email);
    await form.getByRole('combobox', { name: 'Role' }).selectOption('viewer');
    await confirm(form, reasonOf('new support colleague'), 'Create admin');
    const link = await page.locator('#admin-link').textContent();
    expect(link).toMatch(/^\/admin\/login\/link\?token=mas_/);
    expect(await page.locator('#admins tr', { hasText: email }).textContent()).toMatch(/viewer.*link not used yet/);
    // Shown once: the page again has no link.
    await page.goto(`${served.base}/admin/admins`);
    expect(await page.locator('#admin-link').count()).toBe(0);
    // The link signs the new admin in (another browser).
    const other = new CookieBrowser(served.base);
    const linkPage = await (await other.fetch(link!)).text();
    const token = new URL(link!, served.base).searchParams.get('token')!;
    expect((await other.post('/admin/login/link', { _csrf: csrfOf(linkPage)!, token, new_password: 'a long new admin passphrase' })).status).toBe(303);
    const rows = await auditRows();
    expect(rows.some((r) => r.includes('admin_user.create') && r.includes(reasonOf('new support colleague')))).toBe(true);
  });
});

describe('the job search', () => {
  it('finds an account’s failed jobs by e-mail, 25 a page, and pages on with the cursor', async () => {
    await page.goto(`${served.base}/admin/jobs`);
    await page.getByLabel('Account (id or e-mail)').fill(accountEmail);
    await page.getByLabel('Status').selectOption('failed');
    await page.getByRole('button', { name: 'Search' }).click();
    const first = await page.locator('table.jobs tbody tr').allTextContents();
    expect(first).toHaveLength(25);
    for (const r of first) expect(r).toContain(accountEmail.slice(0, 20));
    // The error is short in the table: its code and the start of its message.
    expect(first[0]).toMatch(/upstream_error The provider failed: upstream-said-no-.*…/);
    await page.getByRole('link', { name: 'Next page' }).click();
    const second = await page.locator('table.jobs tbody tr').allTextContents();
    expect(second).toHaveLength(5);
    expect(second.filter((r) => first.includes(r))).toEqual([]);
    expect(await page.getByRole('link', { name: 'Next page' }).count()).toBe(0);
    await page.getByRole('link', { name: 'First page' }).click();
    expect(await page.locator('table.jobs tbody tr').count()).toBe(25);
  });

  it('filters by account id, model, status and dates', async () => {
    const count = async (q: Record<string, string>) => {
      await page.goto(`${served.base}/admin/jobs?${new URLSearchParams(q).toString()}`);
      return page.locator('table.jobs tbody tr').count();
    };
    expect(await count({ account: otherId })).toBe(2);
    expect(await count({ account: otherId, model: 'mas/audio-demo' })).toBe(2);
    expect(await count({ account: otherId, model: 'mas/image-demo' })).toBe(0);
    expect(await count({ account: accountId, status: 'succeeded' })).toBe(1);
    expect(await count({ account: runnerId, status: 'canceled' })).toBe(1);
    expect(await count({ account: runnerId, status: 'running' })).toBe(0);
    const today = new Date().toISOString().slice(0, 10);
    const tomorrow = new Date(Date.now() + 86_400_000).toISOString().slice(0, 10);
    expect(await count({ account: otherId, from: today, to: today })).toBe(2);
    expect(await count({ account: otherId, from: tomorrow })).toBe(0);
    expect(await page.getByText('No jobs match.').isVisible()).toBe(true);
    await count({ account: `nobody-${tag}@example.com` });
    expect(await page.getByRole('alert').textContent()).toMatch(/No account has the e-mail nobody-/);
  });

  it('a bad filter is a 400 naming it', async () => {
    for (const [q, field] of [
      ['status=exploded', 'Status'],
      ['from=yesterday', 'From'],
    ]) {
      const res = await page.goto(`${served.base}/admin/jobs?${q}`);
      expect(res!.status(), q).toBe(400);
      expect(await page.getByRole('alert').textContent()).toMatch(new RegExp(`^${field}:`));
    }
  });
});

describe('a viewer', () => {
  let viewer: CookieBrowser;
  beforeAll(async () => {
    const created = await internal().admin.users.create({ email: uniqueEmail('viewer'), role: 'viewer' });
    viewer = new CookieBrowser(served.base);
    const link = await (await viewer.fetch(`/admin/login/link?token=${encodeURIComponent(created.login_token!)}`)).text();
    expect((await viewer.post('/admin/login/link', { _csrf: csrfOf(link)!, token: created.login_token!, new_password: 'a long viewer passphrase 2026' })).status).toBe(303);
  });

  it('sees no action form and no action link on any page, and is told why', async () => {
    for (const path of [`/admin/accounts/${accountId}`, `/admin/jobs/${succeededJob}`, `/admin/jobs/${runningJob}`, `/admin/models/${encodeURIComponent(MODEL)}`, '/admin/models', '/admin/admins']) {
      const res = await viewer.fetch(path);
      expect(res.status, path).toBe(200);
      const body = await res.text();
      const forms = [...body.matchAll(/<form method="post" action="([^"]+)"/g)].map((m) => m[1]);
      expect(forms, path).toEqual(['/admin/logout']);
      expect(body, path).not.toMatch(/Revoke key|Disable the account|Adjust balance|Cancel job|Refund job|Save model|Create admin/);
      expect(body, path).toContain(VIEWER_REFUSAL);
    }
  });

  it('a confirmation page or a direct POST gets a 403 in the pages’ words, and nothing happens', async () => {
    const confirmPage = await viewer.fetch(`/admin/accounts/${accountId}/disable`);
    expect(confirmPage.status).toBe(403);
    const html = await confirmPage.text();
    expect(html).toContain(`role="alert">${VIEWER_REFUSAL}</p>`);
    for (const [path, fields] of [
      [`/admin/accounts/${accountId}/adjust`, { coins: '+1', idempotency_key: `k-${tag}` }],
      [`/admin/accounts/${accountId}/disable`, {}],
      [`/admin/jobs/${failedJob}/refund`, {}],
      [`/admin/models/${encodeURIComponent(MODEL)}/disable`, {}],
      ['/admin/admins', { email: uniqueEmail('byviewer'), role: 'operator' }],
    ] as const) {
      const res = await viewer.post(path, { _csrf: csrfOf(html)!, reason: 'should not happen', confirm: 'yes', ...fields });
      expect(res.status, path).toBe(403);
      const text = await res.text();
      expect(text, path).toContain(`role="alert">${VIEWER_REFUSAL}</p>`);
      expect(text, path).not.toMatch(/admin token|operator role/);
    }
    const [row] = await orm.em.fork().execute<{ disabled_at: Date | null }[]>('select disabled_at from accounts where id = ?', [accountId]);
    expect(row!.disabled_at).toBeNull();
  });
});

// Every admin page is measured at 390 and 1280 px, and checked by axe, in test/browser/page-walk.test.ts.
describe('the failed-jobs table', () => {
  it('fits the page itself at 1280×800, with no scrolling in its box', async () => {
    await page.setViewportSize({ width: 1280, height: 800 });
    await page.goto(`${served.base}/admin/jobs?status=failed`);
    await shotAndInspect(page, 'admin-jobs-failed-1280.png');
    const fit = await page.locator('table.jobs').evaluate((t) => ({ table: t.getBoundingClientRect().width, box: t.parentElement!.clientWidth }));
    expect(fit.table).toBeLessThanOrEqual(fit.box);
  });
});

