/**
 * Server-rendered HTML, no build step: a tagged template that escapes every value, and the
 * page layout. Pages work without JavaScript; the one script (the copy button) is a file, as
 * the security policy allows no inline script.
 */
export class Html {
  readonly value: string;
  constructor(value: string) {
    this.value = value;
  }
  toString(): string {
    return this.value;
  }
}

const ESCAPES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };
export const escape = (text: string) => text.replace(/[&<>"']/g, (c) => ESCAPES[c]!);

function render(value: unknown): string {
  if (value instanceof Html) return value.value;
  if (Array.isArray(value)) return value.map(render).join('');
  if (value === null || value === undefined || value === false) return '';
  return escape(String(value));
}

export function html(strings: TemplateStringsArray, ...values: unknown[]): Html {
  return new Html(strings.reduce((out, s, i) => out + s + (i < values.length ? render(values[i]) : ''), ''));
}

export interface PageOptions {
  title: string;
  /** Signed in: the navigation and the sign-out form (which needs its CSRF token). */
  nav?: { email: string; csrf: string; current: string } | undefined;
  /** Which site's navigation: the account pages' (default) or the admin pages'. */
  area?: 'account' | 'admin';
  /**
   * A page waiting for something to land: /assets/wait.js asks for it again every so many seconds
   * and shows the answer in place once it no longer waits. Not a meta refresh, which reloads the
   * page under a screen reader's feet (WCAG 2.2.1; axe's meta-refresh rule).
   */
  pollSeconds?: number | undefined;
  /**
   * Without `nav` (signed out, or a public page): which link of the public navigation is this
   * page, and whether the visitor has a session (then "Your account" stands for Sign in / Sign up).
   */
  publicNav?: { current?: string | undefined; signedIn?: boolean | undefined } | undefined;
}

const PUBLIC_NAV = [
  ['/models', 'Models'],
  ['/docs', 'Docs'],
  ['/api/v1/docs', 'API reference'],
] as const;

const NAV = [
  ['/account', 'Overview'],
  ['/account/keys', 'API keys'],
  ['/account/apps', 'Connected apps'],
  ['/account/usage', 'Usage'],
] as const;

const ADMIN_NAV = [
  ['/admin', 'Dashboard'],
  ['/admin/accounts', 'Accounts'],
  ['/admin/jobs', 'Jobs'],
  ['/admin/models', 'Models'],
  ['/admin/margin', 'Margin'],
  ['/admin/audit', 'Audit log'],
  ['/admin/admins', 'Admins'],
] as const;

/**
 * Every table of a page in a box of its own that scrolls sideways when the table is wider than
 * the window, so that a page never does (a phone is 390 px wide). The box can take focus, to be
 * scrolled by keyboard, and is a region named after the section's heading. A table the page
 * already put in such a box is left as it is. Values are escaped before they get here, so `<table`
 * is always markup.
 */
export function wrapTables(body: string, fallbackLabel: string): string {
  let out = '';
  let last = 0;
  let heading = fallbackLabel;
  const tags = /<h[1-3][^>]*>([\s\S]*?)<\/h[1-3]>|<table\b[\s\S]*?<\/table>/g;
  for (let m = tags.exec(body); m; m = tags.exec(body)) {
    if (m[1] !== undefined) {
      heading = m[1].replace(/<[^>]+>/g, '').trim() || fallbackLabel;
      continue;
    }
    const before = body.slice(last, m.index);
    out += before;
    out += /<div class="table-wrap"[^>]*>\s*$/.test(before) ? m[0] : `<div class="table-wrap" role="region" tabindex="0" aria-label="${heading}">${m[0]}</div>`;
    last = m.index + m[0].length;
  }
  return out + body.slice(last);
}

export function page(opts: PageOptions, body: Html): string {
  const admin = opts.area === 'admin';
  const nav = admin ? ADMIN_NAV : NAV;
  return html`<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <title>${opts.title} · Model Access Service${admin ? ' admin' : ''}</title>
  <link rel="stylesheet" href="/assets/app.css">
</head>
<body>
  <header>
    <a class="brand" href="${admin ? '/admin' : opts.nav ? '/account' : '/'}">Model Access Service${admin ? ' · admin' : ''}</a>
    ${opts.nav
      ? html`<nav>${nav.map(([href, label]) => html`<a href="${href}"${opts.nav!.current === href ? html` aria-current="page"` : ''}>${label}</a>`)}</nav>
    <form method="post" action="${admin ? '/admin/logout' : '/logout'}" class="signout">
      <input type="hidden" name="_csrf" value="${opts.nav.csrf}">
      <span title="${opts.nav.email}">${opts.nav.email}</span> <button type="submit">Sign out</button>
    </form>`
      : admin
        ? ''
        : html`<nav class="public" aria-label="Site">${PUBLIC_NAV.map(([href, label]) => html`<a href="${href}"${opts.publicNav?.current === href ? html` aria-current="page"` : ''}>${label}</a>`)}</nav>
    <nav class="public-account" aria-label="Account">${opts.publicNav?.signedIn
      ? html`<a href="/account">Your account</a>`
      : html`<a href="/login"${opts.publicNav?.current === '/login' ? html` aria-current="page"` : ''}>Sign in</a> <a href="/signup"${opts.publicNav?.current === '/signup' ? html` aria-current="page"` : ''}>Sign up</a>`}</nav>`}
  </header>
  <main${opts.pollSeconds ? html` data-poll-seconds="${opts.pollSeconds}"` : ''}>
    <h1>${opts.title}</h1>
    ${new Html(wrapTables(body.value, escape(opts.title)))}
  </main>
  <script src="/assets/copy.js"></script>
  ${opts.pollSeconds ? html`<script src="/assets/wait.js"></script>` : ''}
</body>
</html>`.value;
}

/** A message box for an error or a notice. */
export const notice = (kind: 'error' | 'info', text: string | undefined) => (text ? html`<p class="${kind}" role="${kind === 'error' ? 'alert' : 'status'}">${text}</p>` : '');
