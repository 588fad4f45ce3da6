import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import type { Server } from 'node:http';
import path from 'node:path';
import { promisify } from 'node:util';
import AxeBuilder from '@axe-core/playwright';
import type { MikroORM } from '@mikro-orm/postgresql';
import type { Browser, BrowserContext } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadCatalogFile } from '../../config/catalog.ts';
import { seedModels, validateCatalog } from '../../core/catalog/catalog.ts';
import { createContext, type CoreDeps } from '../../core/context.ts';
import { parseCoins } from '../../core/money/coins.ts';
import { release, reserve, settle } from '../../core/money/holds.ts';
import { createCaller } from '../../core/router.ts';
import { artifactPath, launchChromium } from '../support/browser.ts';
import { makeKey, openTestOrm, testDeps, uniqueEmail } from '../support/db.ts';
import { signUpVerified } from '../support/sign-up.ts';
import { createTestApp } from '../support/http.ts';
import { ROOT } from '../support/process.ts';

/**
 * The public pages (landing, catalog, model pages, docs) and the Usage page, over real HTTP, and
 * in Chromium at a phone's width (issue 34).
 */
let orm: MikroORM;
let deps: CoreDeps;
let server: Server;
let base = '';
let browser: Browser;
const disabledId = `mas-test/disabled-${process.pid}-${Date.now()}`;

beforeAll(async () => {
  orm = await openTestOrm();
  deps = testDeps(orm);
  // The shipped catalog, and one model that is then disabled: the catalog page must not show it.
  const shipped = await loadCatalogFile(path.join(ROOT, 'config', 'models.yaml'), 50n);
  await seedModels(orm.em.fork(), shipped);
  const echo = shipped.raw.get('mas/echo') as Record<string, unknown>;
  await seedModels(orm.em.fork(), validateCatalog({ providers: { local: { kind: 'local' } }, models: [{ ...echo, id: disabledId, name: 'Hidden model', example: undefined }] }, 50n));
  await createCaller(createContext(deps, { kind: 'internal' })).admin.models.disable({ id: disabledId, reason: 'test: hidden from the catalog' });
  const app = createTestApp({ deps });
  server = await new Promise<Server>((resolve) => {
    const s = app.listen(0, '127.0.0.1', () => resolve(s));
  });
  base = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  browser = await launchChromium();
});
afterAll(async () => {
  await browser?.close();
  server?.closeAllConnections();
  await new Promise((resolve) => server?.close(resolve));
  await orm?.close();
});

const get = (p: string, headers: Record<string, string> = {}) => fetch(`${base}${p}`, { headers: { accept: 'text/html', ...headers } });

describe('public pages over HTTP', () => {
  it('the landing page says what the service is and links on; public, cacheable, no cookie', async () => {
    const res = await get('/');
    expect(res.status).toBe(200);
    expect(res.headers.get('cache-control')).toBe('public, max-age=300');
    expect(res.headers.get('set-cookie')).toBeNull();
    const body = await res.text();
    for (const href of ['/models', '/docs', '/docs/quickstart', '/api/v1/docs', '/signup', '/login']) expect(body).toContain(`href="${href}"`);
    // The models on sale with their prices, and a first request against this service.
    expect(body).toContain('<a href="/models/mas/echo">Echo (demo)</a>');
    expect(body).toContain('50 coins ($0.05) per million input tokens<br>200 coins ($0.20) per million output tokens');
    expect(body).toContain('curl http://localhost/api/v1/chat/completions');
    expect(body).toMatch(/OpenAI-compatible chat/);
    expect(body).toMatch(/MCP connector/);
    expect(body).not.toContain('Your account');
    // With a session cookie: "Your account" instead of Sign in / Sign up, and a private answer.
    const signedIn = await get('/', { cookie: 'mas_session=anything' });
    expect(signedIn.headers.get('cache-control')).toBe('private, no-cache');
    const text = await signedIn.text();
    expect(text).toContain('<a href="/account">Your account</a>');
    expect(text).not.toContain('href="/signup"');
  });

  it('/models groups the enabled models by kind, with prices in their own shape; a disabled model is not there', async () => {
    const res = await get('/models');
    expect(res.status).toBe(200);
    expect(res.headers.get('set-cookie')).toBeNull();
    const body = await res.text();
    for (const h of ['Chat models', 'Image models', 'Video models', 'Audio models', '3D models']) expect(body).toContain(`>${h}</h2>`);
    expect(body.indexOf('Chat models')).toBeLessThan(body.indexOf('Image models'));
    expect(body).toContain('<a href="/models/mas/image-demo">Image (demo)</a>');
    // mas/echo: 100 and 400 in-app coins per million tokens, at 50 %.
    expect(body).toContain('50 coins ($0.05) per million input tokens · 200 coins ($0.20) per million output tokens');
    // mas/image-demo: base 20 × 0.5 for 128 px, at 50 %: from 5 coins.
    expect(body).toContain('from 5 coins ($0.01) per image');
    expect(body).not.toContain(disabledId);
  });

  it('a model page shows its settings, inputs, price and ready requests with this service\'s base URL', async () => {
    const res = await get('/models/mas/image-demo');
    expect(res.status).toBe(200);
    // Cells carry their column's heading (data-label) for the phone's cards: left out here.
    const body = (await res.text()).replace(/ data-label="[^"]*"/g, '');
    expect(body).toContain('<h1>Image (demo)</h1>');
    expect(body).toContain('<td><code>size</code></td><td>enum</td><td>128, 256, 512</td><td>256</td>');
    expect(body).toContain('<td><code>reference_image</code></td><td>image</td>');
    expect(body).toContain('× by size: 128 ×0.5, 256 ×1, 512 ×2');
    expect(body).toContain('curl http://localhost/api/v1/generations');
    expect(body).toContain('&quot;model&quot;: &quot;mas/image-demo&quot;');
    expect(body).toContain('&quot;url&quot;: &quot;http://localhost/api/v1/mcp&quot;');
    const chat = await (await get('/models/mas/echo')).text();
    expect(chat).toContain('client.chat.completions.create(');
    expect(chat).toContain('OpenAI(base_url=&quot;http://localhost/api/v1&quot;');
    expect(chat).toContain('16,384 tokens');
  });

  it('an unknown or disabled model is a 404 page', async () => {
    for (const id of ['mas/no-such-model', disabledId, 'x'.repeat(300)]) {
      const res = await get(`/models/${id}`);
      expect(res.status, id).toBe(404);
      expect(await res.text()).toContain('<h1>No such model</h1>');
    }
  });

  it('/docs lists the customer docs; each renders with links between docs rewritten; no path reaches other files', async () => {
    const index = await (await get('/docs')).text();
    expect(index).toContain('<a href="/docs/quickstart">Quickstart</a>');
    expect(index).toContain('<a href="/docs/mcp">MCP connector</a>');
    const api = await get('/docs/api');
    expect(api.status).toBe(200);
    const body = await api.text();
    expect(body).toContain('<h1>API basics</h1>');
    expect(body).toContain('<nav class="toc" aria-labelledby="on-this-page">');
    expect(body).toMatch(/<h2 id="[a-z0-9-]+">/);
    expect(body).toMatch(/href="\/docs\/[a-z]+(#[\w-]+)?"/);
    expect(body).not.toMatch(/href="[^"]*\.md/);
    const generations = await (await get('/docs/generations')).text();
    expect(generations).toContain('<pre tabindex="0"><code');
    expect(generations).toContain('<div class="table-wrap" role="region" tabindex="0"');
    for (const p of ['/docs/nothere', '/docs/..%2fpackage.json', '/docs/%2e%2e%2fpackage.json', '/docs/api.md', '/docs/README', '/docs/deploy', '/docs/operations']) {
      const res = await get(p);
      expect(res.status, p).toBe(404);
      expect(await res.text()).not.toContain('"name": "');
    }
  });

  it('the build ships the customer docs in dist/, where the built code reads them, and not the operator documents', async () => {
    expect(existsSync(path.join(ROOT, 'dist', 'docs', 'customer', 'quickstart.md'))).toBe(true);
    expect(existsSync(path.join(ROOT, 'dist', 'docs', 'deploy.md'))).toBe(false);
    const { stdout } = await promisify(execFile)(process.execPath, ['--input-type=module', '-e', "const m = await import('./dist/adapters/web/pages/docs.js'); console.log(m.DOCS_DIR, m.loadDocs().size, m.DOCS.length)"], { cwd: ROOT });
    const [dir, size, count] = stdout.trim().split(' ');
    expect(dir).toBe(path.join(ROOT, 'dist', 'docs', 'customer'));
    expect(Number(size)).toBe(Number(count));
  });
});

describe('the Usage page', () => {
  let context: BrowserContext;
  let email = '';
  let chatId = '';
  let jobId = '';
  let keyId = '';
  beforeAll(async () => {
    email = uniqueEmail('usage');
    const session = await signUpVerified(deps, { email, password: 'a long enough passphrase 42' });
    const accountId = session.account.id;
    await createCaller(createContext(deps, { kind: 'internal' })).wallet.topUp({ account: accountId, coins: '50' });
    const key = await makeKey(orm, accountId, 'phone');
    keyId = key.id;
    const em = orm.em.fork();
    const today = new Date().toISOString();
    chatId = `chatcmpl-usage${Date.now()}`;
    const { holdId } = await reserve(em, { accountId, amount: parseCoins('2'), reference: chatId, expiresAt: new Date(Date.now() + 60_000), metadata: { kind: 'chat', model: 'mas/echo', key_id: key.id } });
    await settle(em, holdId, parseCoins('1.25'));
    await em.execute(
      `insert into completion_records (id, kind, account_id, key_id, model, prompt_tokens, completion_tokens, cost_micro, finish_reason, created_at, duration_ms)
       values (?, 'chat.completion', ?, ?, 'mas/echo', 1200, 340, ?, 'stop', ?, 5)`,
      [chatId, accountId, key.id, parseCoins('1.25').toString(), today],
    );
    jobId = `gen_usage${Date.now()}`;
    await reserve(em, { accountId, amount: parseCoins('5'), reference: jobId, holdId: `hold_${jobId}`, expiresAt: new Date(Date.now() + 60_000), metadata: { kind: 'generation', model: 'mas/image-demo', key_id: key.id } });
    await em.execute(
      `insert into generations (id, account_id, key_id, model_id, status, prompt, settings, inputs, price_micro, cost_micro, hold_id, created_at, completed_at, error)
       values (?, ?, ?, 'mas/image-demo', 'failed', 'a fox', '{}', '{}', ?, 0, ?, ?, ?, ?::jsonb)`,
      [jobId, accountId, key.id, parseCoins('5').toString(), `hold_${jobId}`, today, today, JSON.stringify({ code: 'provider_error', message: 'The demo failed on purpose.' })],
    );
    await release(em, `hold_${jobId}`);
    context = await browser.newContext({ viewport: { width: 390, height: 844 } });
    await context.addCookies([{ name: 'mas_session', value: session.token, url: base }]);
  });
  afterAll(() => context?.close());

  it('shows spend per day, per model and per key, and the history in words with the job linked', async () => {
    const page = await context.newPage();
    const today = new Date().toISOString().slice(0, 10);
    await page.goto(`${base}/account/usage?from=${today}&to=${today}`);
    await expect(page.getByRole('heading', { name: 'Usage', level: 1 }).isVisible()).resolves.toBe(true);
    await expect(page.locator('.card').first().textContent()).resolves.toContain('1.25 coins');
    await expect(page.getByRole('img', { name: /Coins spent per day/ }).getAttribute('width')).resolves.toBe('100%');
    const model = page.getByRole('row').filter({ hasText: 'mas/echo' }).first();
    await expect(model.textContent()).resolves.toMatch(/1\.25.*1,200 \/ 340/);
    await expect(page.getByRole('row').filter({ hasText: 'phone' }).textContent()).resolves.toMatch(/2.*1\.25/);
    await expect(page.getByRole('row').filter({ hasText: 'Chat on mas/echo: 1200 input + 340 output tokens' }).count()).resolves.toBe(1);
    const charge = page.getByRole('row').filter({ hasText: 'failed, refunded 5 coins' });
    await expect(charge.textContent()).resolves.toContain(`Image job ${jobId} on mas/image-demo`);
    await charge.getByRole('link', { name: jobId }).click();
    await page.waitForURL(new RegExp(`/account/generations/${jobId}$`));
    await expect(page.getByText('The demo failed on purpose.').isVisible()).resolves.toBe(true);
    await page.close();
  });

  it('a range core refuses is the page again with the message, a 400', async () => {
    const page = await context.newPage();
    const res = await page.goto(`${base}/account/usage?from=2026-01-10&to=2026-01-01`);
    expect(res?.status()).toBe(400);
    await expect(page.getByRole('alert').textContent()).resolves.toMatch(/after to/);
    await page.close();
  });

  it('the CSV takes the same filters', async () => {
    const page = await context.newPage();
    await page.goto(`${base}/account/usage`);
    const today = new Date().toISOString().slice(0, 10);
    const byModel = await page.request.get(`${base}/account/usage.csv?from=${today}&to=${today}&model=mas/echo`);
    expect(byModel.status()).toBe(200);
    expect(byModel.headers()['content-disposition']).toBe(`attachment; filename="wallet-history-${today}-to-${today}.csv"`);
    const lines = (await byModel.text()).trimEnd().split('\r\n');
    expect(lines).toHaveLength(2);
    expect(lines[1]).toContain(chatId);
    const byKey = (await (await page.request.get(`${base}/account/usage.csv?key=${keyId}`)).text()).trimEnd().split('\r\n');
    expect(byKey).toHaveLength(4); // the header, the chat, the failed job's charge and its refund (the job's key)
    const bad = await page.request.get(`${base}/account/usage.csv?from=yesterday`);
    expect(bad.status()).toBe(400);
    await page.close();
  });

  const PAGES = ['/', '/models', '/models/mas/image-demo', '/models/mas/echo', '/models/mas/none', '/docs', '/docs/quickstart', '/docs/generations', '/docs/pricing', '/account/usage', '/account/generations/<job>'];
  // Independent page visits, each in a page of its own: several at once (vitest's maxConcurrency).
  it.concurrent.each([390, 1280].flatMap((width) => PAGES.map((path) => ({ width, height: width === 390 ? 844 : 800, path }))))('$path fits a $width px wide window, headings in order, with no serious axe-core violation', async ({ width, height, path: at }) => {
    const page = await context.newPage();
    await page.setViewportSize({ width, height });
    for (const p of [at.replace('<job>', jobId)]) {
      await page.goto(`${base}${p}`);
      // Strings, as the other browser tests write them: this project's TypeScript has no DOM types.
      const { scroll, inner } = (await page.evaluate('({ scroll: document.documentElement.scrollWidth, inner: window.innerWidth })')) as { scroll: number; inner: number };
      expect(scroll, p).toBeLessThanOrEqual(inner);
      expect(inner).toBe(width);
      // Headings in order: one h1, no level skipped going down.
      const levels = (await page.evaluate("[...document.querySelectorAll('h1, h2, h3, h4, h5, h6')].map((h) => Number(h.tagName[1]))")) as number[];
      expect(levels[0], p).toBe(1);
      expect(levels.filter((l) => l === 1), p).toHaveLength(1);
      for (let i = 1; i < levels.length; i++) expect(levels[i]! - levels[i - 1]!, `${p}: h${levels[i - 1]} then h${levels[i]}`).toBeLessThanOrEqual(1);
      // No serious or critical accessibility violation (WCAG 2 A and AA), as main's page walk checks.
      const axe = await new AxeBuilder({ page }).withTags(['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa']).analyze();
      const violations = axe.violations.filter((v) => v.impact === 'serious' || v.impact === 'critical').map((v) => `${v.id}: ${v.nodes.map((n) => n.target.join(' ')).slice(0, 3).join(', ')}`);
      expect(violations, p).toEqual([]);
      await page.screenshot({ path: await artifactPath(`public-${width}${p.replace(/\//g, '-') || '-root'}.png`), fullPage: true });
    }
    await page.close();
  });
});
