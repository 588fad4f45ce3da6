import path from 'node:path';
import type { MikroORM } from '@mikro-orm/postgresql';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadCatalogFile } from '../../config/catalog.ts';
import { seedModels, validateCatalog } from '../../core/catalog/catalog.ts';
import { createContext } from '../../core/context.ts';
import { createCaller } from '../../core/router.ts';
import { DOC_REDIRECTS, DOCS } from '../../adapters/web/pages/docs.ts';
import { openTestOrm, testDeps } from '../support/db.ts';
import { createTestApp, serve } from '../support/http.ts';
import { ROOT } from '../support/process.ts';

/**
 * Every public page as a customer gets it from a deployment whose PUBLIC_BASE_URL is a real
 * address: no issue number, placeholder or localhost on any of them; the docs are the customer
 * docs, each with a table of contents and requests that name this deployment; the operator
 * documents are not served; the landing page and the pricing doc show the catalog's models at
 * the catalog's prices (a model seeded here with a price of its own, and one disabled).
 */
const SITE = 'https://models.example.net';
let orm: MikroORM;
let served: Awaited<ReturnType<typeof serve>>;
const pricedId = `acme-test/priced-${process.pid}`;
const disabledId = `acme-test/disabled-${process.pid}`;
/** The catalog as the public pages read it, and the chat model their examples use: the first a new account may call. */
let models: { id: string; type: string; paid_only: boolean }[] = [];
let exampleChat = '';

beforeAll(async () => {
  orm = await openTestOrm();
  const deps = testDeps(orm, { publicBaseUrl: SITE });
  const shipped = await loadCatalogFile(path.join(ROOT, 'config', 'models.yaml'), 50n);
  await seedModels(orm.em.fork(), shipped);
  const echo = shipped.raw.get('mas/echo') as Record<string, unknown>;
  // In-app prices; the API's are half (API_PRICE_PERCENT 50): 1,234 and 4,321 coins per million tokens.
  const extra = [
    { ...echo, id: pricedId, name: 'Priced Chat', example: undefined, pricing: { input_per_million: 2468, output_per_million: 8642 } },
    { ...echo, id: disabledId, name: 'Hidden Chat', example: undefined },
  ];
  await seedModels(orm.em.fork(), validateCatalog({ providers: { local: { kind: 'local' } }, models: extra }, 50n));
  await createCaller(createContext(deps, { kind: 'internal' })).admin.models.disable({ id: disabledId, reason: 'test: hidden from the public pages' });
  served = await serve(createTestApp({ deps, publicBaseUrl: SITE }));
  models = (await createCaller(createContext(deps, { kind: 'none' })).models.catalog({})).data;
  exampleChat = models.find((m) => m.type === 'text' && !m.paid_only)!.id;
});
afterAll(async () => {
  await served?.close();
  await orm?.close();
});

const get = (p: string) => fetch(`${served.base}${p}`, { headers: { accept: 'text/html' }, redirect: 'manual' });
/** What a reader sees: the text without tags, entities read back. */
const text = (page: string) =>
  page
    .replace(/<script[\s\S]*?<\/script>/g, ' ')
    .replace(/<[^>]+>/g, ' ')
    .replace(/&quot;/g, '"')
    .replace(/&#39;/g, "'")
    .replace(/&lt;/g, '<')
    .replace(/&gt;/g, '>')
    .replace(/&amp;/g, '&');

describe('the public pages of a deployment with PUBLIC_BASE_URL set', () => {
  it('no page names an issue, a placeholder or localhost', async () => {
    expect(models.map((m) => m.id)).toContain(pricedId);
    const pages = [
      '/',
      '/models',
      ...models.map((m) => `/models/${m.id}`),
      '/docs',
      ...DOCS.map((d) => `/docs/${d}`),
      '/docs/no-such-doc',
      '/models/no/such-model',
      '/login',
      '/signup',
      '/signup/sent',
      '/password/forgot',
      '/password/forgot/sent',
      '/no-such-page',
    ];
    for (const p of pages) {
      const res = await get(p);
      expect(res.status, p).toBeLessThan(p.includes('no-such') || p.includes('no/such') ? 500 : 300);
      const body = await res.text();
      const seen = text(body);
      expect(seen, p).not.toMatch(/issue \d+/i);
      expect(body, p).not.toContain('{PUBLIC_BASE_URL}');
      expect(body, p).not.toContain('{{');
      expect(body, p).not.toMatch(/localhost/i);
    }
  });

  it('/docs lists the customer docs only, the quickstart first; every old name of a moved page redirects', async () => {
    const index = await (await get('/docs')).text();
    const listed = [...index.matchAll(/<li><a href="\/docs\/([a-z-]+)">/g)].map((m) => m[1]);
    expect(listed).toEqual([...DOCS]);
    expect(listed[0]).toBe('quickstart');
    expect(index).toContain(`<code>${SITE}/api/v1</code>`);
    for (const [from, to] of Object.entries(DOC_REDIRECTS)) {
      const res = await get(`/docs/${from}`);
      expect(res.status, from).toBe(301);
      expect(res.headers.get('location'), from).toBe(`/docs/${to}`);
    }
  });

  it('the operator documents are not served, under any spelling', async () => {
    for (const name of ['deploy', 'operations', 'architecture', 'admin', 'providers', 'observability', 'DEPLOY', 'deploy.md', '..%2Fdeploy', '..%2F..%2Fdocs%2Fdeploy.md', '..%2Fpayments']) {
      const res = await get(`/docs/${name}`);
      expect(res.status, name).toBe(404);
      const body = await res.text();
      expect(body, name).not.toMatch(/PUBLIC_BASE_URL|DATABASE_URL|STRIPE_SECRET_KEY|Temporal/);
    }
  });

  it('each doc has a table of contents, and its requests use this deployment\'s base URL', async () => {
    for (const name of DOCS) {
      const page = await (await get(`/docs/${name}`)).text();
      const toc = /<nav class="toc"[^>]*>[\s\S]*?<\/nav>/.exec(page)?.[0];
      expect(toc, name).toBeDefined();
      const anchors = [...toc!.matchAll(/href="#([^"]+)"/g)].map((m) => m[1]!);
      expect(anchors.length, name).toBeGreaterThanOrEqual(3);
      for (const a of anchors) expect(page, `${name}: #${a}`).toContain(` id="${a}"`);
      const code = [...page.matchAll(/<pre[^>]*><code[^>]*>([\s\S]*?)<\/code><\/pre>/g)].map((m) => text(m[1]!));
      for (const c of code.filter((c) => /\bcurl\b|OpenAI\(|\/api\/v1/.test(c))) expect(c, name).toContain(`${SITE}/api/v1`);
      for (const c of code) expect(c, name).not.toMatch(/https?:\/\/(?!models\.example\.net|www\.standardwebhooks\.com)[^\s"'`]*\/api\/v1/);
    }
    const quickstart = text(await (await get('/docs/quickstart')).text());
    expect(quickstart).toContain(`curl ${SITE}/api/v1/chat/completions`);
    expect(quickstart).toContain(`OpenAI(base_url="${SITE}/api/v1"`);
    expect(quickstart).toContain(`new OpenAI({ baseURL: '${SITE}/api/v1'`);
    // The examples' model is one the catalog offers to a new account.
    expect(quickstart).toContain(`"model": "${exampleChat}"`);
  });

  it('the pricing doc and the landing page show the catalog\'s models at its prices, not a disabled one', async () => {
    const pricing = await (await get('/docs/pricing')).text();
    const landing = await (await get('/')).text();
    for (const [name, page] of [['pricing', pricing], ['landing', landing]] as const) {
      expect(page, name).toContain(`<a href="/models/${pricedId}">Priced Chat</a>`);
      expect(page, name).toContain('1,234 coins ($1.23) per million input tokens<br>4,321 coins ($4.32) per million output tokens');
      expect(page, name).toContain('<a href="/models/mas/echo">Echo (demo)</a>');
      expect(page, name).toContain('50 coins ($0.05) per million input tokens<br>200 coins ($0.20) per million output tokens');
      expect(page, name).not.toContain(disabledId);
    }
    expect(pricing).toContain('from 5 coins ($0.01) per image');
  });

  it('the landing page shows a request that runs against this deployment, and the way in', async () => {
    const res = await get('/');
    expect(res.status).toBe(200);
    expect(res.headers.get('cache-control')).toBe('public, max-age=300');
    const page = await res.text();
    const seen = text(page);
    expect(seen).toContain(`curl ${SITE}/api/v1/chat/completions`);
    expect(seen).toContain(`OpenAI(base_url="${SITE}/api/v1"`);
    expect(seen).toContain(`new OpenAI({ baseURL: "${SITE}/api/v1"`);
    expect(seen).toContain(`"model": "${exampleChat}"`);
    for (const href of ['/signup', '/login', '/docs', '/docs/quickstart', '/models', '/api/v1/docs']) expect(page).toContain(`href="${href}"`);
  });
});
