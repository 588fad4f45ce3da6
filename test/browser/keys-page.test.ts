import AxeBuilder from '@axe-core/playwright';
import type { MikroORM } from '@mikro-orm/postgresql';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { artifactPath, launchChromium } from '../support/browser.ts';
import { useTestCatalog } from '../support/catalog.ts';
import { openTestOrm, uniqueEmail } from '../support/db.ts';
import { startTestApi } from '../support/http.ts';
import { confirmInBrowser } from '../support/sign-up.ts';

/** The API keys page in a real Chromium: create with limits, reload, edit, on a phone too. */
let orm: MikroORM;
let api: Awaited<ReturnType<typeof startTestApi>>;
let browser: Browser;
let page: Page;
beforeAll(async () => {
  orm = await openTestOrm();
  const providers = await useTestCatalog(orm, 'http://127.0.0.1:9/v1');
  api = await startTestApi(orm, { providers });
  browser = await launchChromium();
  page = await (await browser.newContext()).newPage();
});
afterAll(async () => {
  await browser?.close();
  await api?.close();
  await orm?.close();
});

const SECRET = /mas_[0-9A-Za-z]{38}/g;
const keyCount = async (email: string) =>
  Number((await orm.em.fork().execute<{ n: string }[]>('select count(*)::text as n from api_keys k join accounts a on a.id = k.account_id where a.email = ?', [email]))[0]!.n);
/** Nothing wider than the viewport: no sideways scrolling. */
const fitsWidth = async () => {
  const root = page.locator('html');
  const [scroll, client] = await Promise.all([root.evaluate((e) => e.scrollWidth), root.evaluate((e) => e.clientWidth)]);
  return scroll <= client;
};

describe('the API keys page', () => {
  const email = uniqueEmail('keys-chromium');

  it('creates a key with limits: the secret shows once, and reloading creates no second key', async () => {
    await page.goto(`${api.url}/signup`);
    await page.getByLabel('Email').fill(email);
    await page.getByLabel('Password').fill('a long enough password');
    await page.getByRole('button', { name: 'Create account' }).click();
    await confirmInBrowser(page, api.url, email);

    await page.goto(`${api.url}/account/keys`);
    await page.getByLabel('Name', { exact: true }).fill('laptop');
    await page.getByLabel(/Spend limit in coins/).fill('5');
    await page.getByLabel('Limit period').selectOption('monthly');
    await page.getByLabel(/Expires at the end of/).fill('2099-06-30');
    await page.getByRole('checkbox', { name: /test\/ok/ }).check();
    await page.getByRole('button', { name: 'Create key' }).click();
    await page.waitForURL(/\/account\/keys$/);
    const secret = (await page.locator('#new-key').textContent())!;
    expect(secret).toMatch(/^mas_[0-9A-Za-z]{38}$/);
    expect(page.url()).not.toContain(secret);
    await page.screenshot({ path: await artifactPath('keys-created.png'), fullPage: true });

    for (let i = 0; i < 2; i++) {
      const reloaded = await page.reload();
      expect(reloaded?.status()).toBe(200);
      expect(reloaded?.headers()['cache-control']).toBe('no-store');
      expect((await page.content()).match(SECRET)).toBeNull();
    }
    expect(await keyCount(email)).toBe(1);
    await expect(page.getByRole('cell', { name: /^0 coins · \$0\.00 of 5 coins this month, 5 coins · \$0\.01 left$/ }).isVisible()).resolves.toBe(true);
  });

  it('each Revoke and Edit link names its key; axe finds nothing in the page', async () => {
    for (const name of ['ci', 'phone']) {
      await page.getByLabel('Name', { exact: true }).fill(name);
      await page.getByRole('button', { name: 'Create key' }).click();
      await page.waitForURL(/\/account\/keys$/);
    }
    const revokes = page.getByRole('link', { name: /^Revoke/ });
    const names = await revokes.evaluateAll((links) => links.map((a) => a.getAttribute('aria-label') ?? a.textContent));
    expect(names).toEqual(['Revoke key laptop', 'Revoke key ci', 'Revoke key phone']);
    await expect(page.getByRole('link', { name: 'Revoke key phone', exact: true }).count()).resolves.toBe(1);
    await expect(page.getByRole('link', { name: 'Edit key ci', exact: true }).count()).resolves.toBe(1);
    const axe = await new AxeBuilder({ page: page as never }).include('main').analyze();
    expect(axe.violations.map((v) => `${v.id}: ${v.nodes.map((n) => n.target.join(' ')).join(', ')}`)).toEqual([]);
  });

  it('edits a key’s limits, and the list and edit pages fit a 390 px phone', async () => {
    await page.getByRole('link', { name: 'Edit key laptop', exact: true }).click();
    await page.waitForURL(/\/edit$/);
    await expect(page.getByLabel(/Spend limit in coins/).inputValue()).resolves.toBe('5');
    await expect(page.getByRole('checkbox', { name: /test\/ok/ }).isChecked()).resolves.toBe(true);
    await page.setViewportSize({ width: 390, height: 844 });
    expect(await fitsWidth()).toBe(true);
    await page.screenshot({ path: await artifactPath('keys-edit-390.png'), fullPage: true });
    await page.getByLabel(/Spend limit in coins/).fill('7.5');
    await page.getByLabel('Limit period').selectOption('total');
    await page.getByRole('checkbox', { name: /test\/ok/ }).uncheck();
    await page.getByRole('button', { name: 'Save the key' }).click();
    await page.waitForURL(/\/account\/keys$/);
    await expect(page.getByRole('cell', { name: /0 coins · \$0\.00 of 7\.5 coins in all, 7\.5 coins · \$0\.01 left/ }).isVisible()).resolves.toBe(true);
    expect(await fitsWidth()).toBe(true);
    await page.screenshot({ path: await artifactPath('keys-390.png'), fullPage: true });
    await page.setViewportSize({ width: 1280, height: 800 });
  });
});
