import type { AppConnectionView } from '../../../core/apps/connections.ts';
import { coinsFig, emptyState, fieldError, html, invalidAttrs, money, moneyCard, notice, page, when, type Html } from '../html.ts';
import type { Snippet } from './snippets.ts';

type Nav = { email: string; csrf: string };
type Balance = { coins: number; subscription_coins: number; purchased_coins: number; held_coins: number; paid_account: boolean };
type Key = {
  id: string;
  name: string;
  prefix: string;
  created_at: string;
  last_used_at: string | null;
  revoked_at: string | null;
  spend_limit_coins: number | null;
  spend_limit_period: 'total' | 'monthly' | null;
  expires_at: string | null;
  allowed_models: string[] | null;
  usage_coins: number;
  remaining_coins: number | null;
  type?: 'standard' | 'management';
  /** Switched off by its owner or an admin: refused (401) until switched on again. */
  disabled?: boolean;
};
type ModelChoice = { id: string; name: string };

/** A form refused by core: its message, and the field it names (shown beside that field). */
export interface FormError {
  message: string;
  param?: string | undefined;
}
/** The message beside `field` when the error names it. */
const errorOf = (e: FormError | undefined, field: string) => (e && e.param === field ? e.message : undefined);

/** The balance as four cards: spendable, and the pockets it is made of (coins and their USD). */
export function balanceCards(b: Balance): Html {
  const card = (label: string, coins: number) => html`<div class="card">${label} <strong>${moneyCard(coins)}</strong></div>`;
  return html`<div class="cards">
  ${card('Spendable', b.coins)}
  ${card('Subscription', b.subscription_coins)}
  ${card('Purchased', b.purchased_coins)}
  ${card('Held by running requests', b.held_coins)}
</div>`;
}

/**
 * The overview: the balance, what to do next, and where everything else is. Keys, usage,
 * billing and settings are pages of their own (issue 48: the one long page was 2,759 px on a phone).
 */
export function overviewPage(
  nav: Nav,
  v: { balance: Balance; paymentsEnabled: boolean; activeKeys: number; mail?: { top: Html | string } | undefined; organization?: { id: string; name: string; role: string } | undefined },
) {
  const b = v.balance;
  const org = v.organization;
  // An organization's wallet: its billing page is the organization's (docs/organizations.md).
  const billing = org ? `/account/billing?${new URLSearchParams({ organization: org.id }).toString()}` : '/account/billing';
  return page(
    { title: org ? `Overview of ${org.name}` : 'Overview', nav: { ...nav, current: '/account' } },
    html`${v.mail?.top ?? ''}${org ? html`<p class="info">This is the shared wallet of the organization <a href="/account/organizations/${encodeURIComponent(org.id)}">${org.name}</a>, where you are ${org.role === 'member' ? 'a member' : `an ${org.role}`}. Switch to your personal wallet above.</p>` : ''}${balanceCards(b)}
<p>${b.paid_account ? `This is a paid ${org ? 'organization' : 'account'}: every model is open to it.` : `This ${org ? 'organization' : 'account'} is not paid yet: models marked "paid accounts only" need a first top-up or a subscription.`}</p>
<section id="add-credits" aria-labelledby="add-credits-heading">
<h2 id="add-credits-heading">Add credits</h2>
${v.paymentsEnabled
  ? html`<p class="links"><a class="button" href="${billing}#add-credits">Add credits</a> <a href="${billing}#plan">Plans</a> <a href="${billing}#auto-top-up">Auto top-up</a></p>`
  : html`<p>Payments are not set up on this server. Coins are added by its operator: contact them with your account's email.</p>`}
</section>
<h2>Next steps</h2>
<ul class="links next-steps">
  <li>${v.activeKeys === 0 ? html`<a href="/account/keys#create">Create your first API key</a>` : html`<a href="/account/keys">Your API keys</a> (${v.activeKeys} active)`}</li>
  <li><a href="/docs">Read the docs</a> or <a href="/api/v1/docs">the API reference</a></li>
  <li><a href="/account/usage">See what you spent</a></li>
  <li><a href="/account/settings">Change your password or the low-balance e-mail</a></li>
</ul>`,
  );
}

/** Settings: the password and the low-balance e-mail. */
export function settingsPage(nav: Nav, v: { password?: FormError | undefined; passwordChanged?: boolean; lowBalance: Html | string }) {
  const pe = v.password;
  const current = errorOf(pe, 'current_password');
  const next = errorOf(pe, 'new_password');
  return page(
    { title: 'Settings', nav: { ...nav, current: '/account/settings' } },
    html`<h2 id="password">Password</h2>
${notice('error', pe?.message)}${v.passwordChanged ? notice('info', 'Your password is changed. Every other session of this account has been signed out.') : ''}
<form method="post" action="/account/password" class="stack" novalidate>
  <input type="hidden" name="_csrf" value="${nav.csrf}">
  <label for="current_password">Current password (leave empty if the account has none yet) ${fieldError('current_password', current)}</label>
  <input type="password" id="current_password" name="current_password" autocomplete="current-password" maxlength="256"${invalidAttrs('current_password', current)}>
  <label for="new_password">New password (at least 12 characters) ${fieldError('new_password', next)}</label>
  <input type="password" id="new_password" name="new_password" autocomplete="new-password" required minlength="12" maxlength="256"${invalidAttrs('new_password', next)}>
  <button type="submit">Change password</button>
</form>
${v.lowBalance}`,
  );
}

export function keysPage(
  nav: Nav,
  v: {
    keys: Key[];
    limit: number;
    models: ModelChoice[];
    created?: { id: string; name: string; key: string } | undefined;
    firstRequest?: FirstRequest | undefined;
    error?: string | undefined;
    param?: string | undefined;
    values?: KeyValues | undefined;
    /** The organization whose wallet the keys spend from; absent: the personal wallet. */
    organization?: { id: string; name: string } | undefined;
    /** The person's own active keys (in an organization an admin lists the others' too). */
    activeCount?: number | undefined;
  },
) {
  const activeCount = v.activeCount ?? v.keys.filter((k) => !k.revoked_at).length;
  const active = { length: activeCount };
  const fe: FormError | undefined = v.error ? { message: v.error, param: v.param } : undefined;
  const org = v.organization;
  return page(
    { title: org ? `API keys of ${org.name}` : 'API keys', nav: { ...nav, current: '/account/keys' } },
    html`${notice('error', v.error)}${org ? html`<p class="info">These keys spend from the shared wallet of <a href="/account/organizations/${encodeURIComponent(org.id)}">${org.name}</a>, within your spend limit there. Switch to your personal wallet above for your own keys.</p>` : ''}
${v.created
  ? html`<section class="info" role="status">
  <p><strong>Your new key "${v.created.name}".</strong> Copy it now: it is shown only this once, and only its hash is kept.</p>
  <div class="secret"><code id="new-key">${v.created.key}</code> <button type="button" data-copy="new-key" hidden>Copy</button></div>
  <p>Keep it on a server, never in a browser or an app. Anyone with it spends this account's coins.</p>
</section>
${v.firstRequest ? firstRequestSection(v.firstRequest) : ''}`
  : ''}
<p>${active.length} of ${v.limit} keys in use${org ? ' (yours, in this organization)' : ''}.</p>
${v.keys.length === 0
  ? emptyState('You have no API keys yet. A key lets your code call the API and spend this account’s coins.', html`<a href="#create">Create your first key</a> below, then follow <a href="/docs">the docs</a> for a first request.`)
  : html`<table class="keys">
  <thead><tr><th>Name</th><th>Key</th><th>Spend limit and use</th><th>Expires</th><th>Models</th><th>Last used</th><th>Actions</th></tr></thead>
  <tbody>${v.keys.map(
        (k) => html`<tr><td>${short(k.name, 24)}${k.type === 'management' ? ' (management)' : ''}${k.disabled && !k.revoked_at ? ' (disabled)' : ''}</td><td><code>${k.prefix}…</code></td><td>${spendText(k)}</td><td>${when(k.expires_at, 'never')}</td><td>${modelsText(k.allowed_models)}</td><td>${when(k.last_used_at, 'never')}</td>
  <td>${k.revoked_at
    ? html`revoked ${when(k.revoked_at)}`
    : html`<span class="actions"><a href="/account/keys/${k.id}/edit" aria-label="Edit key ${k.name}">Edit</a> <a href="/account/keys/${k.id}/revoke" aria-label="Revoke key ${k.name}">Revoke</a></span>`}</td></tr>`,
      )}</tbody>
</table>`}
<h2 id="create">Create a key</h2>
${active.length >= v.limit
  ? html`<p class="info">This account has ${v.limit} active keys, the most allowed. Revoke one to create another.</p>`
  : html`<form method="post" action="/account/keys" class="stack key-form">
  <input type="hidden" name="_csrf" value="${nav.csrf}">
  <label>Name ${fieldError('name', errorOf(fe, 'name'))}<input type="text" name="name" maxlength="100" placeholder="my server" value="${v.values?.name ?? ''}"${invalidAttrs('name', errorOf(fe, 'name'))}></label>
  ${limitFields(v.models, undefined, fe, v.values)}
  <label class="check"><input type="checkbox" name="management"> A management key: it manages keys${org ? ' of this organization' : ' and organizations'} through the API, and cannot call models</label>
  <button type="submit">Create key</button>
</form>`}`,
  );
}

/** What the person typed in a key form, shown again with a refusal. */
export interface KeyValues {
  name?: string;
  spend_limit_coins?: string;
  spend_limit_period?: string;
  expires_at?: string;
  allowed_models?: string[];
}

/** The request to try a new key with (snippets.ts, `firstRequestSnippets`): its own section, right after the secret. */
export type FirstRequest = { model: string; snippets: Snippet[] };

function firstRequestSection(r: FirstRequest) {
  return html`<section aria-labelledby="first-request">
<h2 id="first-request">Try the key</h2>
<p>A chat with <code>${r.model}</code>, ready to run with this key; any OpenAI-compatible client works with the same base URL. Requests are paid from this account's coins: when they run out, the answer is 402, with the link to <a href="/account/billing#add-credits">add credits</a>.</p>
${r.snippets.map(
  (s) => html`<h3>${s.label}</h3>
<div class="snippet"><pre tabindex="0" aria-label="${s.label} request"><code id="first-request-${s.id}">${s.code}</code></pre><button type="button" data-copy="first-request-${s.id}" aria-label="Copy the ${s.label} request" hidden>Copy</button></div>`,
)}
</section>`;
}

/** A key's edit page: its name and limits. */
export function editKeyPage(nav: Nav, key: Key, v: { models: ModelChoice[]; error?: string | undefined; param?: string | undefined }) {
  const fe: FormError | undefined = v.error ? { message: v.error, param: v.param } : undefined;
  return page(
    { title: `Edit the key "${short(key.name, 40)}"`, nav: { ...nav, current: '/account/keys' } },
    html`${notice('error', v.error)}
<p>Key <code>${key.prefix}…</code>. ${spendText(key)}.</p>
<form method="post" action="/account/keys/${key.id}/edit" class="stack key-form">
  <input type="hidden" name="_csrf" value="${nav.csrf}">
  <label>Name ${fieldError('name', errorOf(fe, 'name'))}<input type="text" name="name" maxlength="100" value="${key.name}" required${invalidAttrs('name', errorOf(fe, 'name'))}></label>
  ${limitFields(v.models, key, fe)}
  <label class="check"><input type="checkbox" name="disabled"${key.disabled ? html` checked` : ''}> Disabled: the key is refused (401, saying it is disabled) until this is unticked</label>
  <div class="actions"><button type="submit">Save the key</button> <a href="/account/keys">Cancel</a></div>
</form>`,
  );
}

/** The limit fields of the create and edit forms; empty: no limit. */
function limitFields(models: ModelChoice[], key?: Key, fe?: FormError, typed?: KeyValues) {
  const period = typed?.spend_limit_period ?? key?.spend_limit_period ?? 'monthly';
  const allowed = new Set(typed?.allowed_models ?? key?.allowed_models ?? []);
  const limitError = errorOf(fe, 'spend_limit_coins');
  const expiryError = errorOf(fe, 'expires_at');
  const modelsError = errorOf(fe, 'allowed_models');
  return html`<label>Spend limit in coins (empty: no limit) ${fieldError('spend_limit_coins', limitError)}<input type="text" name="spend_limit_coins" inputmode="decimal" maxlength="30" placeholder="100" value="${typed?.spend_limit_coins ?? key?.spend_limit_coins ?? ''}"${invalidAttrs('spend_limit_coins', limitError)}></label>
  <label>Limit period <select name="spend_limit_period">
    <option value="monthly"${period === 'monthly' ? html` selected` : ''}>Per calendar month (UTC)</option>
    <option value="total"${period === 'total' ? html` selected` : ''}>Over the key's life</option>
  </select></label>
  <label>Expires at the end of (UTC; empty: never) ${fieldError('expires_at', expiryError)}<input type="date" name="expires_at" value="${typed?.expires_at ?? (key?.expires_at ? key.expires_at.slice(0, 10) : '')}"${invalidAttrs('expires_at', expiryError)}></label>
  <fieldset class="models"${invalidAttrs('allowed_models', modelsError)}>
    <legend>Allowed models (none ticked: all models)</legend>
    ${fieldError('allowed_models', modelsError)}
    ${models.map((m) => html`<label class="check"><input type="checkbox" name="allowed_models" value="${m.id}"${allowed.has(m.id) ? html` checked` : ''}> ${m.name === m.id ? '' : short(m.name, 40)} <code>${short(m.id, 60)}</code></label>`)}
  </fieldset>`;
}

function spendText(k: Key) {
  if (k.spend_limit_coins === null) return html`${money(k.usage_coins)} spent this month, no limit`;
  return html`${money(k.usage_coins)} of ${coinsFig(k.spend_limit_coins)} ${k.spend_limit_period === 'monthly' ? 'this month' : 'in all'}, ${money(k.remaining_coins ?? 0)} left`;
}

function modelsText(models: string[] | null) {
  if (!models || models.length === 0) return 'all';
  const shown = models.slice(0, 2).map((m) => short(m, 24)).join(', ');
  return models.length > 2 ? `${shown} +${models.length - 2} more` : shown;
}

/** A long text cut to `max` characters, for narrow tables. */
function short(text: string, max: number): string {
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}

export function revokeKeyPage(nav: Nav, key: Key) {
  return page(
    { title: 'Revoke a key', nav: { ...nav, current: '/account/keys' } },
    html`<p>Revoke the key "${key.name}" (<code>${key.prefix}…</code>)? Every request made with it is refused from now on. This cannot be undone.</p>
<form method="post" action="/account/keys/${key.id}/revoke">
  <input type="hidden" name="_csrf" value="${nav.csrf}">
  <button type="submit" class="danger">Revoke the key</button> <a href="/account/keys">Cancel</a>
</form>`,
  );
}

export function appsPage(nav: Nav, v: { apps: AppConnectionView[] }) {
  return page(
    { title: 'Connected apps', nav: { ...nav, current: '/account/apps' } },
    html`<p>Apps you connect through sign-in (MCP clients such as Claude or Cursor) appear here, each with its own key. Revoke one to stop it at once.</p>
${v.apps.length === 0
  ? emptyState('No connected apps.', html`To connect one, add this service's MCP server to an MCP client such as Claude or Cursor and sign in when it asks: <a href="/docs">the docs</a> say how.`)
  : html`<table>
  <thead><tr><th>App</th><th>Signs in through</th><th>Connected</th><th>Last used</th><th class="num">Spent</th><th class="num">Cap</th><th>Expires</th><th>Action</th></tr></thead>
  <tbody>${v.apps.map(
        (a) => html`<tr><td>${a.name}</td><td>${a.redirect_host}</td><td>${when(a.created_at)}${a.reconnected_at ? html`, re-connected ${when(a.reconnected_at)}` : ''}</td><td>${when(a.last_used_at, 'never')}</td><td class="num">${money(a.spent_coins)}</td>
  <td class="num">${a.spend_cap_coins === null ? 'none' : money(a.spend_cap_coins)}</td><td>${when(a.expires_at, 'never')}</td>
  <td>${a.revoked_at
    ? html`revoked ${when(a.revoked_at)}`
    : html`<form method="post" action="/account/apps/${a.id}/revoke"><input type="hidden" name="_csrf" value="${nav.csrf}"><button type="submit" class="danger" aria-label="Revoke ${a.name}">Revoke</button></form>`}</td></tr>`,
      )}</tbody>
</table>`}`,
  );
}
