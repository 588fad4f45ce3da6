import { randomBytes } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import Stripe from 'stripe';
import type { MikroORM } from '@mikro-orm/postgresql';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createProviderRegistry } from '../../adapters/providers/registry.ts';
import type { RunningStripeMock } from '../../adapters/embedded/stripe-mock.ts';
import { seedModels, validateCatalog } from '../../core/catalog/catalog.ts';
import type { CoreDeps } from '../../core/context.ts';
import type { CheckoutLink, TopUpCheckoutRequest } from '../../core/ports.ts';
import { launchChromium, shotAndInspect, tabTo } from '../support/browser.ts';
import { TEST_CATALOG } from '../support/catalog.ts';
import { openTestOrm, testDeps, uniqueEmail } from '../support/db.ts';
import { createTestApp } from '../support/http.ts';
import { startTestStripeMock } from '../support/stripe-mock.ts';
import { testMailbox } from '../support/mail.ts';
import { confirmInBrowser } from '../support/sign-up.ts';

/**
 * "Add credits" in a real Chromium, against stripe-mock as Stripe: the form makes a Checkout
 * Session and sends the browser to Stripe (stopped at the door: Stripe's page is not loaded),
 * the success page waits, the signed webhook credits, the page shows the coins, and a
 * paid-only model answers. And the same pages with payments off.
 */
const SECRET = 'whsec_test_payments_pages';
const PASSWORD = 'correct horse battery staple 42';
let orm: MikroORM;
let mock: RunningStripeMock;
let browser: Browser;
const servers: Server[] = [];
let on: { base: string; deps: CoreDeps };
let off: { base: string };
/** The Checkout Sessions the pages made: the real Stripe adapter's answers, watched. */
const made: { request: TopUpCheckoutRequest; link: CheckoutLink }[] = [];

async function serveApp(env: Record<string, string>): Promise<{ base: string; deps: CoreDeps }> {
  const server = await new Promise<Server>((resolve) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => resolve(s));
  });
  servers.push(server);
  const base = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  const deps = testDeps(orm, {
    env,
    publicBaseUrl: base,
    providers: createProviderRegistry({ local: { kind: 'local' } }),
    plans: [{ name: 'Starter', priceId: 'price_starter', coinsPerPeriod: 10_000n * 1_000_000n }],
  });
  server.on('request', createTestApp({ deps, publicBaseUrl: base }));
  return { base, deps };
}

beforeAll(async () => {
  orm = await openTestOrm();
  // A paid-only model that answers (the local echo provider).
  const premium = TEST_CATALOG.models.find((m) => m.id === 'test/local')!;
  await seedModels(orm.em.fork(), validateCatalog({ ...TEST_CATALOG, models: [...TEST_CATALOG.models, { ...premium, id: 'test/paid-local', name: 'Paid local', paid_only: true }] }, 50n));
  mock = await startTestStripeMock();
  on = await serveApp({ STRIPE_SECRET_KEY: 'sk_test_PaymentsPages', STRIPE_WEBHOOK_SECRET: SECRET, STRIPE_API_URL: mock.url, SIGNUP: 'open' });
  const real = on.deps.payments!;
  on.deps.payments = {
    ...real,
    async checkoutTopUp(request) {
      const link = await real.checkoutTopUp(request);
      made.push({ request, link });
      return link;
    },
  };
  off = await serveApp({ SIGNUP: 'open' });
  browser = await launchChromium();
});
afterAll(async () => {
  await browser?.close();
  for (const s of servers) {
    s.closeAllConnections();
    await new Promise((r) => s.close(r));
  }
  await mock?.stop();
  await orm?.close();
});

const shot = (page: Page, name: string) => shotAndInspect(page, name);

async function signUp(context: BrowserContext, base: string): Promise<Page> {
  const page = await context.newPage();
  await page.goto(`${base}/signup`);
  const email = uniqueEmail('payments');
  await page.getByLabel('Email').fill(email);
  await page.getByLabel(/Password/).fill(PASSWORD);
  await page.getByRole('button', { name: 'Create account' }).click();
  await confirmInBrowser(page, base, email);
  return page;
}

/** checkout.session.completed for the session, paid, signed as Stripe signs it, over HTTP. */
async function deliverCompleted(base: string, link: CheckoutLink, accountId: string, cents: number) {
  const payload = JSON.stringify({
    id: `evt_test_${randomBytes(8).toString('hex')}`,
    object: 'event',
    type: 'checkout.session.completed',
    created: Math.floor(Date.now() / 1000),
    data: {
      object: {
        id: link.id,
        object: 'checkout.session',
        mode: 'payment',
        client_reference_id: accountId,
        metadata: { mas_account_id: accountId, mas_purpose: 'topup' },
        payment_status: 'paid',
        amount_total: cents,
        currency: 'usd',
        customer: 'cus_test_pages',
        payment_intent: `pi_test_${randomBytes(8).toString('hex')}`,
      },
    },
  });
  const res = await fetch(`${base}/webhooks/stripe`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'stripe-signature': Stripe.webhooks.generateTestHeaderString({ payload, secret: SECRET }) },
    body: payload,
  });
  expect(res.status).toBe(200);
  expect(((await res.json()) as { outcome: string }).outcome).toBe('credited');
}

const chat = (base: string, key: string) =>
  fetch(`${base}/api/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'test/paid-local', messages: [{ role: 'user', content: 'hello' }] }),
  });

describe('Add credits, with payments on', () => {
  it('pays through Stripe Checkout, waits on the success page until the webhook credits, then the coins, the history and a paid-only model', async () => {
    const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
    const page = await signUp(context, on.base);
    const stripePages: string[] = [];
    // Stripe's own page is never loaded: the browser is stopped at its door.
    await context.route('https://checkout.stripe.com/**', (route) => {
      stripePages.push(route.request().url());
      return route.fulfill({ status: 200, contentType: 'text/html', body: '<!doctype html><title>Stripe Checkout (not loaded in tests)</title>' });
    });

    // An API key, and the paid-only model refused before any payment.
    await page.goto(`${on.base}/account/keys`);
    await page.getByLabel('Name', { exact: true }).fill('server');
    await page.getByRole('button', { name: 'Create key' }).click();
    const key = (await page.locator('#new-key').textContent())!;
    expect((await chat(on.base, key)).status).toBe(403);

    await page.goto(`${on.base}/account/billing`);
    await expect(page.getByRole('heading', { name: 'Add credits' }).isVisible()).resolves.toBe(true);
    // Rendered by the server for the amount it fills in, then kept live by the page's script.
    await expect(page.locator('#coins-preview').textContent()).resolves.toBe('20,000');
    await page.getByLabel(/Amount in US dollars/).fill('12.34');
    await expect(page.locator('#coins-preview').textContent()).resolves.toBe('12,340');
    await expect(page.getByRole('button', { name: 'Subscribe to Starter' }).isVisible()).resolves.toBe(true);
    await shot(page, 'payments-overview-1280.png');
    await page.setViewportSize({ width: 390, height: 844 });
    await shot(page, 'payments-overview-390.png');
    // Nothing wider than a phone: no sideways scrolling.
    const root = page.locator('html');
    const [scroll, client] = await Promise.all([root.evaluate((e) => e.scrollWidth), root.evaluate((e) => e.clientWidth)]);
    expect(scroll).toBeLessThanOrEqual(client);
    await page.setViewportSize({ width: 1280, height: 800 });

    // An amount under the minimum: the page again, naming the problem, nothing asked of Stripe.
    await page.getByLabel(/Amount in US dollars/).fill('4.99');
    await page.getByRole('button', { name: 'Pay with Stripe' }).click();
    await expect(page.getByRole('alert').textContent()).resolves.toBe('The amount must be at least 5.00 USD.');
    expect(made).toHaveLength(0);

    await page.getByLabel(/Amount in US dollars/).fill('12.34');
    await page.getByRole('button', { name: 'Pay with Stripe' }).click();
    await page.waitForURL(/^https:\/\/checkout\.stripe\.com\//);
    expect(made).toHaveLength(1);
    const { request, link } = made[0]!;
    expect(stripePages).toEqual([link.url]);
    expect(request).toMatchObject({ amountCents: 1234, currency: 'usd', successUrl: `${on.base}/account/credits/success?session_id={CHECKOUT_SESSION_ID}` });
    expect(request.idempotencyKey).toMatch(new RegExp(`^topup:${request.accountId}:`));

    // Stripe would send the person back here; nothing is credited until the webhook.
    await page.goto(`${on.base}/account/credits/success?session_id=${link.id}`);
    await expect(page.getByRole('status').textContent()).resolves.toMatch(/^Payment received, crediting…/);
    await expect(page.locator('main').getAttribute('data-poll-seconds')).resolves.toBe('2');
    await expect(page.locator('meta[http-equiv="refresh"]').count()).resolves.toBe(0);
    await shot(page, 'payments-success-waiting-1280.png');
    await page.reload();
    await expect(page.getByRole('status').textContent()).resolves.toMatch(/^Payment received, crediting…/);

    await deliverCompleted(on.base, link, request.accountId, 1234);
    // The page asks again every 2 s (wait.js) and shows the credit in place; with no script, its link does.
    await page.getByText('12,340 coins were added to your account for $12.34.').waitFor({ timeout: 15_000 });
    await expect(page.locator('main').getAttribute('data-poll-seconds')).resolves.toBe(null);
    await shot(page, 'payments-success-credited-1280.png');

    await page.goto(`${on.base}/account`);
    await expect(page.locator('.card', { hasText: 'Spendable' }).textContent()).resolves.toMatch(/12,340 coins\s*\$12\.34/);
    await expect(page.getByText('This is a paid account').isVisible()).resolves.toBe(true);
    await page.goto(`${on.base}/account/billing`);
    await expect(page.getByText(/\$12\.34 for 12,340 coins · \$12\.34/).isVisible()).resolves.toBe(true);
    await page.goto(`${on.base}/account/usage`);
    // The history says what the top-up was: the card payment, in USD, with its receipt.
    const row = page.getByRole('row').filter({ hasText: 'Card payment of 12.34 USD' });
    await expect(row.getByRole('link', { name: 'Receipt' }).getAttribute('href')).resolves.toMatch(/^https:\/\/.+\/receipts\//);
    await expect(row.textContent()).resolves.toContain('12,340');
    await shot(page, 'payments-usage-1280.png');
    const csv = await page.request.get(`${on.base}/account/usage.csv`);
    expect(await csv.text()).toMatch(new RegExp(`,topup,Top-up,12340,12340,${link.id},,https://`));

    // The first top-up made the account paid: the paid-only model answers.
    const answer = await chat(on.base, key);
    expect(answer.status).toBe(200);
    await context.close();
  });

  it('a canceled payment comes back to the overview with a notice; a bad session id is a 400 page', async () => {
    const context = await browser.newContext({ viewport: { width: 390, height: 844 } });
    const page = await signUp(context, on.base);
    // A return address of a session made before the account page was split still lands on Billing.
    await page.goto(`${on.base}/account?checkout=canceled`);
    await page.waitForURL(/\/account\/billing\?checkout=canceled$/);
    await expect(page.getByRole('status').first().textContent()).resolves.toBe('The payment was canceled: nothing was charged.');
    const bad = await page.goto(`${on.base}/account/credits/success?session_id=${encodeURIComponent('<b>x</b>')}`);
    expect(bad!.status()).toBe(400);
    await expect(page.getByRole('alert').textContent()).resolves.toMatch(/session_id/);
    const missing = await page.goto(`${on.base}/account/credits/success`);
    expect(missing!.status()).toBe(400);
    await context.close();
  });
});

describe('Add credits without JavaScript', () => {
  it('shows the coins for the amount it fills in, and a form sent twice makes one Checkout Session (one idempotency key per form)', async () => {
    const context = await browser.newContext({ viewport: { width: 390, height: 844 }, javaScriptEnabled: false });
    const page = await signUp(context, on.base);
    await page.goto(`${on.base}/account/billing`);
    await expect(page.locator('#coins-preview').textContent()).resolves.toBe('20,000');
    const form = page.locator('#add-credits-form');
    const fields = {
      _csrf: (await form.locator('input[name="_csrf"]').getAttribute('value'))!,
      idempotency_key: (await form.locator('input[name="idempotency_key"]').getAttribute('value'))!,
      amount_usd: '7.50',
    };
    const before = made.length;
    for (let i = 0; i < 2; i++) {
      const res = await page.request.post(`${on.base}/account/credits`, { form: fields, headers: { origin: on.base }, maxRedirects: 0 });
      expect(res.status()).toBe(303);
      expect(res.headers().location).toMatch(/^https:\/\/checkout\.stripe\.com\//);
    }
    const sent = made.slice(before);
    expect(sent.map((m) => m.request.amountCents)).toEqual([750, 750]);
    expect(sent[1]!.request.idempotencyKey).toBe(sent[0]!.request.idempotencyKey);
    // Not an amount: the form again, 400, naming the field; never a 500.
    const bad = await page.request.post(`${on.base}/account/credits`, { form: { ...fields, amount_usd: 'ten dollars' }, headers: { origin: on.base }, maxRedirects: 0 });
    expect(bad.status()).toBe(400);
    expect(await bad.text()).toMatch(/amount_usd/);
    const noPlan = await page.request.post(`${on.base}/account/subscribe`, { form: { _csrf: fields._csrf, plan: 'Gold' }, headers: { origin: on.base }, maxRedirects: 0 });
    expect(noPlan.status()).toBe(400);
    expect(await noPlan.text()).toContain('There is no plan named &quot;Gold&quot;');
    const noCustomer = await page.request.post(`${on.base}/account/billing/portal`, { form: { _csrf: fields._csrf }, headers: { origin: on.base }, maxRedirects: 0 });
    expect(noCustomer.status()).toBe(409);
    expect(await noCustomer.text()).toContain('has not paid through Stripe yet');
    await context.close();
  });
});

describe('Plan, with payments on', () => {
  it('Subscribe goes to Checkout; once the first invoice is paid the plan shows its next renewal, and Manage billing goes to the portal', async () => {
    const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
    const page = await signUp(context, on.base);
    const stripePages: string[] = [];
    await context.route('https://checkout.stripe.com/**', (route) => {
      stripePages.push(route.request().url());
      return route.fulfill({ status: 200, contentType: 'text/html', body: '<!doctype html><title>Stripe Checkout (not loaded in tests)</title>' });
    });
    const email = (await page.locator('.signout span').textContent())!.trim();
    await page.goto(`${on.base}/account/billing`);
    await expect(page.getByRole('button', { name: 'Manage billing' }).count()).resolves.toBe(0);
    await page.getByRole('button', { name: 'Subscribe to Starter' }).click();
    await page.waitForURL(/^https:\/\/checkout\.stripe\.com\//);
    expect(stripePages).toHaveLength(1);

    // Stripe's first invoice of the subscription, signed and delivered: the plan's grant.
    const me = await (await page.request.get(`${on.base}/account/billing`)).text();
    expect(me).toContain('Subscribe to Starter');
    const accountId = (await orm.em.fork().execute<{ id: string }[]>('select id from accounts where email = ?', [email]))[0]!.id;
    const periodEnd = Date.UTC(2031, 0, 15) / 1000;
    const payload = JSON.stringify({
      id: `evt_test_${randomBytes(8).toString('hex')}`,
      object: 'event',
      type: 'invoice.paid',
      created: Math.floor(Date.now() / 1000),
      data: {
        object: {
          id: `in_test_${randomBytes(8).toString('hex')}`,
          object: 'invoice',
          amount_paid: 1000,
          currency: 'usd',
          customer: 'cus_test_plan',
          parent: { subscription_details: { subscription: `sub_test_${randomBytes(8).toString('hex')}`, metadata: { mas_account_id: accountId, mas_purpose: 'subscription' } } },
          lines: { data: [{ period: { start: periodEnd - 30 * 86_400, end: periodEnd }, pricing: { price_details: { price: 'price_starter' } } }] },
        },
      },
    });
    const hook = await fetch(`${on.base}/webhooks/stripe`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'stripe-signature': Stripe.webhooks.generateTestHeaderString({ payload, secret: SECRET }) },
      body: payload,
    });
    expect(((await hook.json()) as { outcome: string }).outcome).toBe('credited');

    await page.goto(`${on.base}/account/billing`);
    const facts = page.locator('dl.facts');
    await expect(facts.textContent()).resolves.toMatch(/Plan\s*Starter\s*Status\s*active\s*Price\s*10,000 coins each period[^]*Next renewal\s*15 Jan 2031, \d\d:\d\d UTC/);
    await expect(page.getByRole('button', { name: /Subscribe/ }).count()).resolves.toBe(0);
    await expect(page.locator('.card', { hasText: 'Spendable' }).textContent()).resolves.toMatch(/10,000 coins\s*\$10\.00/);
    await shot(page, 'payments-plan-1280.png');
    await page.setViewportSize({ width: 390, height: 844 });
    await shot(page, 'payments-plan-390.png');

    // Manage billing: a 303 to Stripe's customer portal (not followed: stripe-mock's portal address is not a real page).
    const csrf = await page.locator('form[action="/account/billing/portal"] input[name="_csrf"]').getAttribute('value');
    const portal = await page.request.post(`${on.base}/account/billing/portal`, { form: { _csrf: csrf! }, headers: { origin: on.base }, maxRedirects: 0 });
    expect(portal.status()).toBe(303);
    expect(portal.headers().location).toMatch(/^https:\/\//);
    await context.close();
  });
});

describe('payments off (no STRIPE_SECRET_KEY)', () => {
  it('the overview says so and shows no payment form', async () => {
    const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
    const page = await signUp(context, off.base);
    await expect(page.getByText('Payments are not set up on this server.').isVisible()).resolves.toBe(true);
    await expect(page.locator('form[action="/account/credits"], form[action="/account/subscribe"], form[action="/account/billing/portal"]').count()).resolves.toBe(0);
    await expect(page.getByRole('link', { name: 'Settings' }).isVisible()).resolves.toBe(true);
    await shot(page, 'payments-off-1280.png');
    await page.setViewportSize({ width: 390, height: 844 });
    await shot(page, 'payments-off-390.png');
    await context.close();
  });
});

/**
 * Every flow works by keyboard alone (issue 34): sign up, create a key, revoke it, add credits.
 * The focus only moves by Tab, fields are typed into, and buttons and links are pressed with
 * Enter or Space; no click, no fill, no goto past the first page and the mailed link.
 */
describe('by keyboard alone', () => {
  it('signs up, confirms, creates a key, revokes it and goes to pay', async () => {
    const context = await browser.newContext({ viewport: { width: 390, height: 844 } });
    const page = await context.newPage();
    await page.route('https://checkout.stripe.com/**', (route) => route.fulfill({ status: 200, contentType: 'text/html', body: '<!doctype html><title>Stripe Checkout (not loaded in tests)</title>' }));
    const email = uniqueEmail('keyboard');

    await page.goto(`${on.base}/signup`);
    await tabTo(page, page.getByLabel('Email'));
    await page.keyboard.type(email);
    await tabTo(page, page.getByLabel(/Password/));
    await page.keyboard.type(PASSWORD);
    await page.keyboard.press('Enter');
    await page.waitForURL(/\/signup\/sent$/);
    const link = new URL((await testMailbox.next(email)).link!);
    await page.goto(`${on.base}${link.pathname}${link.search}`);
    await tabTo(page, page.getByRole('button', { name: 'Confirm and sign in' }));
    await page.keyboard.press('Enter');
    await page.waitForURL(/\/account\?verified=1$/);

    // On a phone the account's links are in the header's menu (a <details>): Tab to it, open it with Enter, Tab on.
    const menuTo = async (name: string) => {
      await tabTo(page, page.locator('summary', { hasText: 'Menu' }));
      await page.keyboard.press('Enter');
      await tabTo(page, page.getByRole('link', { name, exact: true }));
    };
    await menuTo('API keys');
    await page.keyboard.press('Enter');
    await page.waitForURL(/\/account\/keys$/);
    await tabTo(page, page.getByLabel('Name', { exact: true }));
    await page.keyboard.type('keyboard');
    await tabTo(page, page.getByRole('button', { name: 'Create key' }));
    await page.keyboard.press('Space');
    await page.waitForURL(/\/account\/keys/);
    const key = (await page.locator('#new-key').textContent())!;
    expect(key).toMatch(/^mas_/);

    await tabTo(page, page.getByRole('link', { name: 'Revoke key keyboard' }));
    await page.keyboard.press('Enter');
    await page.waitForURL(/\/revoke$/);
    await tabTo(page, page.getByRole('button', { name: 'Revoke the key' }));
    await page.keyboard.press('Enter');
    await page.waitForURL(/\/account\/keys$/);
    expect((await fetch(`${on.base}/api/v1/models`, { headers: { authorization: `Bearer ${key}` } })).status).toBe(401);

    await menuTo('Billing');
    await page.keyboard.press('Enter');
    await page.waitForURL(/\/account\/billing$/);
    await tabTo(page, page.getByLabel(/Amount in US dollars/));
    await page.keyboard.press('ControlOrMeta+A');
    await page.keyboard.type('7.50');
    await tabTo(page, page.getByRole('button', { name: 'Pay with Stripe' }));
    // The browser sets off for Stripe's page. (Playwright's route does not catch a navigation a key
    // press starts, as it does a click's, so the request itself is the proof; Stripe's page is
    // never loaded either way.)
    const toStripe = page.waitForRequest((r) => r.url().startsWith('https://checkout.stripe.com/'));
    await page.keyboard.press('Enter');
    const request = await toStripe;
    expect(made.at(-1)!.request.amountCents).toBe(750);
    expect(request.url()).toBe(made.at(-1)!.link.url);
    await context.close();
  });
});
