import { COINS_PER_CENT } from '../../core/payments/amounts.ts';

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


/* --- money: coins with the US dollars beside them (issue 48) --- */

/** What one US dollar buys in coins: the coin is defined in US dollars (core/payments/amounts.ts: 1 cent = 10 coins). */
export const COINS_PER_USD = Number(COINS_PER_CENT) * 100;

const groupedCoins = (n: number, decimals: number) => n.toLocaleString('en-US', { maximumFractionDigits: decimals });

/** Coins for a summary, to two decimals at most, grouped: "20,000", "1,234.57"; a non-zero amount that rounds to 0 is "<0.01". */
export function coinsText(coins: number, opts: { signed?: boolean } = {}): string {
  const sign = coins < 0 ? '-' : opts.signed && coins > 0 ? '+' : '';
  const abs = Math.abs(coins);
  if (abs > 0 && abs < 0.005) return `${sign}<0.01`;
  return `${sign}${groupedCoins(abs, 2)}`;
}

/** The US dollars an amount of coins is worth, rounded to the cent: "$20.00"; a non-zero amount under half a cent is "<$0.01". */
export function usdText(coins: number, opts: { signed?: boolean } = {}): string {
  const sign = coins < 0 ? '-' : opts.signed && coins > 0 ? '+' : '';
  const dollars = Math.abs(coins) / COINS_PER_USD;
  if (dollars > 0 && dollars < 0.005) return `${sign}<$0.01`;
  return `${sign}$${dollars.toLocaleString('en-US', { minimumFractionDigits: 2, maximumFractionDigits: 2 })}`;
}

/** "20,000 coins · $20.00": a summary of an amount, rounded to the cent. */
export const moneyText = (coins: number, opts: { signed?: boolean } = {}) => `${coinsText(coins, opts)} coins · ${usdText(coins, opts)}`;

/** The exact amount, every micro-coin of it: "1,234.567891 coins". */
export const exactCoinsText = (coins: number) => `${groupedCoins(coins, 6)} coins`;

/**
 * An amount on a page: the summary (never wrapped), and the exact amount in its title when
 * the summary rounded it.
 */
export function money(coins: number, opts: { signed?: boolean } = {}): Html {
  const text = moneyText(coins, opts);
  if (coinsText(Math.abs(coins)) === groupedCoins(Math.abs(coins), 6)) return html`<span class="fig">${text}</span>`;
  return html`<span class="fig" title="exactly ${opts.signed && coins > 0 ? '+' : ''}${exactCoinsText(coins)}">${text}</span>`;
}

/** An amount for a summary card: the coins on one line, the US dollars under them; the exact amount in the title. */
export function moneyCard(coins: number): Html {
  const exact = coinsText(Math.abs(coins)) === groupedCoins(Math.abs(coins), 6) ? '' : `exactly ${exactCoinsText(coins)}`;
  return html`<span class="fig"${exact ? html` title="${exact}"` : ''}>${coinsText(coins)} coins</span> <span class="usd fig">${usdText(coins)}</span>`;
}

/** Coins alone (where the USD would be noise, e.g. a limit the person typed in coins), grouped, never wrapped. */
export const coinsFig = (coins: number) => html`<span class="fig">${groupedCoins(coins, 6)} coins</span>`;

/* --- dates: one format everywhere, with the time zone (issue 48) --- */

const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];
const pad = (n: number) => String(n).padStart(2, '0');

/** "27 Nov 2026, 14:03 UTC"; an unreadable time is given back as it is. */
export function formatTime(iso: string): string {
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return iso;
  return `${d.getUTCDate()} ${MONTHS[d.getUTCMonth()]} ${d.getUTCFullYear()}, ${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())} UTC`;
}

/** A day ("2026-11-27", or the day of a time) as "27 Nov 2026". */
export function formatDay(day: string): string {
  const d = new Date(/^\d{4}-\d{2}-\d{2}$/.test(day) ? `${day}T00:00:00Z` : day);
  return Number.isNaN(d.getTime()) ? day : `${d.getUTCDate()} ${MONTHS[d.getUTCMonth()]} ${d.getUTCFullYear()}`;
}

/** A time on a page: "27 Nov 2026, 14:03 UTC", the exact ISO time in its `datetime` and title; `none` when there is none. */
export const when = (iso: string | null | undefined, none = '—') => (iso ? html`<time datetime="${iso}" title="${iso}">${formatTime(iso)}</time>` : none);

/** A day (of the UTC calendar) on a page: "27 Nov 2026", the day itself in its `datetime`. */
export const onDay = (day: string) => html`<time datetime="${day}">${formatDay(day)}</time>`;

export interface PageOptions {
  title: string;
  /** Signed in: the navigation and the sign-out form (which needs its CSRF token); `wallet`: the wallet switch. */
  nav?: { email: string; csrf: string; current: string; wallet?: WalletSwitch | undefined } | undefined;
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

/**
 * The wallet the account pages show (docs/organizations.md): the personal one (`current` null) or
 * one organization's; `choices`: the person's organizations. Core checks the membership on every
 * call; this only draws the switch.
 */
export interface WalletSwitch {
  current: { id: string; name: string } | null;
  choices: { id: string; name: string }[];
  /** The page to come back to after switching. */
  back: string;
}

/** The wallet switch above a page's heading, when the person belongs to an organization. */
function walletSwitch(w: WalletSwitch, csrf: string): Html | '' {
  if (w.choices.length === 0) return '';
  const chosen = w.current?.id ?? '';
  return html`<form method="post" action="/account/wallet" class="wallet-switch">
  <input type="hidden" name="_csrf" value="${csrf}"><input type="hidden" name="next" value="${w.back}">
  <label for="wallet-choice">Wallet</label>
  <select id="wallet-choice" name="organization"><option value=""${chosen === '' ? html` selected` : ''}>Personal</option>${w.choices.map((c) => html`<option value="${c.id}"${chosen === c.id ? html` selected` : ''}>${c.name} (organization)</option>`)}</select>
  <button type="submit" class="secondary">Switch</button>
</form>`;
}

const PUBLIC_NAV = [
  ['/models', 'Models'],
  ['/docs', 'Docs'],
  ['/api/v1/docs', 'API reference'],
] as const;

/** The account pages (overview, keys, usage, billing, settings, apps), then the public pages a customer keeps using. */
const NAV = [
  ['/account', 'Overview'],
  ['/account/keys', 'API keys'],
  ['/account/usage', 'Usage'],
  ['/account/billing', 'Billing'],
  ['/account/settings', 'Settings'],
  ['/account/apps', 'Connected apps'],
  ['/account/organizations', 'Organizations'],
  ['/models', 'Models'],
  ['/docs', 'Docs'],
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
 * the window (a laptop with a wide table), so that a page never does. The box can take focus, to
 * be scrolled by keyboard, and is a region named after the section's heading. Each cell gets its
 * column's heading as `data-label`: on a phone the stylesheet shows each row as a card, every
 * cell under its label, so nothing (an Edit or Revoke link) hides off the edge. A table the page
 * already put in such a box is left in it. Values are escaped before they get here, so `<table`
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
    const table = labelCells(m[0]);
    out += /<div class="table-wrap"[^>]*>\s*$/.test(before) ? table : `<div class="table-wrap" role="region" tabindex="0" aria-label="${heading}">${table}</div>`;
    last = m.index + m[0].length;
  }
  return out + body.slice(last);
}

/** Each body cell of a table labelled with its column's heading (`data-label`), for the phone's cards. */
function labelCells(table: string): string {
  const head = /<thead\b[\s\S]*?<\/thead>/.exec(table)?.[0];
  if (!head) return table;
  const labels = [...head.matchAll(/<th\b[^>]*>([\s\S]*?)<\/th>/g)].map((m) => m[1]!.replace(/<[^>]+>/g, '').trim());
  return table.replace(/<tbody\b[\s\S]*?<\/tbody>/, (tbody) =>
    tbody.replace(/<tr\b[^>]*>[\s\S]*?<\/tr>/g, (row) => {
      let i = 0;
      return row.replace(/<td\b([^>]*)>/g, (tag, attrs: string) => {
        const label = labels[i++] ?? '';
        return label && !/\b(data-label|colspan)=/.test(attrs) ? `<td${attrs} data-label="${label}">` : tag;
      });
    }),
  );
}

export function page(opts: PageOptions, body: Html): string {
  const admin = opts.area === 'admin';
  const nav = admin ? ADMIN_NAV : NAV;
  // With an organization's wallet chosen, Billing is the organization's.
  const org = opts.nav?.wallet?.current?.id;
  const target = (href: string) => (org && href === '/account/billing' ? `${href}?${new URLSearchParams({ organization: org }).toString()}` : href);
  const links = (current: string) => nav.map(([href, label]) => html`<a href="${target(href)}"${current === href ? html` aria-current="page"` : ''}>${label}</a>`);
  const label = admin ? 'Admin' : 'Account';
  return html`<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <title>${opts.title} · Model Access Service${admin ? ' admin' : ''}</title>
  <link rel="stylesheet" href="/assets/app.css">
</head>
<body>
  <header${opts.nav ? html` class="signed-in"` : ''}>
    <a class="brand" href="${admin ? '/admin' : opts.nav ? '/account' : '/'}">Model Access Service${admin ? ' · admin' : ''}</a>
    ${opts.nav
      ? html`<nav class="wide" aria-label="${label}">${links(opts.nav.current)}</nav>
    <details class="menu narrow">
      <summary>Menu</summary>
      <nav aria-label="${label}"><span class="who-menu">${opts.nav.email}</span>${links(opts.nav.current)}</nav>
    </details>
    <form method="post" action="${admin ? '/admin/logout' : '/logout'}" class="signout">
      <input type="hidden" name="_csrf" value="${opts.nav.csrf}">
      <span class="who" title="${opts.nav.email}">${opts.nav.email}</span> <button type="submit">Sign out</button>
    </form>`
      : admin
        ? ''
        : html`<nav class="public" aria-label="Site">${PUBLIC_NAV.map(([href, label]) => html`<a href="${href}"${opts.publicNav?.current === href ? html` aria-current="page"` : ''}>${label}</a>`)}</nav>
    <nav class="public-account" aria-label="Account">${opts.publicNav?.signedIn
      ? html`<a href="/account">Your account</a>`
      : html`<a href="/login"${opts.publicNav?.current === '/login' ? html` aria-current="page"` : ''}>Sign in</a> <a href="/signup"${opts.publicNav?.current === '/signup' ? html` aria-current="page"` : ''}>Sign up</a>`}</nav>`}
  </header>
  <main${opts.pollSeconds ? html` data-poll-seconds="${opts.pollSeconds}"` : ''}>
    ${opts.nav?.wallet ? walletSwitch(opts.nav.wallet, opts.nav.csrf) : ''}
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

/**
 * A form field's error, beside the field (GOV.UK's pattern): the message goes in the field's
 * label, above the input, and the input is marked invalid and described by it.
 */
export const fieldError = (id: string, text: string | undefined) => (text ? html`<span class="field-error" id="${id}-error">${text}</span>` : '');
export const invalidAttrs = (id: string, text: string | undefined) => (text ? html` aria-invalid="true" aria-describedby="${id}-error"` : '');

/** An empty list, with what to do next (GOV.UK: an empty state says how to fill it). */
export const emptyState = (text: string, next?: Html) => html`<div class="empty"><p>${text}</p>${next ? html`<p>${next}</p>` : ''}</div>`;
