import type { InvitationView } from '../../../core/organizations/invitations.ts';
import type { MemberView } from '../../../core/organizations/members.ts';
import type { OrganizationView } from '../../../core/organizations/organizations.ts';
import type { OrganizationUsageView } from '../../../core/organizations/usage.ts';
import { coinsFig, emptyState, fieldError, html, invalidAttrs, money, moneyCard, notice, page, when, type Html, type WalletSwitch } from '../html.ts';
import { balanceCards, type FormError } from './account.ts';
import { rangeForm } from './usage.ts';

/**
 * The organizations pages (/account/organizations, docs/organizations.md): the person's
 * organizations and a form to make one; one organization: its wallet, the person's own limit and
 * spend, and for admins its members, invitations and usage. Every rule (who may do what, the last
 * owner, the limits) is core's: a refused form comes back with core's message, beside its field,
 * or as a notice for a role the person lacks.
 */
type Nav = { email: string; csrf: string; wallet?: WalletSwitch | undefined };

const CURRENT = '/account/organizations';
const errorOf = (e: FormError | undefined, field: string) => (e && e.param === field ? e.message : undefined);
/** A refusal that names no field of the form: shown as a notice at the top. */
const unplaced = (e: FormError | undefined, fields: string[]) => (e && !fields.includes(e.param ?? '') ? e.message : undefined);
export const orgHref = (id: string, rest = '') => `/account/organizations/${encodeURIComponent(id)}${rest}`;
const ROLE_WORDS = { owner: 'Owner', admin: 'Admin', member: 'Member' } as const;

function limitText(limit: number | null, period: 'total' | 'monthly' | null, spent?: number): Html {
  if (limit === null) return spent === undefined ? html`no limit` : html`${money(spent)} spent this month, no limit`;
  const span = period === 'monthly' ? 'this month' : 'in all';
  return spent === undefined ? html`${coinsFig(limit)} ${span}` : html`${money(spent)} of ${coinsFig(limit)} ${span}`;
}

export function organizationsPage(nav: Nav, v: { organizations: OrganizationView[]; error?: FormError | undefined; name?: string | undefined; info?: string | undefined }) {
  const nameError = errorOf(v.error, 'name');
  return page(
    { title: 'Organizations', nav: { ...nav, current: CURRENT } },
    html`${notice('info', v.info)}${notice('error', unplaced(v.error, ['name']))}
<p>An organization is a team's shared wallet: its members make keys that spend from it, each within the limit an admin sets for them. You keep your personal wallet.</p>
${v.organizations.length === 0
  ? emptyState('You belong to no organization yet.', html`<a href="#create">Create one</a> below, or ask an admin of one to invite your e-mail address.`)
  : html`<table>
  <thead><tr><th>Organization</th><th>Your role</th><th>Your spend limit</th><th>Created</th></tr></thead>
  <tbody>${v.organizations.map(
    (o) => html`<tr><td><a href="${orgHref(o.id)}">${o.name}</a></td><td>${ROLE_WORDS[o.role]}</td><td>${limitText(o.spend_limit_coins, o.spend_limit_period)}</td><td>${when(o.created_at)}</td></tr>`,
  )}</tbody>
</table>`}
<h2 id="create">Create an organization</h2>
<form method="post" action="/account/organizations" class="stack org-form">
  <input type="hidden" name="_csrf" value="${nav.csrf}">
  <label for="org-name">Name ${fieldError('org-name', nameError)}</label>
  <input type="text" id="org-name" name="name" maxlength="100" required value="${v.name ?? ''}"${invalidAttrs('org-name', nameError)}>
  <button type="submit">Create organization</button>
</form>`,
  );
}

export interface OrganizationPageData {
  organization: OrganizationView;
  /** The viewer's own membership: role, limit and spend. */
  me: MemberView;
  /** Admins and owners: every member, and the invitations waiting. */
  members?: MemberView[] | undefined;
  invitations?: InvitationView[] | undefined;
  /** A refused invitation form: its message and what was typed. */
  invite?: { error: FormError; email: string; role: string } | undefined;
  /** A refusal of another form (a role the person lacks, the last owner): a notice. */
  error?: string | undefined;
  info?: string | undefined;
}

export function organizationPage(nav: Nav, v: OrganizationPageData) {
  const o = v.organization;
  const admin = o.role !== 'member';
  const emailError = errorOf(v.invite?.error, 'email');
  const roleError = errorOf(v.invite?.error, 'role');
  const inviteOther = unplaced(v.invite?.error, ['email', 'role']);
  const role = v.invite?.role ?? 'member';
  const usingIt = nav.wallet?.current?.id === o.id;
  return page(
    { title: o.name, nav: { ...nav, current: CURRENT } },
    html`${notice('info', v.info)}${notice('error', v.error)}
<p>Your role: <strong>${ROLE_WORDS[o.role]}</strong>. Your spend from this organization's wallet: ${limitText(v.me.spend_limit_coins, v.me.spend_limit_period, v.me.spent_coins)}.</p>
${o.balance ? balanceCards(o.balance) : ''}
<div class="links">
  ${usingIt
    ? html`<span>The account pages show this organization's wallet.</span>`
    : html`<form method="post" action="/account/wallet" class="inline"><input type="hidden" name="_csrf" value="${nav.csrf}"><input type="hidden" name="organization" value="${o.id}"><input type="hidden" name="next" value="/account/keys"><button type="submit">Use this wallet</button></form>`}
  <a href="/account/billing?${new URLSearchParams({ organization: o.id }).toString()}">Billing</a>
  <a href="${orgHref(o.id, '/usage')}">Usage</a>
</div>
${admin
  ? html`<h2 id="members">Members</h2>
<table>
  <thead><tr><th>Member</th><th>Role</th><th>Spend limit and use</th><th>Joined</th><th>Actions</th></tr></thead>
  <tbody>${(v.members ?? []).map(
    (m) => html`<tr><td>${m.email}</td><td>${ROLE_WORDS[m.role]}</td><td>${limitText(m.spend_limit_coins, m.spend_limit_period, m.spent_coins)}</td><td>${when(m.joined_at)}</td><td><a href="${orgHref(o.id, `/members/${encodeURIComponent(m.user_id)}`)}" aria-label="Manage ${m.email}">Manage</a></td></tr>`,
  )}</tbody>
</table>
<h2 id="invite">Invite someone</h2>
${notice('error', inviteOther)}
<p>The invitation goes by e-mail and works once, for 7 days, for that address only.</p>
<form method="post" action="${orgHref(o.id, '/invitations')}" class="stack org-form">
  <input type="hidden" name="_csrf" value="${nav.csrf}">
  <label for="invite-email">E-mail address ${fieldError('invite-email', emailError)}</label>
  <input type="email" id="invite-email" name="email" maxlength="254" required autocomplete="off" value="${v.invite?.email ?? ''}"${invalidAttrs('invite-email', emailError)}>
  <label for="invite-role">Role ${fieldError('invite-role', roleError)}</label>
  <select id="invite-role" name="role"${invalidAttrs('invite-role', roleError)}>
    <option value="member"${role === 'member' ? html` selected` : ''}>Member (own keys)</option>
    <option value="admin"${role === 'admin' ? html` selected` : ''}>Admin (members, keys)</option>
    ${o.role === 'owner' ? html`<option value="owner"${role === 'owner' ? html` selected` : ''}>Owner (everything)</option>` : ''}
  </select>
  <button type="submit">Send invitation</button>
</form>
<h2 id="invitations">Invitations waiting</h2>
${(v.invitations ?? []).length === 0
  ? emptyState('No invitation is waiting for an answer.')
  : html`<table>
  <thead><tr><th>E-mail</th><th>Role</th><th>Expires</th><th>Action</th></tr></thead>
  <tbody>${(v.invitations ?? []).map(
    (i) => html`<tr><td>${i.email}</td><td>${ROLE_WORDS[i.role]}</td><td>${when(i.expires_at)}</td><td><form method="post" action="${orgHref(o.id, `/invitations/${encodeURIComponent(i.id)}/revoke`)}"><input type="hidden" name="_csrf" value="${nav.csrf}"><button type="submit" class="danger" aria-label="Revoke the invitation of ${i.email}">Revoke</button></form></td></tr>`,
  )}</tbody>
</table>`}`
  : ''}
<h2 id="leave">Leave</h2>
<p>Leaving revokes your keys of this organization at once; your personal wallet stays as it is.</p>
<form method="post" action="${orgHref(o.id, '/leave')}">
  <input type="hidden" name="_csrf" value="${nav.csrf}">
  <button type="submit" class="danger">Leave ${o.name}</button>
</form>`,
  );
}

/** One member (admins): their role and spend limit, and removing them. */
export function memberPage(nav: Nav, v: { organization: OrganizationView; member: MemberView; error?: FormError | undefined; values?: { role: string; spend_limit_coins: string; spend_limit_period: string } | undefined }) {
  const o = v.organization;
  const m = v.member;
  const limitError = errorOf(v.error, 'spend_limit_coins');
  const periodError = errorOf(v.error, 'spend_limit_period');
  const roleError = errorOf(v.error, 'role');
  const other = unplaced(v.error, ['spend_limit_coins', 'spend_limit_period', 'role']);
  const role = v.values?.role ?? m.role;
  const period = v.values?.spend_limit_period ?? m.spend_limit_period ?? 'monthly';
  return page(
    { title: `${m.email} in ${o.name}`, nav: { ...nav, current: CURRENT } },
    html`${notice('error', other)}
<p class="links"><a href="${orgHref(o.id)}#members">Back to ${o.name}</a></p>
<p>Spent: ${limitText(m.spend_limit_coins, m.spend_limit_period, m.spent_coins)}. The limit holds over all their keys of the organization, on top of each key's own limit.</p>
<form method="post" action="${orgHref(o.id, `/members/${encodeURIComponent(m.user_id)}`)}" class="stack org-form">
  <input type="hidden" name="_csrf" value="${nav.csrf}">
  <label for="member-role">Role ${fieldError('member-role', roleError)}</label>
  <select id="member-role" name="role"${invalidAttrs('member-role', roleError)}>
    ${(['member', 'admin', 'owner'] as const).map((r) => html`<option value="${r}"${role === r ? html` selected` : ''}>${ROLE_WORDS[r]}</option>`)}
  </select>
  <label for="member-limit">Spend limit in coins (empty: no limit) ${fieldError('member-limit', limitError)}</label>
  <input type="text" id="member-limit" name="spend_limit_coins" inputmode="decimal" maxlength="30" placeholder="100" value="${v.values?.spend_limit_coins ?? m.spend_limit_coins ?? ''}"${invalidAttrs('member-limit', limitError)}>
  <label for="member-period">Limit period ${fieldError('member-period', periodError)}</label>
  <select id="member-period" name="spend_limit_period"${invalidAttrs('member-period', periodError)}>
    <option value="monthly"${period === 'monthly' ? html` selected` : ''}>Per calendar month (UTC)</option>
    <option value="total"${period === 'total' ? html` selected` : ''}>In all, from now on</option>
  </select>
  <button type="submit">Save the member</button>
</form>
<h2 id="remove">Remove from the organization</h2>
<p>Their keys of this organization are revoked at once, and their apps lose access to its wallet.</p>
<form method="post" action="${orgHref(o.id, `/members/${encodeURIComponent(m.user_id)}/remove`)}">
  <input type="hidden" name="_csrf" value="${nav.csrf}">
  <button type="submit" class="danger">Remove ${m.email}</button>
</form>`,
  );
}

const num = (n: number) => n.toLocaleString('en-US');
const totalsCells = (t: { requests: number; spent_coins: number; input_tokens: number; output_tokens: number }) =>
  html`<td class="num">${num(t.requests)}</td><td class="num">${money(t.spent_coins)}</td><td class="num">${num(t.input_tokens)} / ${num(t.output_tokens)}</td>`;

/** The organization's usage per member and per key (a member: their own), with the CSV. */
export function organizationUsagePage(
  nav: Nav,
  v: { organization: { id: string; name: string }; usage?: OrganizationUsageView | undefined; range: { from: string; to: string }; error?: string | undefined; errorParam?: string | undefined; current?: string },
) {
  const u = v.usage;
  const range = u ? { from: u.from, to: u.to } : v.range;
  const o = v.organization;
  const csv = `${orgHref(o.id, '/usage.csv')}?${new URLSearchParams(range).toString()}`;
  return page(
    { title: `Usage of ${o.name}`, nav: { ...nav, current: v.current ?? CURRENT } },
    html`<p class="links"><a href="${orgHref(o.id)}">Back to ${o.name}</a></p>
${rangeForm(orgHref(o.id, '/usage'), range, v)}
${notice('error', v.error)}
${u
  ? html`${u.scope === 'member' ? html`<p class="hint">Your own use of the organization's wallet; its admins see every member's.</p>` : ''}
<div class="cards">
  <div class="card">Spent <strong>${moneyCard(u.totals.spent_coins)}</strong></div>
  <div class="card">Requests <strong>${num(u.totals.requests)}</strong></div>
</div>
<p class="links"><a href="${csv}" download>Download as CSV</a></p>
<h2>Per member</h2>
${u.members.length === 0
  ? emptyState('Nothing spent in these days.', html`Pick other days above, or <a href="/account/keys">create a key</a> of this organization.`)
  : html`<table>
  <thead><tr><th>Member</th><th class="num">Requests</th><th class="num">Spent</th><th class="num">Tokens in / out</th></tr></thead>
  <tbody>${u.members.map((m) => html`<tr><td>${m.email}</td>${totalsCells(m)}</tr>`)}</tbody>
</table>`}
<h2>Per key</h2>
${u.keys.length === 0
  ? emptyState('No requests in these days.')
  : html`<table>
  <thead><tr><th>Key</th><th>Member</th><th class="num">Requests</th><th class="num">Spent</th><th class="num">Tokens in / out</th></tr></thead>
  <tbody>${u.keys.map((k) => html`<tr><td>${k.name || k.key_id} <code>${k.prefix}…</code>${k.revoked ? ' (revoked)' : ''}</td><td>${k.email ?? '—'}</td>${totalsCells(k)}</tr>`)}</tbody>
</table>`}`
  : ''}`,
  );
}
