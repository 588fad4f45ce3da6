import fs from 'node:fs';
import path from 'node:path';
import { Marked, type Tokens } from 'marked';
import { escape, html, page, Html } from '../html.ts';
import { apiBase } from './snippets.ts';
import { exampleModels, priceTable, type ModelView } from './public.ts';

/**
 * The customer docs (docs/customer/*.md) as public pages (/docs, /docs/<name>), rendered with
 * marked. Only the files of `DOCS` are served, read once at the first request, by name from this
 * fixed list: a path from the URL never reaches the file system. The operator documents of the
 * repository (docs/*.md: deployment, operations, architecture, payments' internals) are not on
 * the site at all. Links between docs become /docs/<name>; links to site pages (`/account/keys`)
 * and outside addresses stay; links to anything else become plain text.
 *
 * The pages name this deployment: placeholders (`{{BASE_URL}}`, `{{MODEL_PRICES}}`, …, listed in
 * docs/customer/README.md) are filled in when a page is shown, from PUBLIC_BASE_URL and the
 * catalog, so that every example runs as it is against this service.
 *
 * The folder is found beside the code: `docs/customer/` at the repository's root when run from
 * the sources, `dist/docs/customer/` when run from the build (scripts/build.ts copies it there).
 */
export const DOCS = ['quickstart', 'api', 'chat', 'generations', 'files', 'mcp', 'oauth', 'errors', 'pricing'] as const;
export type DocName = (typeof DOCS)[number];

/**
 * Names that were public docs before the customer docs were split from the operator documents:
 * a link to one still lands on the page that now covers it (301). The operator documents' old
 * names (deploy, operations, architecture, admin, providers) are not served at all (404).
 */
export const DOC_REDIRECTS: Readonly<Record<string, DocName>> = {
  catalog: 'pricing',
  payments: 'pricing',
  accounts: 'quickstart',
  limits: 'pricing',
};

export const DOCS_DIR = path.resolve(import.meta.dirname, '..', '..', '..', 'docs', 'customer');

export interface TocEntry {
  depth: 2 | 3;
  id: string;
  /** The heading as inline HTML without tags (already escaped by marked). */
  text: string;
}

export interface RenderedDoc {
  name: DocName;
  title: string;
  summary: string;
  toc: TocEntry[];
  body: Html;
}

/** What the placeholders of a doc are filled in with: this deployment's address and catalog. */
export interface DocContext {
  publicBaseUrl: string;
  /** The catalog as the public pages read it (core's `models.catalog`). */
  models: ModelView[];
  /** RESULT_RETENTION_SECONDS. */
  resultRetentionSeconds: number;
}

/** A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces to dashes. */
export function slug(text: string): string {
  return text
    .toLowerCase()
    .replace(/<[^>]*>/g, '')
    .replace(/[^\p{L}\p{N}\s_-]/gu, '')
    .trim()
    .replace(/\s/g, '-');
}

const isDoc = (name: string): name is DocName => (DOCS as readonly string[]).includes(name);

/** Where a link in a doc goes: another doc's page, a page of the site or an outside address as is, or nowhere (null: shown as text). */
export function docHref(href: string): string | null {
  if (/^(https?:|mailto:)/i.test(href)) return href;
  if (href.startsWith('#')) return href;
  // A page of this site: /models, /account/keys, /api/v1/docs (never //host, which leaves the site).
  if (/^\/(?!\/)[\w./#?=&-]*$/.test(href) && !href.includes('..')) return href;
  const m = /^(?:\.\/)?([a-z0-9-]+)\.md(#[\w-]*)?$/i.exec(href);
  if (m && isDoc(m[1]!.toLowerCase())) return `/docs/${m[1]!.toLowerCase()}${m[2] ?? ''}`;
  return null;
}

type Parser = { parser: { parseInline(tokens: Tokens.Generic[]): string } };

function renderer(toc: TocEntry[]): Marked {
  const marked = new Marked({ gfm: true });
  marked.use({
    renderer: {
      heading(this: Parser, { tokens, depth, text }: Tokens.Heading) {
        const inner = this.parser.parseInline(tokens);
        const id = slug(text);
        if (depth === 2 || depth === 3) toc.push({ depth, id, text: inner.replace(/<[^>]+>/g, '') });
        return `<h${depth} id="${id}">${inner}</h${depth}>\n`;
      },
      link(this: Parser, { href, tokens }: Tokens.Link) {
        const inner = this.parser.parseInline(tokens);
        const to = docHref(href);
        return to === null ? inner : `<a href="${to.replace(/"/g, '&quot;')}">${inner}</a>`;
      },
      // Raw HTML in a doc is shown as text: the pages allow no inline style or script anyway.
      html({ text }: Tokens.HTML | Tokens.Tag) {
        return escape(text);
      },
    },
  });
  return marked;
}

/** One doc, from its markdown: the first `# ` heading is the page's title (the layout's h1), the first paragraph its summary. */
export function renderDoc(name: DocName, markdown: string): RenderedDoc {
  const title = /^#\s+(.+)$/m.exec(markdown)?.[1]?.trim() ?? name;
  const rest = markdown.replace(/^#\s+.+\n/m, '');
  const para = rest
    .split(/\n\s*\n/)
    .map((p) => p.trim())
    .find((p) => p && !/^([#|>-]|```)/.test(p));
  // The first sentence of the first paragraph, as text: shortened, if need be, only once its placeholders are filled in (`docsIndexPage`).
  const first = (para ?? '')
    .replace(/\s+/g, ' ')
    .replace(/\[([^\]]*)\]\([^)]*\)/g, '$1')
    .replace(/[`*]/g, '');
  const summary = /^.+?[.!?](?=\s|$)/.exec(first)?.[0] ?? first;
  const toc: TocEntry[] = [];
  const body = new Html(scrollBoxes(renderer(toc).parse(rest, { async: false })));
  return { name, title, summary, toc, body };
}

/**
 * Wide tables and code blocks scroll inside the page, never widen it (a phone is 390 px): each
 * table in a box named after its section, each code block a box of its own; both take focus,
 * so that a keyboard scrolls them too.
 */
export function scrollBoxes(rendered: string): string {
  let heading = 'Table';
  return rendered.replace(/<h[2-6] id="[^"]*">([\s\S]*?)<\/h[2-6]>|<table>|<\/table>|<pre>/g, (tag, text: string | undefined) => {
    if (text !== undefined) {
      heading = text.replace(/<[^>]+>/g, '').trim() || heading;
      return tag;
    }
    if (tag === '<table>') return `<div class="table-wrap" role="region" tabindex="0" aria-label="${heading.replace(/"/g, '&quot;')}"><table>`;
    if (tag === '</table>') return '</table></div>';
    return '<pre tabindex="0">';
  });
}

/** A duration in seconds in words: `1 hour`, `90 minutes`, `2 days`. */
export function duration(seconds: number): string {
  const unit = (n: number, word: string) => `${n.toLocaleString('en-US')} ${word}${n === 1 ? '' : 's'}`;
  if (seconds % 86_400 === 0) return unit(seconds / 86_400, 'day');
  if (seconds % 3600 === 0) return unit(seconds / 3600, 'hour');
  if (seconds % 60 === 0) return unit(seconds / 60, 'minute');
  return unit(seconds, 'second');
}

/**
 * The placeholders of rendered doc HTML filled in for this deployment. Values are escaped; the
 * price table is the catalog pages' own (public.ts). A placeholder this function does not know
 * is left as it is, which the docs' tests catch.
 */
export function fillIn(rendered: string, ctx: DocContext): string {
  const values = placeholderValues(ctx);
  return rendered
    .replace(/<p>\{\{MODEL_PRICES\}\}<\/p>/g, () => priceTable(ctx.models).value)
    .replace(/\{\{([A-Z_]+)\}\}/g, (token, name: string) => (values[name] === undefined ? token : escape(values[name])));
}

/** The same for plain text (a doc's summary), to be escaped by the page that shows it. */
export const fillInText = (text: string, ctx: DocContext) => {
  const values = placeholderValues(ctx);
  return text.replace(/\{\{([A-Z_]+)\}\}/g, (token, name: string) => values[name] ?? token);
};

function placeholderValues(ctx: DocContext): Record<string, string> {
  const site = ctx.publicBaseUrl.replace(/\/+$/, '');
  const { chat, media } = exampleModels(ctx.models);
  return {
    BASE_URL: apiBase(site),
    SITE_URL: site,
    CHAT_MODEL: chat?.id ?? 'MODEL_ID',
    MEDIA_MODEL: media?.id ?? 'MODEL_ID',
    RESULT_RETENTION: duration(ctx.resultRetentionSeconds),
  };
}

const shorten = (text: string, max = 220) => (text.length > max ? `${text.slice(0, max - 1).trimEnd()}…` : text);

let loaded: Map<DocName, RenderedDoc> | undefined;

/** Every doc of the list, read and rendered once (the files ship with the code; they do not change while it runs). */
export function loadDocs(dir = DOCS_DIR): Map<DocName, RenderedDoc> {
  if (dir === DOCS_DIR && loaded) return loaded;
  const docs = new Map<DocName, RenderedDoc>();
  for (const name of DOCS) {
    const file = path.join(dir, `${name}.md`);
    if (fs.existsSync(file)) docs.set(name, renderDoc(name, fs.readFileSync(file, 'utf8')));
  }
  if (dir === DOCS_DIR) loaded = docs;
  return docs;
}

export const lookupDoc = (name: string) => (isDoc(name) ? loadDocs().get(name) : undefined);

/** Where an old doc name now lives, if it moved (a 301 to `/docs/<new name>`). */
export const movedDoc = (name: string): DocName | undefined => (Object.hasOwn(DOC_REDIRECTS, name) ? DOC_REDIRECTS[name] : undefined);

type Visitor = { signedIn: boolean };

export function docsIndexPage(visitor: Visitor, ctx: DocContext) {
  const docs = [...loadDocs().values()];
  const first = docs[0];
  return page(
    { title: 'Docs', publicNav: { current: '/docs', signedIn: visitor.signedIn } },
    html`<p class="lead">How to use this service from your code, your scripts and your agents. The API's base URL is <code>${apiBase(ctx.publicBaseUrl)}</code>.</p>
${first ? html`<p><a class="button" href="/docs/${first.name}">Start with the ${first.title.toLowerCase()}</a></p>` : ''}
<ul class="doc-list">${docs.map((d) => html`<li><a href="/docs/${d.name}">${d.title}</a><p class="hint">${shorten(fillInText(d.summary, ctx))}</p></li>`)}</ul>
<p>Every endpoint and field is also in <a href="/api/v1/docs">the API reference</a>; the models and their prices are on <a href="/models">Models</a>.</p>`,
  );
}

function tocNav(toc: TocEntry[]): Html | '' {
  if (toc.length === 0) return '';
  const items: Html[] = [];
  for (let i = 0; i < toc.length; i++) {
    const entry = toc[i]!;
    if (entry.depth !== 2) continue;
    const children: TocEntry[] = [];
    for (let j = i + 1; j < toc.length && toc[j]!.depth === 3; j++) children.push(toc[j]!);
    items.push(
      html`<li><a href="#${entry.id}">${new Html(entry.text)}</a>${children.length > 0 ? html`<ul>${children.map((c) => html`<li><a href="#${c.id}">${new Html(c.text)}</a></li>`)}</ul>` : ''}</li>`,
    );
  }
  return html`<nav class="toc" aria-labelledby="on-this-page"><h2 id="on-this-page">On this page</h2><ul>${items}</ul></nav>`;
}

export function docPage(visitor: Visitor, doc: RenderedDoc, ctx: DocContext) {
  const at = DOCS.indexOf(doc.name);
  const next = at >= 0 && at + 1 < DOCS.length ? loadDocs().get(DOCS[at + 1]!) : undefined;
  return page(
    { title: doc.title, publicNav: { current: '/docs', signedIn: visitor.signedIn } },
    html`<p><a href="/docs">All docs</a></p>
${tocNav(doc.toc)}
<article class="doc">${new Html(fillIn(doc.body.value, ctx))}</article>
${next ? html`<p class="doc-next">Next: <a href="/docs/${next.name}">${next.title}</a></p>` : ''}`,
  );
}

export function docNotFoundPage(visitor: Visitor, name: string) {
  return page(
    { title: 'No such doc', publicNav: { current: '/docs', signedIn: visitor.signedIn } },
    html`<p class="error" role="alert">There is no doc called ${name.slice(0, 100)}.</p><p><a href="/docs">All docs</a></p>`,
  );
}
