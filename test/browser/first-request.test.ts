import fs from 'node:fs/promises';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import type { MikroORM } from '@mikro-orm/postgresql';
import OpenAI from 'openai';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createProviderRegistry } from '../../adapters/providers/registry.ts';
import { loadCatalogFile } from '../../config/catalog.ts';
import { seedModels } from '../../core/catalog/catalog.ts';
import type { CoreDeps } from '../../core/context.ts';
import { launchChromium, shotAndInspect } from '../support/browser.ts';
import { openTestOrm, testDeps, uniqueEmail } from '../support/db.ts';
import { createTestApp } from '../support/http.ts';
import { linkFromMailDir } from '../support/mail.ts';

/**
 * Issue 48's proof of "a first request that works", as a new customer lives it in Chromium: sign
 * up, confirm the address from the mail the service really wrote (the mail adapter without
 * SMTP_URL: an .eml under DATA_DIR/mail, From its default address on PUBLIC_BASE_URL's host),
 * see the welcome credit, create a key, and run the request the page then shows, taken from the
 * page (URL, key and body), with the official `openai` client: 200, and the balance drops by the
 * charge. STARTER_CREDIT_COINS is 1000, as the embedded demo sets it.
 */
let orm: MikroORM;
let deps: CoreDeps;
let server: http.Server;
let base: string;
let dataDir: string;
let browser: Browser;
let context: BrowserContext;
let page: Page;
beforeAll(async () => {
  orm = await openTestOrm();
  await seedModels(orm.em.fork(), await loadCatalogFile('config/models.yaml', 50n));
  dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'mas-first-request-'));
  server = http.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  deps = testDeps(orm, {
    publicBaseUrl: base,
    // The real mail adapter, with no SMTP_URL: each message is an .eml file under DATA_DIR/mail.
    mailer: 'env',
    providers: createProviderRegistry({ local: { kind: 'local' } }),
    env: { STARTER_CREDIT_COINS: '1000', DATA_DIR: dataDir },
  });
  server.on('request', createTestApp({ deps, publicBaseUrl: base }));
  browser = await launchChromium();
  context = await browser.newContext({ viewport: { width: 390, height: 844 } });
  await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: base });
  page = await context.newPage();
});
afterAll(async () => {
  await browser?.close();
  server?.closeAllConnections();
  await new Promise((resolve) => server?.close(resolve));
  await orm?.close();
  if (dataDir) await fs.rm(dataDir, { recursive: true, force: true });
});

const email = uniqueEmail('first-request');
const password = 'a first request that works 48';
const balanceOf = async (key: string) => {
  const res = await fetch(`${base}/api/v1/balance`, { headers: { authorization: `Bearer ${key}` } });
  expect(res.status).toBe(200);
  return ((await res.json()) as { coins: number; paid_account: boolean });
};

describe('a new customer’s first request', () => {
  it('signs up, confirms from the mail, creates a key and runs the request the page shows: 200, paid from the welcome credit', async () => {
    await page.goto(`${base}/signup`);
    await page.getByLabel('Email').fill(email);
    await page.getByLabel(/Password/).fill(password);
    await page.getByRole('button', { name: 'Create account' }).click();
    await page.waitForURL(/\/signup\/sent$/);

    // The confirmation mail, as the mail adapter wrote it: From no-reply at PUBLIC_BASE_URL's host (here an IP address: a literal).
    const mailDir = path.join(dataDir, 'mail');
    const link = new URL(await linkFromMailDir(mailDir, email, '/signup/verify'));
    const emls = await Promise.all((await fs.readdir(mailDir)).map((n) => fs.readFile(path.join(mailDir, n), 'utf8')));
    expect(emls.find((e) => e.includes(`To: ${email}`))).toMatch(/^From: Model Access Service <no-reply@\[127\.0\.0\.1\]>$/m);
    expect(link.origin).toBe(base);
    await page.goto(link.href);
    await page.getByRole('button', { name: 'Confirm and sign in' }).click();
    await page.waitForURL(/\/account\?verified=1$/);

    // The welcome credit is in the history, in words.
    await page.goto(`${base}/account/usage`);
    await expect(page.getByText('Welcome credit').first().isVisible()).resolves.toBe(true);

    await page.goto(`${base}/account/keys`);
    await page.getByLabel('Name', { exact: true }).fill('first');
    const [keysPage] = await Promise.all([
      page.waitForResponse((r) => r.url() === `${base}/account/keys` && r.request().method() === 'GET'),
      page.getByRole('button', { name: 'Create key' }).click(),
    ]);
    // The page shows a secret (the key, and the requests holding it): never stored.
    expect(keysPage.headers()['cache-control']).toBe('no-store');
    await expect(page.getByRole('heading', { name: 'Try the key' }).isVisible()).resolves.toBe(true);
    const key = (await page.locator('#new-key').textContent())!;
    expect(key).toMatch(/^mas_/);

    const curl = (await page.locator('#first-request-curl').textContent())!;
    const js = (await page.locator('#first-request-node').textContent())!;
    const python = (await page.locator('#first-request-python').textContent())!;
    for (const code of [curl, js, python]) {
      expect(code).toContain(key);
      expect(code).toContain(`${base}/api/v1`);
    }
    // The copy button copies the request as shown.
    await page.getByRole('button', { name: 'Copy the curl request' }).click();
    expect(await page.evaluate('navigator.clipboard.readText()')).toBe(curl);
    await expect(page.getByRole('button', { name: 'Copied the curl request' }).isVisible()).resolves.toBe(true);
    await shotAndInspect(page, 'first-request-keys-390.png');
    await page.setViewportSize({ width: 1280, height: 800 });
    await shotAndInspect(page, 'first-request-keys-1280.png');

    // The request as the page gives it: curl's URL, key and body; the JavaScript snippet's base URL and key.
    const url = /^curl (\S+) \\/.exec(curl)![1]!;
    const bearer = /-H "Authorization: Bearer (\S+)"/.exec(curl)![1]!;
    const body = JSON.parse(/-d '([\s\S]*)'$/.exec(curl)![1]!.replace(/'\\''/g, "'")) as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming;
    const jsBase = /baseURL: "([^"]+)"/.exec(js)![1]!;
    const jsKey = /apiKey: "([^"]+)"/.exec(js)![1]!;
    expect(url).toBe(`${jsBase}/chat/completions`);
    expect([bearer, jsKey]).toEqual([key, key]);

    const before = await balanceOf(key);
    expect(before).toEqual(expect.objectContaining({ coins: 1000, paid_account: false }));
    const client = new OpenAI({ baseURL: jsBase, apiKey: jsKey, maxRetries: 0 });
    const { data: completion, response } = await client.chat.completions.create(body).withResponse();
    expect(response.status).toBe(200);
    expect(completion.choices[0]!.message.content).toBeTruthy();
    const charged = (completion.usage as unknown as { cost_coins: number }).cost_coins;
    expect(charged).toBeGreaterThan(0);
    const after = await balanceOf(key);
    expect(after.coins).toBeCloseTo(before.coins - charged, 6);
  });
});
