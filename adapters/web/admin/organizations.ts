import { randomUUID } from 'node:crypto';
import type { Request, Response } from 'express';
import { emptyState, html, money, type Html } from '../html.ts';
import { coinsField } from './accounts.ts';
import { doneMessages, mountActions, type ActionSpec } from './actions.ts';
import { actionForm, adminPage, doneNotice, idCode, truncate, viewerNote, when, type AdminTools, type Data, type Mount, type Nav } from './shared.ts';

/**
 * The Organizations pages (docs/organizations.md, "Operators"): a search by name, and one
 * organization with its wallet, members, invitations, keys and recent ledger, and the operator's
 * balance actions on its wallet (the same `adjustBalance` and `topUp` mutations as an account's,
 * with `organizationId`).
 */

const ORGANIZATIONS = `query Organizations($filter: OrganizationFilter) { organizations(first: 50, filter: $filter) { edges { node { id name billingEmail memberCount createdAt disabledAt wallet { coins } } } } }`;
const ORGANIZATION = `query Organization($id: ID!) { organization(id: $id) {
  id name billingEmail createdAt disabledAt paidAccount
  wallet { coins purchasedCoins subscriptionCoins heldCoins }
  members { userId email role spendLimitCoins spendLimitPeriod spentCoins joinedAt }
  invitations(first: 20) { edges { node { id email role status createdAt expiresAt } } }
  apiKeys(first: 50) { edges { node { id name prefix type userId createdAt lastUsedAt revokedAt disabled } } }
  ledgerEntries(first: 20) { edges { node { id createdAt kind pocket amountCoins balanceAfterCoins description } } }
} }`;
const ORGANIZATION_NAME = `query OrganizationName($id: ID!) { organization(id: $id) { id name disabledAt } }`;

interface Member { userId: string; email: string; role: string; spendLimitCoins: number | null; spendLimitPeriod: string | null; spentCoins: number; joinedAt: string }
interface Invitation { id: string; email: string; role: string; status: string; createdAt: string; expiresAt: string }
interface Key { id: string; name: string; prefix: string; type: string; userId: string; createdAt: string; lastUsedAt: string | null; revokedAt: string | null; disabled: boolean }
interface Entry { id: string; createdAt: string; kind: string; pocket: string; amountCoins: string; balanceAfterCoins: string; description: string }

const organizationUrl = (req: Request) => `/admin/organizations/${encodeURIComponent(String(req.params.id))}`;

/** The organization an action is about, on its confirmation page. */
const aboutOrganization = async (req: Request, tools: AdminTools): Promise<Html> => {
  const data = await tools.read(req, ORGANIZATION_NAME, { id: String(req.params.id) });
  const o = data.organization as { id: string; name: string; disabledAt: string | null } | null;
  return o ? html`<p>Organization <strong>${o.name}</strong> (${idCode(o.id)})${o.disabledAt ? ', disabled' : ''}.</p>` : html`<p class="error" role="alert">No such organization.</p>`;
};

/** A top-up's or an adjustment's input for the organization's wallet; the amount is core's to check. */
const creditVariables = (req: Request, reason: string, value: (f: string) => string) =>
  value('coins') ? { input: { organizationId: String(req.params.id), coins: value('coins'), reason, idempotencyKey: value('idempotency_key') || randomUUID() } } : { field: 'coins', message: 'Coins: enter an amount, such as 10 or 2.5.' };

const ADJUST_UNDERSTAND = "I understand this changes the organization's balance at once, as a ledger entry.";

const ACTIONS: ActionSpec[] = [
  {
    key: 'adjusted',
    path: '/organizations/:id/adjust',
    title: () => "Adjust the organization's balance",
    button: () => 'Adjust balance',
    understand: ADJUST_UNDERSTAND,
    fields: (_req, values) => html`${coinsField('Coins (signed: +10 adds, -3 takes)', values, true)}
  <label>Note to the members (optional; shown in the organization's history) <input type="text" name="customer_note" maxlength="200" value="${values.customer_note ?? ''}"></label>`,
    describe: aboutOrganization,
    mutation: `mutation Adjust($input: AdjustBalanceInput!) { adjustBalance(input: $input) { applied } }`,
    variables: (req, reason, value) => {
      const credit = creditVariables(req, reason, value);
      const note = value('customer_note').trim();
      return 'field' in credit || !note ? credit : { input: { ...credit.input, customerNote: note } };
    },
    back: organizationUrl,
    done: "The organization's balance was adjusted.",
  },
  {
    key: 'topped_up',
    path: '/organizations/:id/top-up',
    title: () => 'Top up the organization’s purchased coins',
    button: () => 'Top up',
    understand: 'I understand this adds purchased coins to the organization’s wallet.',
    fields: (_req, values) => coinsField('Coins to add', values, false),
    describe: aboutOrganization,
    mutation: `mutation TopUp($input: CreditInput!) { topUp(input: $input) { applied } }`,
    variables: creditVariables,
    back: organizationUrl,
    done: 'The coins were added to the organization’s wallet.',
  },
];
const DONE = doneMessages(ACTIONS);

const limitText = (m: Member) => (m.spendLimitCoins === null ? 'no limit' : html`${money(m.spendLimitCoins)} ${m.spendLimitPeriod === 'monthly' ? 'a month' : 'in all'}`);

function membersTable(members: Member[]): Html {
  if (members.length === 0) return emptyState('No members.', html`An organization always has an owner; this one has none left.`);
  return html`<table id="members"><thead><tr><th>Member</th><th>Role</th><th>Spend limit</th><th class="num">Spent</th><th>Joined</th></tr></thead><tbody>
${members.map((m) => html`<tr><td><a href="/admin/accounts/${encodeURIComponent(m.userId)}">${truncate(m.email, 60)}</a></td><td>${m.role}</td><td>${limitText(m)}</td><td class="num">${money(m.spentCoins)}</td><td>${when(m.joinedAt)}</td></tr>`)}
</tbody></table>`;
}

function invitationsTable(invitations: Invitation[]): Html {
  if (invitations.length === 0) return emptyState('No invitations.', html`Owners and admins invite people by e-mail on the account pages, or through REST.`);
  return html`<table id="invitations"><thead><tr><th>E-mail</th><th>Role</th><th>Status</th><th>Sent</th><th>Expires</th></tr></thead><tbody>
${invitations.map((i) => html`<tr><td>${truncate(i.email, 60)}</td><td>${i.role}</td><td>${i.status}</td><td>${when(i.createdAt)}</td><td>${when(i.expiresAt)}</td></tr>`)}
</tbody></table>`;
}

function keysTable(keys: Key[], emails: Map<string, string>): Html {
  if (keys.length === 0) return emptyState('No API keys.', html`Members create keys of the organization on their keys page; the CLI can too (<code>mas key create --organization</code>).`);
  return html`<table id="keys"><thead><tr><th>Name</th><th>Prefix</th><th>Member</th><th>Type</th><th>Last used</th><th>State</th></tr></thead><tbody>
${keys.map(
  (k) => html`<tr><td>${truncate(k.name, 40)}</td><td><code>${k.prefix}</code></td><td><a href="/admin/accounts/${encodeURIComponent(k.userId)}">${truncate(emails.get(k.userId) ?? k.userId, 40)}</a></td><td>${k.type}</td><td>${when(k.lastUsedAt)}</td><td>${
    k.revokedAt ? html`revoked ${when(k.revokedAt)}` : k.disabled ? 'disabled' : 'active'
  }</td></tr>`,
)}
</tbody></table>`;
}

async function renderOrganization(tools: AdminTools, req: Request, res: Response, nav: Nav) {
  const data = await tools.read(req, ORGANIZATION, { id: String(req.params.id) });
  const o = data.organization as Data | null;
  if (!o) return tools.send(res, adminPage('Not found', nav, html`<p class="error" role="alert">No such organization.</p>`), 404);
  const members = o.members as Member[];
  const invitations = (o.invitations.edges as { node: Invitation }[]).map((e) => e.node);
  const keys = (o.apiKeys.edges as { node: Key }[]).map((e) => e.node);
  const entries = (o.ledgerEntries.edges as { node: Entry }[]).map((e) => e.node);
  const base = `/admin/organizations/${encodeURIComponent(o.id)}`;
  const operator = nav.role === 'operator';
  tools.send(res, adminPage(`Organization ${o.name}`, nav, html`
${doneNotice(req, DONE)}${viewerNote(nav)}
<section><h2>Wallet</h2>
<p>Balance: <strong id="balance">${money(Number(o.wallet.coins))}</strong> (purchased ${money(Number(o.wallet.purchasedCoins))}, subscription ${money(Number(o.wallet.subscriptionCoins))}, held ${money(Number(o.wallet.heldCoins))})</p>
<p>Organization ${idCode(o.id)}, created ${when(o.createdAt)}, billing mail to ${o.billingEmail} · <span id="organization-state">${o.disabledAt ? html`<strong>disabled</strong> since ${when(o.disabledAt)}` : 'active'}</span></p>
${operator ? actionForm({ action: `${base}/adjust`, csrf: nav.csrf, fields: coinsField('Coins (signed: +10 adds, -3 takes)', {}, true), understand: ADJUST_UNDERSTAND, button: 'Adjust balance', id: 'adjust' }) : ''}
${operator ? html`<ul class="admin-actions"><li><a href="${base}/top-up">Top up purchased coins</a></li></ul>` : ''}
</section>
<section><h2>Members</h2>${membersTable(members)}</section>
<section><h2>Invitations</h2>${invitationsTable(invitations)}</section>
<section><h2>API keys</h2>${keysTable(keys, new Map(members.map((m) => [m.userId, m.email])))}</section>
<section><h2>Recent ledger entries</h2>
${entries.length === 0 ? emptyState('No ledger entries yet.', html`Top-ups, charges and refunds of the organization's wallet appear here.`) : html`<table><thead><tr><th>When</th><th>Kind</th><th class="num">Amount</th><th class="num">Balance after</th><th>Description</th></tr></thead><tbody>
${entries.map((e) => html`<tr><td>${when(e.createdAt)}</td><td>${e.kind} <span class="hint">(${e.pocket})</span></td><td class="num">${money(Number(e.amountCoins), { signed: true })}</td><td class="num">${money(Number(e.balanceAfterCoins))}</td><td>${truncate(e.description, 60)}</td></tr>`)}
</tbody></table>`}</section>`));
}

export const mountOrganizations: Mount = (router, tools) => {
  router.get('/organizations', tools.signedIn('/admin/accounts', async (req, res, nav) => {
    const q = typeof req.query.q === 'string' ? req.query.q.trim().slice(0, 100) : '';
    const data = await tools.read(req, ORGANIZATIONS, { filter: q ? { nameContains: q } : null });
    const rows = (data.organizations.edges as { node: { id: string; name: string; billingEmail: string; memberCount: number; createdAt: string; disabledAt: string | null; wallet: { coins: string } } }[]).map((e) => e.node);
    tools.send(res, adminPage('Organizations', nav, html`
<p><a href="/admin/accounts">Accounts</a> · Organizations</p>
<form method="get" action="/admin/organizations" class="inline"><label>Name contains <input type="search" name="q" value="${q}" maxlength="100"></label> <button type="submit">Find</button></form>
${rows.length === 0 ? emptyState(q ? `No organization's name contains "${q}".` : 'No organizations yet.', q ? html`Check the spelling, or search with fewer letters. <a href="/admin/organizations">All organizations</a>` : html`Organizations appear here when people make one on their account pages.`) : html`<table id="organizations"><thead><tr><th>Name</th><th class="num">Members</th><th class="num">Balance</th><th>Created</th><th>State</th></tr></thead><tbody>
${rows.map((o) => html`<tr><td><a href="/admin/organizations/${encodeURIComponent(o.id)}">${truncate(o.name, 60)}</a> <span class="hint">(${truncate(o.billingEmail, 40)})</span></td><td class="num">${o.memberCount}</td><td class="num">${money(Number(o.wallet.coins))}</td><td>${when(o.createdAt)}</td><td>${o.disabledAt ? 'disabled' : 'active'}</td></tr>`)}
</tbody></table>`}`));
  }));
  router.get('/organizations/:id', tools.signedIn('/admin/accounts', (req, res, nav) => renderOrganization(tools, req, res, nav)));
  mountActions(router, tools, ACTIONS);
};
