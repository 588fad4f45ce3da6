import fs from 'node:fs';
import path from 'node:path';
import { Marked, type Tokens } from 'marked';
import { html, page, Html } from '../html.ts';

/**
 * The repository's docs/*.md as public pages (/docs, /docs/<name>), rendered with marked.
 * Only the files of `DOCS` are served, read once at the first request, by name from this fixed
 * list: a path from the URL never reaches the file system. Links between docs become
 * /docs/<name>; links to other repository files (source, README) become plain text.
 *
 * The folder is found beside the code: `docs/` at the repository's root when run from the
 * sources, `dist/docs/` when run from the build (scripts/build.ts copies it there).
 */
export const DOCS = [
  'api',
  'chat',
  'generations',
  'files',
  'mcp',
  'oauth',
  'catalog',
  'accounts',
  'payments',
  'errors',
  'providers',
  'admin',
  'operations',
  'deploy',
  'architecture',
] as const;
export type DocName = (typeof DOCS)[number];

export const DOCS_DIR = path.resolve(import.meta.dirname, '..', '..', '..', 'docs');

export interface RenderedDoc {
  name: DocName;
  title: string;
  summary: string;
  body: Html;
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

/** Where a link in a doc goes: another doc's page, an outside address as is, or nowhere (null: shown as text). */
export function docHref(href: string): string | null {
  if (/^(https?:|mailto:)/i.test(href)) return href;
  if (href.startsWith('#')) return href;
  const m = /^(?:\.\/)?([a-z0-9-]+)\.md(#[\w-]*)?$/i.exec(href);
  if (m && isDoc(m[1]!.toLowerCase())) return `/docs/${m[1]!.toLowerCase()}${m[2] ?? ''}`;
  return null;
}

function renderer(): Marked {
  const marked = new Marked({ gfm: true });
  marked.use({
    renderer: {
      heading(this: { parser: { parseInline(tokens: Tokens.Generic[]): string } }, { tokens, depth, text }: Tokens.Heading) {
        return `<h${depth} id="${slug(text)}">${this.parser.parseInline(tokens)}</h${depth}>\n`;
      },
      link(this: { parser: { parseInline(tokens: Tokens.Generic[]): string } }, { href, tokens }: Tokens.Link) {
        const inner = this.parser.parseInline(tokens);
        const to = docHref(href);
        return to === null ? inner : `<a href="${to.replace(/"/g, '&quot;')}">${inner}</a>`;
      },
      // Raw HTML in a doc is shown as text: the pages allow no inline style or script anyway.
      html({ text }: Tokens.HTML | Tokens.Tag) {
        return text.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);
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
    .find((p) => p && !/^[#|`>-]/.test(p));
  const summary = (para ?? '')
    .replace(/\s+/g, ' ')
    .replace(/\[([^\]]*)\]\([^)]*\)/g, '$1')
    .replace(/[`*]/g, '');
  return { name, title, summary: summary.length > 220 ? `${summary.slice(0, 219).trimEnd()}…` : summary, body: new Html(scrollBoxes(renderer().parse(rest, { async: false }))) };
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

type Visitor = { signedIn: boolean };

export function docsIndexPage(visitor: Visitor) {
  const docs = [...loadDocs().values()];
  return page(
    { title: 'Docs', publicNav: { current: '/docs', signedIn: visitor.signedIn } },
    html`<p>How the service works, for people who call it. Every endpoint and field is also in <a href="/api/v1/docs">the API reference</a>; the models and their prices are on <a href="/models">Models</a>.</p>
<ul class="doc-list">${docs.map((d) => html`<li><a href="/docs/${d.name}">${d.title}</a><p class="hint">${d.summary}</p></li>`)}</ul>`,
  );
}

export function docPage(visitor: Visitor, doc: RenderedDoc) {
  return page(
    { title: doc.title, publicNav: { current: '/docs', signedIn: visitor.signedIn } },
    html`<p><a href="/docs">All docs</a></p>
<article class="doc">${doc.body}</article>`,
  );
}

export function docNotFoundPage(visitor: Visitor, name: string) {
  return page(
    { title: 'No such doc', publicNav: { current: '/docs', signedIn: visitor.signedIn } },
    html`<p class="error" role="alert">There is no doc called ${name.slice(0, 100)}.</p><p><a href="/docs">All docs</a></p>`,
  );
}
