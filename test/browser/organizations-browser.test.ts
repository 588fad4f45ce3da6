import type { MikroORM } from '@mikro-orm/postgresql';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { artifactPath, launchChromium, shotAndInspect } from '../support/browser.ts';
import { useTestCatalog } from '../support/catalog.ts';
import { openTestOrm, uniqueEmail } from '../support/db.ts';
import { startTestApi } from '../support/http.ts';
import { testMailbox } from '../support/mail.ts';
import { confirmInBrowser } from '../support/sign-up.ts';

/**
 * Organizations in a real Chromium, two people in two browser contexts: the owner signs up,
 * creates an organization and invites B by e-mail; B opens the mailed link, signs up from it,
 * comes back to it and accepts; the owner sets B's spend limit; B switches to the
 * organization's wallet and creates a key of it on the keys page.
 */
let orm: MikroORM;
let api: Awaited<ReturnType<typeof startTestApi>>;
let browser: Browser;
let owner: Page;
let member: Page;
beforeAll(async () => {
  orm = await openTestOrm();
  const providers = await useTestCatalog(orm, 'http://127.0.0.1:9/v1');
  api = await startTestApi(orm, { providers });
  browser = await launchChromium();
  owner = await (await browser.newContext()).newPage();
  member = await (await browser.newContext()).newPage();
});
afterAll(async () => {
  await browser?.close();
  await api?.close();
  await orm?.close();
});

async function signUp(page: Page, email: string) {
  await page.getByLabel('Email').fill(email);
  await page.getByLabel('Password').fill('a long enough password');
  await page.getByRole('button', { name: 'Create account' }).click();
}

describe('an organization from sign-up to a member’s key', () => {
  const ownerEmail = uniqueEmail('org-chromium-owner');
  const memberEmail = uniqueEmail('org-chromium-b');
  let orgUrl = '';

  it('the owner creates an organization and invites B by e-mail', async () => {
    await owner.goto(`${api.url}/signup`);
    await signUp(owner, ownerEmail);
    await confirmInBrowser(owner, api.url, ownerEmail);

    await owner.goto(`${api.url}/account/organizations`);
    await owner.getByLabel('Name').fill('Chromium Labs');
    await owner.getByRole('button', { name: 'Create organization' }).click();
    await owner.waitForURL(/\/account\/organizations\/org_\w+\?created=1$/);
    orgUrl = owner.url().replace(/\?.*$/, '');
    await expect(owner.getByRole('heading', { level: 1 }).textContent()).resolves.toBe('Chromium Labs');

    await owner.getByLabel(/E-mail address/).fill(memberEmail);
    await owner.getByLabel(/^Role/).selectOption('member');
    await owner.getByRole('button', { name: 'Send invitation' }).click();
    await owner.waitForURL(/\?invited=1#invitations$/);
    await expect(owner.getByRole('cell', { name: memberEmail, exact: true }).isVisible()).resolves.toBe(true);
  });

  it('B opens the mailed link, signs up from it, comes back to it and accepts', async () => {
    const mail = await testMailbox.next(memberEmail);
    expect(mail.subject).toBe('You are invited to Chromium Labs');
    const link = new URL(mail.link!);
    await member.goto(`${api.url}${link.pathname}`);
    await expect(member.getByText(`${ownerEmail} invites ${memberEmail}`).isVisible()).resolves.toBe(true);
    await member.getByRole('link', { name: 'Create an account' }).click();
    await member.waitForURL(/\/signup\?next=/);
    await signUp(member, memberEmail);
    // The confirmation link signs B in, and the pages bring B back to the invitation.
    await member.waitForURL(/\/signup\/sent$/);
    const confirm = new URL((await testMailbox.next(memberEmail, 1)).link!);
    await member.goto(`${api.url}${confirm.pathname}${confirm.search}`);
    await member.getByRole('button', { name: 'Confirm and sign in' }).click();
    await member.waitForURL((url) => url.pathname === link.pathname);
    await member.screenshot({ path: await artifactPath('organizations-invitation.png'), fullPage: true });
    await member.getByRole('button', { name: 'Accept and join Chromium Labs' }).click();
    await member.waitForURL(/\/account\/organizations\/org_\w+\?joined=1$/);
    await expect(member.getByText('Your role: Member').isVisible()).resolves.toBe(true);
  });

  it('the owner sets B’s spend limit on B’s member page', async () => {
    await owner.goto(orgUrl);
    await owner.getByRole('link', { name: `Manage ${memberEmail}` }).click();
    await owner.getByLabel(/Spend limit in coins/).fill('5');
    await owner.getByLabel('Limit period').selectOption('monthly');
    await owner.getByRole('button', { name: 'Save the member' }).click();
    await owner.waitForURL(/\?updated=1#members$/);
    await expect(owner.getByRole('cell', { name: /of 5 coins this month/ }).isVisible()).resolves.toBe(true);
    await owner.setViewportSize({ width: 390, height: 844 });
    await shotAndInspect(owner, 'organizations-owner-390.png');
  });

  it('B switches to the organization’s wallet and creates a key of it on the keys page', async () => {
    await member.goto(orgUrl);
    await member.getByRole('button', { name: 'Use this wallet' }).click();
    await member.waitForURL(/\/account\/keys$/);
    await expect(member.getByRole('heading', { level: 1 }).textContent()).resolves.toBe('API keys of Chromium Labs');
    await expect(member.getByLabel('Wallet').inputValue()).resolves.toMatch(/^org_/);
    await member.getByLabel('Name', { exact: true }).fill('team laptop');
    await member.getByRole('button', { name: 'Create key' }).click();
    await member.waitForURL(/\/account\/keys$/);
    const secret = (await member.locator('#new-key').textContent())!;
    expect(secret).toMatch(/^mas_[0-9A-Za-z]{38}$/);
    const [key] = await orm.em.fork().execute<{ account_id: string; member_id: string }[]>(
      'select k.account_id, k.member_id from api_keys k join accounts p on p.id = k.member_id where p.email = ? and k.name = ?',
      [memberEmail, 'team laptop'],
    );
    expect(key!.account_id).toBe(orgUrl.split('/').at(-1));
    // The key answers with the organization's wallet.
    const balance = await fetch(`${api.url}/api/v1/balance`, { headers: { authorization: `Bearer ${secret}` } });
    expect(balance.status).toBe(200);

    // Back to the personal wallet with the switch: the personal keys page, without the key.
    await member.getByLabel('Wallet').selectOption({ label: 'Personal' });
    await member.getByRole('button', { name: 'Switch' }).click();
    await member.waitForURL(/\/account\/keys$/);
    await expect(member.getByRole('heading', { level: 1 }).textContent()).resolves.toBe('API keys');
    await expect(member.getByText('team laptop').count()).resolves.toBe(0);
  });
});
