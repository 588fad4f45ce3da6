import { randomBytes } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { MikroORM } from '@mikro-orm/postgresql';
import OpenAI from 'openai';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import Stripe from 'stripe';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunningStripeMock } from '../../adapters/embedded/stripe-mock.ts';
import { createProviderRegistry } from '../../adapters/providers/registry.ts';
import { seedModels, validateCatalog } from '../../core/catalog/catalog.ts';
import type { CoreDeps } from '../../core/context.ts';
import type { CheckoutLink, TopUpCheckoutRequest } from '../../core/ports.ts';
import { launchChromium, shotAndInspect } from '../support/browser.ts';
import { TEST_CATALOG } from '../support/catalog.ts';
import { openTestOrm, testDeps, uniqueEmail } from '../support/db.ts';
import { createTestApp } from '../support/http.ts';
import { testMailbox } from '../support/mail.ts';
import { confirmInBrowser } from '../support/sign-up.ts';
import { startTestStripeMock } from '../support/stripe-mock.ts';

/**
 * Issue 49's full path, as two people live it in Chromium against one server (stripe-mock as
 * Stripe): an owner signs up, creates an organization and invites a second person by e-mail;
 * the second person signs up and accepts from the mailed link; the owner tops the organization
 * up through Stripe Checkout (the signed webhook credits it); the member switches the pages to
 * the organization's wallet, creates a key there and chats with it through the official openai
 * client: the organization's balance drops by the charge, the member's own does not, and the
 * organization's history names the member.
 */
const SECRET = 'whsec_test_organization_full_path';
const PASSWORD = 'a team shares one wallet 49';
let orm: MikroORM;
let mock: RunningStripeMock;
let browser: Browser;
let server: Server;
let base: string;
let deps: CoreDeps;
const made: { request: TopUpCheckoutRequest; link: CheckoutLink }[] = [];

beforeAll(async () => {
  orm = await openTestOrm();
  await seedModels(orm.em.fork(), validateCatalog(TEST_CATALOG, 50n));
  mock = await startTestStripeMock();
  server = await new Promise<Server>((resolve) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => resolve(s));
  });
  base = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  deps = testDeps(orm, {
    env: { STRIPE_SECRET_KEY: 'sk_test_OrganizationFullPath', STRIPE_WEBHOOK_SECRET: SECRET, STRIPE_API_URL: mock.url, SIGNUP: 'open' },
    publicBaseUrl: base,
    providers: createProviderRegistry({ local: { kind: 'local' } }),
  });
  const real = deps.payments!;
  deps.payments = {
    ...real,
    async checkoutTopUp(request) {
      const link = await real.checkoutTopUp(request);
      made.push({ request, link });
      return link;
    },
  };
  server.on('request', createTestApp({ deps, publicBaseUrl: base }));
  browser = await launchChromium();
});
afterAll(async () => {
  await browser?.close();
  server?.closeAllConnections();
  await new Promise((r) => server?.close(r));
  await mock?.stop();
  await orm?.close();
});

async function signUp(context: BrowserContext, email: string): Promise<Page> {
  const page = await context.newPage();
  await page.goto(`${base}/signup`);
  await page.getByLabel('Email').fill(email);
  await page.getByLabel(/Password/).fill(PASSWORD);
  await page.getByRole('button', { name: 'Create account' }).click();
  await confirmInBrowser(page, base, email);
  return page;
}

/** checkout.session.completed for the Checkout Session the pages made, paid, signed as Stripe signs it. */
async function deliverCompleted(request: TopUpCheckoutRequest, link: CheckoutLink) {
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
        client_reference_id: request.accountId,
        metadata: { mas_account_id: request.accountId, mas_purpose: 'topup', mas_organization_id: request.accountId },
        payment_status: 'paid',
        amount_total: request.amountCents,
        currency: 'usd',
        customer: 'cus_test_organization',
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

const personalCoins = async (email: string) => {
  const [row] = await orm.em.fork().execute<{ coins: string }[]>(
    `select (w.subscription_micro + w.purchased_micro)::text as coins from wallets w join accounts a on a.id = w.account_id where lower(a.email) = lower(?) and a.kind = 'person'`,
    [email],
  );
  return BigInt(row!.coins);
};

describe('an organization, from sign-up to a member’s chat', () => {
  it('owner signs up, creates and invites; the member accepts from the mail; the owner tops up through Stripe; the member’s chat is paid by the organization', async () => {
    const ownerEmail = uniqueEmail('org-owner');
    const memberEmail = uniqueEmail('org-member');
    const ownerContext = await browser.newContext({ viewport: { width: 1280, height: 800 } });
    await ownerContext.route('https://checkout.stripe.com/**', (route) => route.fulfill({ status: 200, contentType: 'text/html', body: '<!doctype html><title>Stripe Checkout (not loaded in tests)</title>' }));
    const owner = await signUp(ownerContext, ownerEmail);

    // The owner creates the organization and invites the second person by e-mail.
    await owner.goto(`${base}/account/organizations`);
    await owner.getByLabel(/^Name/).fill('Acme research');
    await owner.getByRole('button', { name: 'Create organization' }).click();
    await owner.waitForURL(/\/account\/organizations\/org_[0-9A-Za-z]+/);
    const orgId = /\/account\/organizations\/(org_[0-9A-Za-z]+)/.exec(owner.url())![1]!;
    await owner.getByLabel(/^E-mail address/).fill(memberEmail);
    await owner.getByRole('button', { name: 'Send invitation' }).click();
    await expect(owner.getByRole('cell', { name: memberEmail, exact: true }).first().isVisible()).resolves.toBe(true);

    // The invitation mail, as the service wrote it: its link opens /invitations/{token}.
    const invitation = testMailbox.to(memberEmail).find((m) => m.subject === 'You are invited to Acme research')!;
    expect(invitation.text).toContain(invitation.link!);
    const link = new URL(invitation.link!);
    expect(link.origin).toBe(base);
    expect(link.pathname).toMatch(/^\/invitations\/mas_invite_/);

    // The second person has no account yet: they sign up, then follow the mailed link and accept.
    const memberContext = await browser.newContext({ viewport: { width: 390, height: 844 } });
    const member = await signUp(memberContext, memberEmail);
    await member.goto(link.href);
    await member.getByRole('button', { name: 'Accept and join Acme research' }).click();
    await member.waitForURL(new RegExp(`/account/organizations/${orgId}`));
    await shotAndInspect(member, 'organization-full-path-member-390.png');

    // The owner adds credits to the organization's wallet through Stripe Checkout.
    await owner.goto(`${base}/account/billing?organization=${orgId}`);
    await owner.getByLabel(/Amount in US dollars/).fill('10');
    await owner.getByRole('button', { name: 'Pay with Stripe' }).click();
    await owner.waitForURL(/^https:\/\/checkout\.stripe\.com\//);
    expect(made).toHaveLength(1);
    const { request, link: checkout } = made[0]!;
    expect(request.accountId).toBe(orgId);
    await deliverCompleted(request, checkout);

    // The member switches the pages to the organization's wallet and makes a key there.
    await member.goto(`${base}/account/organizations/${orgId}`);
    await member.getByRole('button', { name: 'Use this wallet' }).click();
    await member.waitForURL(/\/account\/keys/);
    await member.getByLabel('Name', { exact: true }).fill('team key');
    await member.getByRole('button', { name: 'Create key' }).click();
    const key = (await member.locator('#new-key').textContent())!;
    expect(key).toMatch(/^mas_/);

    const memberBefore = await personalCoins(memberEmail);
    const ownerBefore = await personalCoins(ownerEmail);
    const client = new OpenAI({ baseURL: `${base}/api/v1`, apiKey: key, maxRetries: 0 });
    const before = (await fetch(`${base}/api/v1/balance`, { headers: { authorization: `Bearer ${key}` } }).then((r) => r.json())) as { coins: number };
    expect(before.coins).toBe(10_000);
    const { data: completion, response } = await client.chat.completions.create({ model: 'test/local', messages: [{ role: 'user', content: 'hello, team' }] }).withResponse();
    expect(response.status).toBe(200);
    const charged = (completion.usage as unknown as { cost_coins: number }).cost_coins;
    expect(charged).toBeGreaterThan(0);

    // The organization paid; neither person's own wallet moved; the history names the member.
    const after = (await fetch(`${base}/api/v1/balance`, { headers: { authorization: `Bearer ${key}` } }).then((r) => r.json())) as { coins: number };
    expect(after.coins).toBeCloseTo(before.coins - charged, 6);
    expect(await personalCoins(memberEmail)).toBe(memberBefore);
    expect(await personalCoins(ownerEmail)).toBe(ownerBefore);
    const history = (await fetch(`${base}/api/v1/wallet/history`, { headers: { authorization: `Bearer ${key}` } }).then((r) => r.json())) as { data: { type: string; user_id: string | null; reference: string }[] };
    const [memberRow] = await orm.em.fork().execute<{ id: string }[]>(`select id from accounts where lower(email) = lower(?) and kind = 'person'`, [memberEmail]);
    expect(history.data.find((r) => r.reference === completion.id)).toMatchObject({ type: 'api_usage', user_id: memberRow!.id });
    await ownerContext.close();
    await memberContext.close();
  });
});
