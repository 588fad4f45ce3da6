import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { DOC_REDIRECTS, DOCS, DOCS_DIR, docHref, docPage, docsIndexPage, duration, fillIn, loadDocs, renderDoc, slug, type DocContext } from '../../adapters/web/pages/docs.ts';
import type { ModelView } from '../../adapters/web/pages/public.ts';

/**
 * The customer docs (docs/customer/*.md, served at /docs): what every page must and must not say,
 * checked on the rendered pages with this deployment's values filled in. The same checks over
 * HTTP, with the real catalog, are in test/integration/public-docs.test.ts.
 */
const SITE = 'https://mas.example.com';
const model = (m: Partial<ModelView> & Pick<ModelView, 'id' | 'type'>): ModelView =>
  ({ object: 'model', created: 0, owned_by: 'x', name: m.id, description: '', generation_types: [], paid_only: false, pricing: {}, settings: {}, inputs: {}, ...m }) as ModelView;
const MODELS = [
  model({ id: 'acme/premium-chat', type: 'text', paid_only: true, pricing: { input: 9, output: 9 } }),
  model({ id: 'acme/chat-1', type: 'text', name: 'Acme Chat', pricing: { input: 123.5, output: 456 } }),
  model({ id: 'acme/edit', type: 'image', pricing: { from: 3 }, inputs: { image: { accepts: ['image'], required: true } } }),
  model({ id: 'acme/paint', type: 'image', name: 'Acme Paint', pricing: { from: 7 } }),
];
const CTX: DocContext = { publicBaseUrl: SITE, models: MODELS, resultRetentionSeconds: 7200 };
const text = (page: string) => page.replace(/<[^>]+>/g, ' ').replace(/&quot;/g, '"').replace(/&#39;/g, "'").replace(/&amp;/g, '&');

describe('the customer docs', () => {
  const docs = loadDocs();
  const pages = new Map([...docs.values()].map((d) => [d.name, docPage({ signedIn: false }, d, CTX)]));

  it('are the fixed list, read from docs/customer/, and none of them is an operator document', () => {
    expect(DOCS_DIR).toBe(path.resolve(import.meta.dirname, '..', '..', 'docs', 'customer'));
    expect([...docs.keys()]).toEqual([...DOCS]);
    expect(DOCS).toEqual(expect.arrayContaining(['quickstart', 'chat', 'generations', 'files', 'mcp', 'oauth', 'errors', 'pricing']));
    for (const operator of ['deploy', 'operations', 'architecture', 'admin', 'providers', 'observability', 'payments', 'accounts', 'catalog']) expect(DOCS).not.toContain(operator);
    // Old public names lead to the page that covers them now; none shadows a served page.
    for (const [from, to] of Object.entries(DOC_REDIRECTS)) {
      expect(DOCS).toContain(to);
      expect(DOCS).not.toContain(from);
    }
  });

  it('name no issue, placeholder, internal path or operator setting, and no localhost', () => {
    for (const [name, page] of pages) {
      const t = text(page);
      expect(t, name).not.toMatch(/issue \d+/i);
      expect(t, name).not.toMatch(/\{\{|\{PUBLIC_BASE_URL\}|PUBLIC_BASE_URL/);
      expect(t, name).not.toMatch(/localhost|127\.0\.0\.1/);
      // No source files, SQL or configuration of the repository.
      expect(t, name).not.toMatch(/\b(core|adapters|workflows|config|test|scripts)\/[\w/.-]+|\.(ts|sql|yaml)\b/);
      // No operator settings: the only upper-case variable is the customer's own key.
      for (const v of t.match(/\b[A-Z][A-Z0-9]*_[A-Z0-9_]+\b/g) ?? []) expect(v, name).toBe('MAS_API_KEY');
      expect(t, name).not.toMatch(/Temporal|Stripe-Signature|webhooks\/stripe|migration|PostgreSQL|Redis/);
    }
  });

  it('each has a table of contents whose links reach its headings, and headings with unique anchors', () => {
    for (const [name, page] of pages) {
      const doc = docs.get(name)!;
      expect(doc.toc.filter((e) => e.depth === 2).length, name).toBeGreaterThanOrEqual(3);
      const nav = /<nav class="toc" aria-labelledby="on-this-page"><h2 id="on-this-page">On this page<\/h2>([\s\S]*?)<\/nav>/.exec(page);
      expect(nav, name).not.toBeNull();
      const ids = [...page.matchAll(/ id="([^"]+)"/g)].map((m) => m[1]!);
      expect(new Set(ids).size, `${name}: duplicate ids`).toBe(ids.length);
      const targets = [...nav![1]!.matchAll(/href="#([^"]+)"/g)].map((m) => m[1]!);
      expect(targets.length, name).toBe(doc.toc.length);
      for (const t of targets) expect(ids, `${name}: #${t}`).toContain(t);
    }
  });

  it('links go to served docs and their anchors, to pages of the site, or out; never to a file', () => {
    const idsOf = new Map([...pages].map(([name, page]) => [name, new Set([...page.matchAll(/ id="([^"]+)"/g)].map((m) => m[1]!))]));
    for (const [name, page] of pages) {
      const article = /<article class="doc">([\s\S]*)<\/article>/.exec(page)![1]!;
      for (const [, href] of article.matchAll(/href="([^"]+)"/g)) {
        expect(href, name).not.toMatch(/\.md\b|\.\.\//);
        const doc = /^\/docs\/([a-z-]+)(?:#(.+))?$/.exec(href!);
        if (doc) {
          expect(DOCS, `${name} → ${href}`).toContain(doc[1]);
          if (doc[2]) expect([...idsOf.get(doc[1] as (typeof DOCS)[number])!], `${name} → ${href}`).toContain(doc[2]);
        } else if (href!.startsWith('#')) {
          expect([...idsOf.get(name)!], `${name} → ${href}`).toContain(href!.slice(1));
        } else {
          expect(href, name).toMatch(/^(https:\/\/|\/(models|account|signup|login|api\/v1\/docs)\b)/);
        }
      }
    }
  });

  it('show this deployment: its base URL in every request, the catalog\'s models in the examples, its retention', () => {
    const quickstart = text(pages.get('quickstart')!);
    expect(quickstart).toContain(`curl ${SITE}/api/v1/chat/completions`);
    expect(quickstart).toContain(`OpenAI(base_url="${SITE}/api/v1"`);
    expect(quickstart).toContain(`new OpenAI({ baseURL: '${SITE}/api/v1'`);
    expect(quickstart).toMatch(/pip install openai[\s\S]*npm install openai/);
    // The example models: a chat model a new account may use (not paid-only), a media model that needs no input file.
    expect(quickstart).toContain('"model": "acme/chat-1"');
    expect(quickstart).toContain('"model": "acme/paint"');
    for (const [name, page] of pages) {
      for (const [, code] of page.matchAll(/<pre tabindex="0"><code[^>]*>([\s\S]*?)<\/code><\/pre>/g)) {
        const urls = text(code!).match(/https?:\/\/[^\s"'`)]+/g) ?? [];
        for (const url of urls) expect(url, `${name}: ${code}`).toMatch(new RegExp(`^(${SITE.replace(/\./g, '\\.')}|https://(www\\.)?(standardwebhooks\\.com|modelcontextprotocol\\.io))`));
        if (/\bcurl\b/.test(code!)) expect(text(code!), `${name}: ${code}`).toContain(`${SITE}/api/v1`);
      }
    }
    expect(text(pages.get('generations')!)).toContain('kept for 2 hours after the job ends');
  });

  it('their JSON examples and the bodies of their curl requests are valid JSON', () => {
    let checked = 0;
    for (const [name, page] of pages) {
      for (const [, lang, raw] of page.matchAll(/<code class="language-(\w+)">([\s\S]*?)<\/code>/g)) {
        const code = text(raw!).replace(/&lt;/g, '<').replace(/&gt;/g, '>');
        const bodies = [...(lang === 'json' ? [code] : []), ...[...code.matchAll(/-d '([^']*)'/g)].map((m) => m[1]!)];
        for (const body of bodies) {
          expect(() => JSON.parse(body), `${name}: ${body}`).not.toThrow();
          checked++;
        }
      }
    }
    expect(checked).toBeGreaterThanOrEqual(15);
  });

  it('the pricing page lists the catalog\'s models with their prices', () => {
    const pricing = pages.get('pricing')!;
    expect(pricing).toContain('<a href="/models/acme/chat-1">Acme Chat</a>');
    expect(pricing).toContain('123.5 coins ($0.12) per million input tokens<br>456 coins ($0.46) per million output tokens');
    expect(pricing).toContain('from 7 coins ($0.01) per image');
    expect(pricing).toContain('paid accounts only');
    expect(fillIn('<p>{{MODEL_PRICES}}</p>', { ...CTX, models: [] })).toContain('No models are offered right now.');
  });

  it('the index lists every doc, the quickstart first, with this deployment\'s base URL', () => {
    const index = docsIndexPage({ signedIn: false }, CTX);
    const hrefs = [...index.matchAll(/<li><a href="\/docs\/([a-z-]+)">/g)].map((m) => m[1]);
    expect(hrefs).toEqual([...DOCS]);
    expect(hrefs[0]).toBe('quickstart');
    expect(index).toContain(`<code>${SITE}/api/v1</code>`);
    expect(text(index)).not.toMatch(/\{\{|localhost|issue \d+/i);
  });

  it('the operator documents stay in the repository, out of the customer folder', () => {
    const customer = fs.readdirSync(DOCS_DIR);
    for (const operator of ['deploy.md', 'operations.md', 'architecture.md', 'payments.md', 'admin.md', 'providers.md']) {
      expect(customer).not.toContain(operator);
      expect(fs.existsSync(path.join(DOCS_DIR, '..', operator)), operator).toBe(true);
    }
  });
});

describe('rendering a doc', () => {
  it('links between docs go to /docs/<name>; site pages and outside links stay; links to other files are text', () => {
    expect(docHref('api.md')).toBe('/docs/api');
    expect(docHref('./mcp.md#tools')).toBe('/docs/mcp#tools');
    expect(docHref('/account/keys')).toBe('/account/keys');
    expect(docHref('//evil.example/x')).toBeNull();
    expect(docHref('/../etc/passwd')).toBeNull();
    expect(docHref('../README.md#first-requests')).toBeNull();
    expect(docHref('../../etc/passwd.md')).toBeNull();
    expect(docHref('nothere.md')).toBeNull();
    expect(docHref('deploy.md')).toBeNull();
    expect(docHref('https://example.com/x')).toBe('https://example.com/x');
    expect(docHref('#errors')).toBe('#errors');
    const doc = renderDoc('api', '# API\n\nSee [chat](chat.md#tools) and [the code](../core/x.ts).\n\n## Wallet history\n\n### Paging\n\n<script>alert(1)</script>\n');
    expect(doc.title).toBe('API');
    expect(doc.body.value).toContain('<a href="/docs/chat#tools">chat</a>');
    expect(doc.body.value).toContain('the code');
    expect(doc.body.value).not.toContain('../core/x.ts');
    expect(doc.body.value).toContain('<h2 id="wallet-history">');
    expect(doc.body.value).not.toContain('<script>');
    expect(doc.toc).toEqual([
      { depth: 2, id: 'wallet-history', text: 'Wallet history' },
      { depth: 3, id: 'paging', text: 'Paging' },
    ]);
    expect(slug('`GET /models`: the list')).toBe('get-models-the-list');
    // Tables and code blocks scroll in focusable boxes of their own; a table's is named after its section.
    const tables = renderDoc('api', '# API\n\n## Limits & sizes\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n```sh\ncurl x\n```\n').body.value;
    expect(tables).toContain('<div class="table-wrap" role="region" tabindex="0" aria-label="Limits &amp; sizes"><table>');
    expect(tables).toContain('</table></div>');
    expect(tables).toContain('<pre tabindex="0"><code class="language-sh">curl x');
  });

  it('fills in the placeholders, escaped, and leaves unknown ones for the tests to catch', () => {
    const out = fillIn('<code>{{BASE_URL}} {{SITE_URL}} {{CHAT_MODEL}} {{MEDIA_MODEL}} {{RESULT_RETENTION}} {{NOPE}}</code>', { ...CTX, publicBaseUrl: 'https://a.example/x"y/' });
    expect(out).toBe('<code>https://a.example/x&quot;y/api/v1 https://a.example/x&quot;y acme/chat-1 acme/paint 2 hours {{NOPE}}</code>');
    expect(fillIn('{{CHAT_MODEL}}', { ...CTX, models: [] })).toBe('MODEL_ID');
    expect([duration(3600), duration(90 * 60), duration(86_400 * 2), duration(45)]).toEqual(['1 hour', '90 minutes', '2 days', '45 seconds']);
  });
});
