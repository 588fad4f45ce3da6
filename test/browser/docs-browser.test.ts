import type { MikroORM } from '@mikro-orm/postgresql';
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { artifactPath, launchChromium } from '../support/browser.ts';
import { openTestOrm, testDeps } from '../support/db.ts';
import { createTestApp, serve } from '../support/http.ts';

/** The API reference page in a real Chromium, under the service's security headers (a CSP with no inline script). */
let orm: MikroORM;
let served: Awaited<ReturnType<typeof serve>>;
let base: string;
let browser: Browser;
beforeAll(async () => {
  orm = await openTestOrm();
  const app = createTestApp({ deps: testDeps(orm) });
  served = await serve(app);
  base = served.base;
  browser = await launchChromium();
});
afterAll(async () => {
  await browser?.close();
  await served?.close();
  await orm?.close();
});

describe('the API reference page', () => {
  it('renders every operation of the OpenAPI document, with no script refused by the security policy', async () => {
    const page = await browser.newPage();
    const refused: string[] = [];
    page.on('console', (m) => {
      if (/Content Security Policy|Refused to/i.test(m.text())) refused.push(m.text());
    });
    page.on('pageerror', (e) => refused.push(String(e)));
    await page.goto(`${base}/api/v1/docs`);
    await page.waitForSelector('.opblock');
    const doc = (await (await fetch(`${base}/api/v1/openapi.json`)).json()) as { paths: Record<string, object> };
    const operations = Object.values(doc.paths).reduce((n, ops) => n + Object.keys(ops).length, 0);
    expect(await page.locator('.opblock').count()).toBe(operations);
    await expect(page.locator('.opblock-summary-path', { hasText: '/chat/completions' }).first().isVisible()).resolves.toBe(true);
    expect(refused).toEqual([]);
    await page.screenshot({ path: await artifactPath('api-reference.png') });
    await page.close();
  });
});
