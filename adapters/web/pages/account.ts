import type { AppConnectionView } from '../../../core/apps/connections.ts';
import type { AutoTopUpView } from '../../../core/payments/auto-top-up.ts';
import { html, notice, page, type Html } from '../html.ts';
import { billingSections, type Billing, type BillingFormState } from './billing.ts';
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
};
type ModelChoice = { id: string; name: string };

const day = (iso: string | null) => (iso ? iso.replace('T', ' ').slice(0, 16) : '—');

export function overviewPage(nav: Nav, v: { balance: Balance; billing: Billing; autoTopUp?: AutoTopUpView | undefined; pay: BillingFormState; passwordError?: string | undefined; passwordChanged?: boolean; mail?: { top: Html | string; notice: Html | string } }) {
  const b = v.balance;
  return page(
    { title: 'Overview', nav: { ...nav, current: '/account' } },
    html`${v.mail?.top ?? ''}<div class="cards">
  <div class="card">Spendable <strong>${b.coins} coins</strong></div>
  <div class="card">Subscription <strong>${b.subscription_coins}</strong></div>
  <div class="card">Purchased <strong>${b.purchased_coins}</strong></div>
  <div class="card">Held by running requests <strong>${b.held_coins}</strong></div>
</div>
<p>${b.paid_account ? 'This is a paid account: every model is open to it.' : 'This account is not paid yet: models marked "paid accounts only" need a first top-up or a subscription.'}</p>
${billingSections(nav, v.billing, v.pay, v.autoTopUp)}
<p>Next: <a href="/account/keys">create an API key</a>, then see <a href="/api/v1/docs">the API reference</a>.</p>
${v.mail?.notice ?? ''}
<h2>Password</h2>
${notice('error', v.passwordError)}${v.passwordChanged ? notice('info', 'Your password is changed. Every other session of this account has been signed out.') : ''}
<form method="post" action="/account/password" class="stack">
  <input type="hidden" name="_csrf" value="${nav.csrf}">
  <label>Current password (leave empty if the account has none yet) <input type="password" name="current_password" autocomplete="current-password" maxlength="256"></label>
  <label>New password (at least 12 characters) <input type="password" name="new_password" autocomplete="new-password" required minlength="12" maxlength="256"></label>
  <button type="submit">Change password</button>
</form>`,
  );
}

export function keysPage(nav: Nav, v: { keys: Key[]; limit: number; models: ModelChoice[]; created?: { id: string; name: string; key: string } | undefined; firstRequest?: FirstRequest | undefined; error?: string | undefined }) {
  const active = v.keys.filter((k) => !k.revoked_at);
  return page(
    { title: 'API keys', nav: { ...nav, current: '/account/keys' } },
    html`${notice('error', v.error)}
${v.created
  ? html`<section class="info" role="status">
  <p><strong>Your new key "${v.created.name}".</strong> Copy it now: it is shown only this once, and only its hash is kept.</p>
  <div class="secret"><code id="new-key">${v.created.key}</code> <button type="button" data-copy="new-key" hidden>Copy</button></div>
  <p>Keep it on a server, never in a browser or an app. Anyone with it spends this account's coins.</p>
</section>
${v.firstRequest ? firstRequestSection(v.firstRequest) : ''}`
  : ''}
<p>${active.length} of ${v.limit} keys in use.</p>
<div class="table-wrap">
<table class="keys">
  <thead><tr><th>Name</th><th>Key</th><th>Spend limit and use</th><th>Expires</th><th>Models</th><th>Last used</th><th>Actions</th></tr></thead>
  <tbody>${v.keys.length === 0
    ? html`<tr><td colspan="7">No keys yet.</td></tr>`
    : v.keys.map(
        (k) => html`<tr><td>${short(k.name, 24)}</td><td><code>${k.prefix}…</code></td><td>${spendText(k)}</td><td>${day(k.expires_at)}</td><td>${modelsText(k.allowed_models)}</td><td>${day(k.last_used_at)}</td>
  <td>${k.revoked_at
    ? html`revoked ${day(k.revoked_at)}`
    : html`<span class="actions"><a href="/account/keys/${k.id}/edit" aria-label="Edit key ${k.name}">Edit</a> <a href="/account/keys/${k.id}/revoke" aria-label="Revoke key ${k.name}">Revoke</a></span>`}</td></tr>`,
      )}</tbody>
</table>
</div>
<h2>Create a key</h2>
${active.length >= v.limit
  ? html`<p class="info">This account has ${v.limit} active keys, the most allowed. Revoke one to create another.</p>`
  : html`<form method="post" action="/account/keys" class="stack key-form">
  <input type="hidden" name="_csrf" value="${nav.csrf}">
  <label>Name <input type="text" name="name" maxlength="100" placeholder="my server"></label>
  ${limitFields(v.models)}
  <button type="submit">Create key</button>
</form>`}`,
  );
}

/** The request to try a new key with (snippets.ts, `firstRequestSnippets`): its own section, right after the secret. */
export type FirstRequest = { model: string; snippets: Snippet[] };

function firstRequestSection(r: FirstRequest) {
  return html`<section aria-labelledby="first-request">
<h2 id="first-request">Try the key</h2>
<p>A chat with <code>${r.model}</code>, ready to run with this key; any OpenAI-compatible client works with the same base URL. Requests are paid from this account's coins: when they run out, the answer is 402, with the link to <a href="/account#add-credits">add credits</a>.</p>
${r.snippets.map(
  (s) => html`<h3>${s.label}</h3>
<div class="snippet"><pre tabindex="0" aria-label="${s.label} request"><code id="first-request-${s.id}">${s.code}</code></pre><button type="button" data-copy="first-request-${s.id}" aria-label="Copy the ${s.label} request" hidden>Copy</button></div>`,
)}
</section>`;
}

/** A key's edit page: its name and limits. */
export function editKeyPage(nav: Nav, key: Key, v: { models: ModelChoice[]; error?: string | undefined }) {
  return page(
    { title: `Edit the key "${short(key.name, 40)}"`, nav: { ...nav, current: '/account/keys' } },
    html`${notice('error', v.error)}
<p>Key <code>${key.prefix}…</code>. ${spendText(key)}.</p>
<form method="post" action="/account/keys/${key.id}/edit" class="stack key-form">
  <input type="hidden" name="_csrf" value="${nav.csrf}">
  <label>Name <input type="text" name="name" maxlength="100" value="${key.name}" required></label>
  ${limitFields(v.models, key)}
  <div class="actions"><button type="submit">Save the key</button> <a href="/account/keys">Cancel</a></div>
</form>`,
  );
}

/** The limit fields of the create and edit forms; empty: no limit. */
function limitFields(models: ModelChoice[], key?: Key) {
  const period = key?.spend_limit_period ?? 'monthly';
  const allowed = new Set(key?.allowed_models ?? []);
  return html`<label>Spend limit in coins (empty: no limit) <input type="text" name="spend_limit_coins" inputmode="decimal" maxlength="30" placeholder="100" value="${key?.spend_limit_coins ?? ''}"></label>
  <label>Limit period <select name="spend_limit_period">
    <option value="monthly"${period === 'monthly' ? html` selected` : ''}>Per calendar month (UTC)</option>
    <option value="total"${period === 'total' ? html` selected` : ''}>Over the key's life</option>
  </select></label>
  <label>Expires at the end of (UTC; empty: never) <input type="date" name="expires_at" value="${key?.expires_at ? key.expires_at.slice(0, 10) : ''}"></label>
  <fieldset class="models">
    <legend>Allowed models (none ticked: all models)</legend>
    ${models.map((m) => html`<label class="check"><input type="checkbox" name="allowed_models" value="${m.id}"${allowed.has(m.id) ? html` checked` : ''}> ${m.name === m.id ? '' : short(m.name, 40)} <code>${short(m.id, 60)}</code></label>`)}
  </fieldset>`;
}

function spendText(k: Key) {
  if (k.spend_limit_coins === null) return `${k.usage_coins} spent this month, no limit`;
  return `${k.usage_coins} of ${k.spend_limit_coins} ${k.spend_limit_period === 'monthly' ? 'this month' : 'in all'}, ${k.remaining_coins ?? 0} left`;
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
<table>
  <thead><tr><th>App</th><th>Signs in through</th><th>Connected</th><th>Last used</th><th class="num">Spent</th><th class="num">Cap</th><th>Expires</th><th></th></tr></thead>
  <tbody>${v.apps.length === 0
    ? html`<tr><td colspan="8">No connected apps.</td></tr>`
    : v.apps.map(
        (a) => html`<tr><td>${a.name}</td><td>${a.redirect_host}</td><td>${day(a.created_at)}${a.reconnected_at ? html`, re-connected ${day(a.reconnected_at)}` : ''}</td><td>${day(a.last_used_at)}</td><td class="num">${a.spent_coins}</td>
  <td class="num">${a.spend_cap_coins ?? 'none'}</td><td>${day(a.expires_at)}</td>
  <td>${a.revoked_at
    ? html`revoked ${day(a.revoked_at)}`
    : html`<form method="post" action="/account/apps/${a.id}/revoke"><input type="hidden" name="_csrf" value="${nav.csrf}"><button type="submit" class="danger" aria-label="Revoke ${a.name}">Revoke</button></form>`}</td></tr>`,
      )}</tbody>
</table>`,
  );
}
