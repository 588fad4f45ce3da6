import http from 'node:http';
import type { MikroORM } from '@mikro-orm/postgresql';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CoreDeps } from '../../core/context.ts';
import { artifactPath, launchChromium } from '../support/browser.ts';
import { openTestOrm, testDeps, uniqueEmail } from '../support/db.ts';
import { createTestApp } from '../support/http.ts';
import { testMailbox } from '../support/mail.ts';

/**
 * The mail pages (issue 34) in a real Chromium on a 390 px phone: sign-up's "check your e-mail",
 * the confirmation, the unconfirmed overview with its "send again", the low-balance form, and
 * "forgot your password" to a new password. Every page fits the viewport; no page needs script.
 */
let orm: MikroORM;
let deps: CoreDeps;
let server: http.Server;
let base: string;
let browser: Browser;
let page: Page;
beforeAll(async () => {
  orm = await openTestOrm();
  server = http.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  deps = testDeps(orm, { publicBaseUrl: base });
  server.on('request', createTestApp({ deps, publicBaseUrl: base }));
  browser = await launchChromium();
  page = await (await browser.newContext({ viewport: { width: 390, height: 844 }, javaScriptEnabled: false })).newPage();
});
afterAll(async () => {
  await browser?.close();
  server?.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
  await orm?.close();
});

const fits = async (name: string) => {
  await page.screenshot({ path: await artifactPath(`mail-${name}-390.png`), fullPage: true });
  const root = page.locator('html');
  const [scroll, client] = await Promise.all([root.evaluate((e) => e.scrollWidth), root.evaluate((e) => e.clientWidth)]);
  expect(scroll, name).toBeLessThanOrEqual(client);
  expect(client).toBe(390);
};
const email = uniqueEmail('mail-pages');
const password = 'a long enough password for pages';

describe('mail pages on a phone, without JavaScript', () => {
  it('sign-up, the unconfirmed overview, send again, then the link confirms and signs in', async () => {
    await page.goto(`${base}/signup`);
    await page.getByLabel('Email').fill(email);
    await page.getByLabel(/Password/).fill(password);
    await page.getByRole('button', { name: 'Create account' }).click();
    await page.waitForURL(/\/signup\/sent$/);
    await expect(page.getByText(`Check your e-mail: we sent a link to ${email} to finish signing up.`).isVisible()).resolves.toBe(true);
    await fits('signup-sent');

    await page.goto(`${base}/login`);
    await page.getByLabel('Email').fill(email);
    await page.getByLabel('Password').fill(password);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.waitForURL(/\/account$/);
    await expect(page.getByRole('heading', { name: 'Confirm your e-mail address' }).isVisible()).resolves.toBe(true);
    await fits('overview-unconfirmed');
    await page.getByRole('button', { name: 'Send the link again' }).click();
    await page.waitForURL(/verification=sent/);
    await expect(page.getByText('A new link is on its way.').isVisible()).resolves.toBe(true);
    expect(testMailbox.to(email)).toHaveLength(2);

    const link = new URL(testMailbox.to(email).at(-1)!.link!);
    await page.goto(`${base}${link.pathname}${link.search}`);
    await fits('verify');
    await page.getByRole('button', { name: 'Confirm and sign in' }).click();
    await page.waitForURL(/\/account\?verified=1$/);
    await expect(page.getByText('Your e-mail address is confirmed.').isVisible()).resolves.toBe(true);
    await expect(page.getByRole('button', { name: 'Send the link again' }).count()).resolves.toBe(0);
  });

  it('sets the low-balance notice', async () => {
    await page.goto(`${base}/account/settings`);
    await page.getByLabel(/E-mail me when my balance falls below/).fill('120');
    await page.getByRole('button', { name: 'Save' }).click();
    await page.waitForURL(/notice=saved/);
    await expect(page.getByText('Saved: we e-mail you when the balance falls below 120 coins.').isVisible()).resolves.toBe(true);
    await expect(page.getByLabel(/E-mail me when my balance falls below/).inputValue()).resolves.toBe('120');
    await fits('overview-notice');
  });

  it('forgot password: the link sets a new password and signs in', async () => {
    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.waitForURL(/\/login$/);
    await page.getByRole('link', { name: 'Forgot your password?' }).click();
    await page.waitForURL(/\/password\/forgot$/);
    await fits('forgot');
    await page.getByLabel('Email').fill(email);
    await page.getByRole('button', { name: 'Send the link' }).click();
    await page.waitForURL(/\/password\/forgot\/sent$/);
    await fits('forgot-sent');
    const link = new URL(testMailbox.to(email).at(-1)!.link!);
    expect(link.searchParams.get('token')).toBe(testMailbox.tokenFor(email, 'reset'));
    await page.goto(`${base}${link.pathname}${link.search}`);
    await fits('reset');
    await page.getByLabel(/New password/).fill('the newest password of all');
    await page.getByRole('button', { name: 'Set the password' }).click();
    await page.waitForURL(/\/account\/settings\?password=reset$/);
    await page.goto(`${base}${link.pathname}${link.search}`);
    await expect(page.getByText('This password reset link is invalid, used or expired.').isVisible()).resolves.toBe(true);
    await fits('reset-used');
  });
});
