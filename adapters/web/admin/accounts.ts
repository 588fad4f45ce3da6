import { randomUUID } from 'node:crypto';
import type { Request, Response } from 'express';
import { emptyState, html, money, type Html } from '../html.ts';
import { doneMessages, mountActions, type ActionSpec } from './actions.ts';
import { actionForm, adminPage, doneNotice, idCode, truncate, viewerNote, when, type AdminTools, type Data, type Mount, type Nav } from './shared.ts';

/** The Accounts pages: a search, and one account with its wallet, keys, app connections, ledger and the operator's actions on it. */

const ACCOUNTS = `query Accounts($filter: AccountFilter) { accounts(first: 50, filter: $filter) { edges { node { id email createdAt disabledAt wallet { coins } } } } }`;
const ACCOUNT = `query Account($id: ID!) { account(id: $id) {
  id email createdAt disabledAt paidAccount temporalJobsUrl
  organizations { role organization { id name } }
  wallet { coins purchasedCoins subscriptionCoins heldCoins }
  apiKeys(first: 20) { edges { node { id name prefix kind createdAt lastUsedAt revokedAt } } }
  appConnections(first: 20) { edges { node { id name redirectHost createdAt lastUsedAt revokedAt spentCoins spendCapCoins } } }
  ledgerEntries(first: 20) { edges { node { id createdAt kind pocket amountCoins balanceAfterCoins description } } }
} }`;
const ACCOUNT_NAME = `query AccountName($id: ID!) { account(id: $id) { id email disabledAt } }`;
const KEY_NAME = `query KeyName($id: ID!) { apiKey(id: $id) { id name prefix revokedAt } }`;

interface Key { id: string; name: string; prefix: string; kind: string; createdAt: string; lastUsedAt: string | null; revokedAt: string | null }
interface App { id: string; name: string; redirectHost: string; createdAt: string; lastUsedAt: string | null; revokedAt: string | null; spentCoins: string; spendCapCoins: string | null }
interface Entry { id: string; createdAt: string; kind: string; pocket: string; amountCoins: string; balanceAfterCoins: string; description: string }

const accountUrl = (req: Request) => `/admin/accounts/${encodeURIComponent(String(req.params.id))}`;

/** The account an action is about, on its confirmation page. */
const aboutAccount = async (req: Request, tools: AdminTools): Promise<Html> => {
  const data = await tools.read(req, ACCOUNT_NAME, { id: String(req.params.id) });
  const a = data.account as { id: string; email: string; disabledAt: string | null } | null;
  return a ? html`<p>Account <strong>${a.email}</strong> (${idCode(a.id)})${a.disabledAt ? ', disabled' : ''}.</p>` : html`<p class="error" role="alert">No such account.</p>`;
};

export const coinsField = (label: string, values: Record<string, string>, signed: boolean) => html`
  <input type="hidden" name="idempotency_key" value="${values.idempotency_key || randomUUID()}">
  <label>${label} <input type="text" name="coins" required maxlength="40" inputmode="decimal" pattern="${signed ? '[+\\-]?[0-9]+(\\.[0-9]+)?' : '[0-9]+(\\.[0-9]+)?'}" value="${values.coins ?? ''}"></label>`;

/** A top-up's or grant's input; the amount is core's to check. */
const creditVariables = (req: Request, reason: string, value: (f: string) => string) =>
  value('coins') ? { input: { account: String(req.params.id), coins: value('coins'), reason, idempotencyKey: value('idempotency_key') || randomUUID() } } : { field: 'coins', message: 'Coins: enter an amount, such as 10 or 2.5.' };

const ACTIONS: ActionSpec[] = [
  {
    key: 'adjusted',
    path: '/accounts/:id/adjust',
    title: () => 'Adjust the balance',
    button: () => 'Adjust balance',
    understand: 'I understand this changes the balance at once, as a ledger entry.',
    fields: (_req, values) => html`${coinsField('Coins (signed: +10 adds, -3 takes)', values, true)}
  <label>Note to the customer (optional; shown in their history) <input type="text" name="customer_note" maxlength="200" value="${values.customer_note ?? ''}"></label>`,
    describe: aboutAccount,
    mutation: `mutation Adjust($input: AdjustBalanceInput!) { adjustBalance(input: $input) { applied } }`,
    variables: (req, reason, value) => {
      const credit = creditVariables(req, reason, value);
      const note = value('customer_note').trim();
      return 'field' in credit || !note ? credit : { input: { ...credit.input, customerNote: note } };
    },
    back: accountUrl,
    done: 'The balance was adjusted.',
  },
  {
    key: 'topped_up',
    path: '/accounts/:id/top-up',
    title: () => 'Top up purchased coins',
    button: () => 'Top up',
    understand: 'I understand this adds purchased coins and makes the account paid.',
    fields: (_req, values) => coinsField('Coins to add', values, false),
    describe: aboutAccount,
    mutation: `mutation TopUp($input: CreditInput!) { topUp(input: $input) { applied } }`,
    variables: creditVariables,
    back: accountUrl,
    done: 'The coins were added.',
  },
  {
    key: 'granted',
    path: '/accounts/:id/grant-subscription',
    title: () => 'Grant subscription coins',
    button: () => 'Grant subscription coins',
    understand: 'I understand this adds subscription coins and makes the account paid.',
    fields: (_req, values) => coinsField('Subscription coins to add', values, false),
    describe: aboutAccount,
    mutation: `mutation Grant($input: CreditInput!) { grantSubscription(input: $input) { applied } }`,
    variables: creditVariables,
    back: accountUrl,
    done: 'The subscription coins were granted.',
  },
  {
    key: 'sessions_ended',
    path: '/accounts/:id/end-sessions',
    title: () => 'End the account’s sessions',
    button: () => 'End sessions',
    understand: 'I understand the person is signed out of the account pages everywhere; keys keep working.',
    danger: true,
    describe: aboutAccount,
    mutation: `mutation EndSessions($input: EndSessionsInput!) { endAccountSessions(input: $input) { sessionsEnded } }`,
    variables: (req, reason) => ({ input: { account: String(req.params.id), reason } }),
    back: accountUrl,
    done: 'The account’s sessions were ended.',
  },
  {
    key: 'disabled',
    path: '/accounts/:id/disable',
    title: () => 'Disable the account',
    button: () => 'Disable account',
    understand: 'I understand its keys, app tokens and sessions are refused at once (running jobs finish).',
    danger: true,
    describe: aboutAccount,
    mutation: `mutation Disable($input: AccountStateInput!) { disableAccount(input: $input) { id } }`,
    variables: (req, reason) => ({ input: { account: String(req.params.id), reason } }),
    back: accountUrl,
    done: 'The account was disabled.',
  },
  {
    key: 'enabled',
    path: '/accounts/:id/enable',
    title: () => 'Enable the account',
    button: () => 'Enable account',
    understand: 'I understand its keys, app tokens and sessions work again.',
    describe: aboutAccount,
    mutation: `mutation Enable($input: AccountStateInput!) { enableAccount(input: $input) { id } }`,
    variables: (req, reason) => ({ input: { account: String(req.params.id), reason } }),
    back: accountUrl,
    done: 'The account was enabled.',
  },
  {
    key: 'key_revoked',
    path: '/accounts/:id/keys/:key/revoke',
    title: () => 'Revoke an API key',
    button: () => 'Revoke key',
    understand: 'I understand the key is refused from its next request, for good.',
    danger: true,
    describe: async (req, tools) => {
      const data = await tools.read(req, KEY_NAME, { id: String(req.params.key) });
      const k = data.apiKey as { name: string; prefix: string; revokedAt: string | null } | null;
      return html`${await aboutAccount(req, tools)}${k ? html`<p>Key <strong>${k.name}</strong> (<code>${k.prefix}…</code>)${k.revokedAt ? ', already revoked' : ''}.</p>` : ''}`;
    },
    mutation: `mutation RevokeKey($id: ID!, $reason: String) { revokeKey(id: $id, reason: $reason) { id } }`,
    variables: (req, reason) => ({ id: String(req.params.key), reason }),
    back: accountUrl,
    done: 'The key was revoked.',
  },
  {
    key: 'app_revoked',
    path: '/accounts/:id/apps/:app/revoke',
    title: () => 'Revoke an app connection',
    button: () => 'Revoke app connection',
    understand: 'I understand the app loses access at once, with its key and tokens.',
    danger: true,
    describe: aboutAccount,
    mutation: `mutation RevokeApp($id: ID!, $reason: String) { revokeAppConnection(id: $id, reason: $reason) { revoked } }`,
    variables: (req, reason) => ({ id: String(req.params.app), reason }),
    back: accountUrl,
    done: 'The app connection was revoked.',
  },
];
const DONE = doneMessages(ACTIONS);

function keysTable(accountId: string, keys: Key[], nav: Nav): Html {
  if (keys.length === 0) return emptyState('No API keys.', html`The customer creates keys on their API keys page; the CLI can too (<code>mas key create</code>).`);
  const act = nav.role === 'operator';
  return html`<table><thead><tr><th>Name</th><th>Prefix</th><th>Created</th><th>Last used</th><th>State</th></tr></thead><tbody>
${keys.map(
  (k) => html`<tr><td>${truncate(k.name, 40)}${k.kind === 'app' ? ' (app)' : ''}</td><td><code>${k.prefix}</code></td><td>${when(k.createdAt)}</td><td>${when(k.lastUsedAt)}</td><td>${
    k.revokedAt
      ? html`revoked ${when(k.revokedAt)}`
      : act
        ? html`active · <a href="/admin/accounts/${encodeURIComponent(accountId)}/keys/${encodeURIComponent(k.id)}/revoke">Revoke key ${k.name} <span class="hint">(${k.prefix}…)</span></a>`
        : 'active'
  }</td></tr>`,
)}
</tbody></table>`;
}

function appsTable(accountId: string, apps: App[], nav: Nav): Html {
  if (apps.length === 0) return emptyState('No connected apps.', html`Apps appear here when the customer connects an MCP client through sign-in.`);
  const act = nav.role === 'operator';
  return html`<table><thead><tr><th>App</th><th>Connected</th><th>Spent</th><th>State</th></tr></thead><tbody>
${apps.map(
  (a) => html`<tr><td>${truncate(a.name, 40)} <span class="hint">(${a.redirectHost})</span></td><td>${when(a.createdAt)}</td><td>${money(Number(a.spentCoins))}${a.spendCapCoins === null ? '' : html` of ${money(Number(a.spendCapCoins))}`}</td><td>${
    a.revokedAt
      ? html`revoked ${when(a.revokedAt)}`
      : act
        ? html`active · <a href="/admin/accounts/${encodeURIComponent(accountId)}/apps/${encodeURIComponent(a.id)}/revoke">Revoke app ${a.name} <span class="hint">(${a.redirectHost})</span></a>`
        : 'active'
  }</td></tr>`,
)}
</tbody></table>`;
}

async function renderAccount(tools: AdminTools, req: Request, res: Response, nav: Nav) {
  const id = String(req.params.id);
  // An organization's wallet is an account's (top accounts, payments link here with its id): its own page shows it.
  if (id.startsWith('org_')) return res.redirect(303, `/admin/organizations/${encodeURIComponent(id)}`);
  const data = await tools.read(req, ACCOUNT, { id });
  const a = data.account as Data | null;
  if (!a) return tools.send(res, adminPage('Not found', nav, html`<p class="error" role="alert">No such account.</p>`), 404);
  const keys = (a.apiKeys.edges as { node: Key }[]).map((e) => e.node);
  const apps = (a.appConnections.edges as { node: App }[]).map((e) => e.node);
  const entries = (a.ledgerEntries.edges as { node: Entry }[]).map((e) => e.node);
  const memberships = a.organizations as { role: string; organization: { id: string; name: string } }[];
  const base = `/admin/accounts/${encodeURIComponent(a.id)}`;
  const operator = nav.role === 'operator';
  tools.send(res, adminPage(`Account ${a.email}`, nav, html`
${doneNotice(req, DONE)}${viewerNote(nav)}
<section><h2>Wallet</h2>
<p>Balance: <strong id="balance">${money(Number(a.wallet.coins))}</strong> (purchased ${money(Number(a.wallet.purchasedCoins))}, subscription ${money(Number(a.wallet.subscriptionCoins))}, held ${money(Number(a.wallet.heldCoins))})</p>
<p>Account ${idCode(a.id)}, created ${when(a.createdAt)} · <span id="account-state">${a.disabledAt ? html`<strong>disabled</strong> since ${when(a.disabledAt)}` : 'active'}</span></p>
<p class="links"><a href="/admin/jobs?${new URLSearchParams({ account: a.id }).toString()}">This account's jobs</a>${a.temporalJobsUrl ? html` <a href="${a.temporalJobsUrl}" rel="noopener">This account's jobs in the Temporal UI</a>` : ''}</p>
${operator ? actionForm({ action: `${base}/adjust`, csrf: nav.csrf, fields: coinsField('Coins (signed: +10 adds, -3 takes)', {}, true), understand: 'I understand this changes the balance at once, as a ledger entry.', button: 'Adjust balance', id: 'adjust' }) : ''}
</section>
${operator ? html`<section><h2>Actions</h2>
<ul class="admin-actions">
  <li><a href="${base}/top-up">Top up purchased coins</a></li>
  <li><a href="${base}/grant-subscription">Grant subscription coins</a></li>
  <li><a href="${base}/end-sessions">End the account’s sessions</a></li>
  <li>${a.disabledAt ? html`<a href="${base}/enable">Enable the account</a>` : html`<a href="${base}/disable">Disable the account</a>`}</li>
</ul></section>` : ''}
<section><h2>Organizations</h2>
${memberships.length === 0 ? emptyState('Not a member of any organization.', html`A person joins an organization by making one or accepting an invitation. <a href="/admin/organizations">All organizations</a>`) : html`<ul id="organizations">
${memberships.map((m) => html`<li><a href="/admin/organizations/${encodeURIComponent(m.organization.id)}">${truncate(m.organization.name, 60)}</a> (${m.role})</li>`)}
</ul>`}</section>
<section><h2>API keys</h2>${keysTable(a.id, keys, nav)}</section>
<section><h2>Connected apps</h2>${appsTable(a.id, apps, nav)}</section>
<section><h2>Recent ledger entries</h2>
${entries.length === 0 ? emptyState('No ledger entries yet.', html`Top-ups, grants, charges and refunds appear here. <a href="${base}/top-up">Top up purchased coins</a>`) : html`<table><thead><tr><th>When</th><th>Kind</th><th class="num">Amount</th><th class="num">Balance after</th><th>Description</th></tr></thead><tbody>
${entries.map((e) => html`<tr><td>${when(e.createdAt)}</td><td>${e.kind} <span class="hint">(${e.pocket})</span></td><td class="num">${money(Number(e.amountCoins), { signed: true })}</td><td class="num">${money(Number(e.balanceAfterCoins))}</td><td>${truncate(e.description, 60)}</td></tr>`)}
</tbody></table>`}</section>`));
}

export const mountAccounts: Mount = (router, tools) => {
  router.get('/accounts', tools.signedIn('/admin/accounts', async (req, res, nav) => {
    const q = typeof req.query.q === 'string' ? req.query.q.trim().slice(0, 254) : '';
    const data = await tools.read(req, ACCOUNTS, { filter: q ? { emailPrefix: q } : null });
    const rows = (data.accounts.edges as { node: { id: string; email: string; createdAt: string; disabledAt: string | null; wallet: { coins: string } } }[]).map((e) => e.node);
    tools.send(res, adminPage('Accounts', nav, html`
<p>Accounts · <a href="/admin/organizations">Organizations</a></p>
<form method="get" action="/admin/accounts" class="inline"><label>Email starts with <input type="search" name="q" value="${q}" maxlength="254"></label> <button type="submit">Find</button></form>
${rows.length === 0 ? emptyState(q ? `No account's e-mail starts with "${q}".` : 'No accounts yet.', q ? html`Check the spelling, or search with fewer letters. <a href="/admin/accounts">All accounts</a>` : html`Accounts appear here when people sign up, or when an operator runs <code>mas account create</code>.`) : html`<table><thead><tr><th>Email</th><th class="num">Balance</th><th>Created</th><th>State</th></tr></thead><tbody>
${rows.map((a) => html`<tr><td><a href="/admin/accounts/${encodeURIComponent(a.id)}">${a.email}</a></td><td class="num">${money(Number(a.wallet.coins))}</td><td>${when(a.createdAt)}</td><td>${a.disabledAt ? 'disabled' : 'active'}</td></tr>`)}
</tbody></table>`}`));
  }));
  router.get('/accounts/:id', tools.signedIn('/admin/accounts', (req, res, nav) => renderAccount(tools, req, res, nav)));
  mountActions(router, tools, ACTIONS);
};
