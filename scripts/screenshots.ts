/**
 * Screenshots of every page, as a customer and as an operator see them, at a phone's width
 * (390 px) and a laptop's (1280 px): `node --import tsx scripts/screenshots.ts <out-dir>`.
 *
 * It runs the service as `npm start` does (dist/main.js, built first when a source is newer),
 * in a fresh DATA_DIR of its own (the embedded PostgreSQL and Temporal dev server, the demo
 * account with its key), gives it some data through the API and the CLI (chats, a media job,
 * more keys, an admin user), then opens each page in Debian's Chromium (scripts/support/system-tools.ts)
 * and writes `<area>-<page>-<width>.jpg` (full page, JPEG quality 70) into <out-dir>.
 * A page that answers 404 (one that does not exist in this version of the code) is skipped.
 * Payments are turned on against an address where nothing listens: the billing forms show,
 * nothing is paid.
 */
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import fs from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { chromium, type BrowserContext } from 'playwright-core';
import { build, buildIsStale } from './build.ts';
import { ROOT, runMas, spawnEntry } from './support/process.ts';
import { ensureSystemTool } from './support/system-tools.ts';

const out = path.resolve(process.argv[2] ?? 'docs/screenshots/new');
const WIDTHS = [
  { name: '390', width: 390, height: 844 },
  { name: '1280', width: 1280, height: 800 },
] as const;

const freePort = () =>
  new Promise<number>((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as net.AddressInfo;
      s.close(() => resolve(port));
    });
  });

async function main() {
  // The service needs the pinned Node.js 24 (package.json): run again with it when started by an older one.
  const pinned = path.join(ROOT, 'node_modules', '.bin', 'node');
  if (Number(process.versions.node.split('.')[0]) < 24 && existsSync(pinned)) {
    const again = spawnSync(pinned, [...process.execArgv, ...process.argv.slice(1)], { stdio: 'inherit' });
    process.exitCode = again.status ?? 1;
    return;
  }
  await fs.mkdir(out, { recursive: true });
  if (await buildIsStale()) {
    console.log('building dist/ …');
    await build();
  }
  const tmp = await fs.mkdtemp(path.join(os.tmpdir(), 'mas-screenshots-'));
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const plans = path.join(tmp, 'plans.yaml');
  await fs.writeFile(
    plans,
    'plans:\n  - name: Starter\n    stripe_price_id: price_starter\n    coins_per_period: 10000\n    price_usd: "10.00"\n    period: month\n  - name: Pro\n    stripe_price_id: price_pro\n    coins_per_period: 50000\n    price_usd: "45.00"\n    period: month\n',
  );
  const env = {
    DATA_DIR: path.join(tmp, 'data'),
    HOST: '127.0.0.1',
    PORT: String(port),
    PUBLIC_BASE_URL: base,
    LOG_LEVEL: 'warn',
    // The billing forms, with nothing behind them.
    STRIPE_SECRET_KEY: 'sk_test_screenshots',
    STRIPE_WEBHOOK_SECRET: 'whsec_screenshots',
    STRIPE_API_URL: 'http://127.0.0.1:9',
    PLANS_FILE: plans,
  };
  console.log(`starting the service in ${tmp} …`);
  let server = spawnEntry('main', { env, redact: 'log', name: 'the service' });
  const stopServer = () => server.stop('SIGTERM', 30_000);
  try {
    let started: RegExpMatchArray;
    try {
      started = await server.waitFor(/shown only this once:\s+(mas_\S+)[\s\S]*?one-time link[^\n]*:\s+(\S+\/login\/link\?token=\S+)/, 240_000);
    } catch (err) {
      // This version of the code may not know price_usd and period in the plans file: without them.
      if (!/plans/.test(server.output())) throw err;
      await server.stop();
      await fs.writeFile(plans, (await fs.readFile(plans, 'utf8')).replace(/\n {4}(price_usd|period): .*/g, ''));
      await fs.rm(env.DATA_DIR, { recursive: true, force: true });
      server = spawnEntry('main', { env, redact: 'log', name: 'the service' });
      started = await server.waitFor(/shown only this once:\s+(mas_\S+)[\s\S]*?one-time link[^\n]*:\s+(\S+\/login\/link\?token=\S+)/, 240_000);
    }
    const [, key, loginLink] = started as unknown as [string, string, string];
    await server.waitFor(/listening on/, 120_000);
    const api = async (p: string, body?: unknown, headers: Record<string, string> = {}) => {
      const res = await fetch(`${base}/api/v1${p}`, {
        method: body ? 'POST' : 'GET',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...headers },
        body: body ? JSON.stringify(body) : undefined,
      });
      return (await res.json()) as Record<string, unknown>;
    };

    console.log('making data: chats, a media job, keys, an admin …');
    for (const text of ['Hello', 'Write a haiku about lighthouses', 'Summarise the plot of Hamlet in one line']) {
      await api('/chat/completions', { model: 'mas/echo', messages: [{ role: 'user', content: text }], max_tokens: 60 });
    }
    const job = await api('/generations', { model: 'mas/image-demo', prompt: 'a lighthouse at dusk', settings: { size: 256 } }, { prefer: 'wait=30' });
    const jobId = String(job.id ?? '');
    const mas = async (args: string[]) => {
      const r = await runMas(args, env);
      if (r.code !== 0) throw new Error(`mas ${args.join(' ')}: ${r.stderr || r.stdout}`);
      return r.stdout;
    };
    await mas(['key', 'create', '--account', 'demo@example.com', '--name', 'production server']);
    await mas(['key', 'create', '--account', 'demo@example.com', '--name', 'laptop']);
    const adminOut = await mas(['admin', 'create', '--email', 'operator@example.com', '--role', 'operator']);
    const adminLink = /\S+\/admin\/login\/link\?token=\S+/.exec(adminOut)?.[0];
    if (!adminLink) throw new Error(`no admin link in: ${adminOut}`);

    const browser = await chromium.launch({ executablePath: await ensureSystemTool('chromium'), headless: true, args: process.getuid?.() === 0 ? ['--no-sandbox'] : [] });
    let count = 0;
    let bytes = 0;
    const shoot = async (context: BrowserContext, area: string, paths: string[]) => {
      for (const w of WIDTHS) {
        const page = await context.newPage();
        await page.setViewportSize({ width: w.width, height: w.height });
        for (const p of paths) {
          const res = await page.goto(`${base}${p}`, { waitUntil: 'networkidle' });
          if (res?.status() === 404 && !p.includes('no-such')) {
            console.log(`  skipped ${p} (404)`);
            continue;
          }
          const slug = p.replace(/\b(acct|key|gen)_\w+/g, '$1').replace(/%2F/g, '-').replace(/[^\w]+/g, '-').replace(/^-+|-+$/g, '');
          const name = `${slug === area ? `${area}-${area === 'admin' ? 'dashboard' : 'overview'}` : slug.startsWith(`${area}-`) ? slug : `${area}-${slug || 'home'}`}-${w.name}.jpg`;
          const file = path.join(out, name);
          await page.screenshot({ path: file, fullPage: true, type: 'jpeg', quality: 70 });
          bytes += (await fs.stat(file)).size;
          count++;
        }
        await page.close();
      }
    };

    // Signed out.
    const visitor = await browser.newContext();
    await shoot(visitor, 'public', ['/', '/models', '/models/mas/echo', '/docs', '/api/v1/docs', '/login', '/signup', '/password/forgot', '/admin/login', '/no-such-page']);
    await visitor.close();

    // The customer: the demo account, through its one-time link.
    const customer = await browser.newContext();
    const page = await customer.newPage();
    await page.goto(loginLink);
    await page.getByRole('button', { name: /Sign in/ }).click();
    await page.waitForURL(/\/account/);
    await page.goto(`${base}/account/keys`);
    const keyId = await page.locator('a[href$="/edit"]').first().getAttribute('href').then((h) => /key_\w+/.exec(h ?? '')?.[0] ?? '');
    await page.close();
    await shoot(customer, 'account', [
      '/account',
      '/account/keys',
      `/account/keys/${keyId}/edit`,
      `/account/keys/${keyId}/revoke`,
      '/account/usage',
      '/account/billing',
      '/account/settings',
      '/account/apps',
      ...(jobId ? [`/account/generations/${jobId}`] : []),
    ]);
    await customer.close();

    // The operator: the admin user's one-time link, a password.
    const operator = await browser.newContext();
    const adminPage = await operator.newPage();
    await adminPage.goto(adminLink);
    await adminPage.getByLabel(/Choose a password/).fill('a long admin passphrase for screenshots');
    await adminPage.getByRole('button', { name: 'Continue' }).click();
    await adminPage.waitForURL(/\/admin$/);
    await adminPage.goto(`${base}/admin/accounts`);
    const accountId = await adminPage.locator('a[href^="/admin/accounts/acct_"]').first().getAttribute('href').then((h) => /acct_\w+/.exec(h ?? '')?.[0] ?? '');
    await adminPage.close();
    await shoot(operator, 'admin', [
      '/admin',
      '/admin/accounts',
      `/admin/accounts/${accountId}`,
      `/admin/accounts/${accountId}/top-up`,
      '/admin/jobs',
      '/admin/jobs?from=2026-13-45',
      ...(jobId ? [`/admin/jobs/${jobId}`] : []),
      '/admin/models',
      `/admin/models/${encodeURIComponent('mas/image-demo')}`,
      '/admin/margin',
      '/admin/audit',
      '/admin/admins',
    ]);
    await operator.close();
    await browser.close();
    console.log(`${count} screenshots, ${(bytes / 1e6).toFixed(1)} MB, in ${out}`);
  } finally {
    await stopServer();
    await fs.rm(tmp, { recursive: true, force: true });
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exitCode = 1;
});
