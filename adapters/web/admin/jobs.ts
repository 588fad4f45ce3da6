import type { Request } from 'express';
import { emptyState, fieldError, html, invalidAttrs, money, notice, type Html } from '../html.ts';
import { doneMessages, mountActions, type ActionSpec } from './actions.ts';
import { actionForm, adminPage, doneNotice, idCode, truncate, viewerNote, when, type Data, type Mount } from './shared.ts';

/** The Jobs pages: a search over every account's media jobs, and one job with cancel and refund. */

const STATUSES = ['queued', 'running', 'succeeded', 'failed', 'canceled'] as const;
const PAGE_SIZE = 25;

const JOBS = `query Jobs($account: ID, $after: String, $first: Int, $filter: GenerationFilter) {
  generations(first: $first, account: $account, after: $after, filter: $filter) {
    edges { node { id modelId status createdAt error { code message } account { id email } } }
    pageInfo { hasNextPage endCursor }
  }
}`;
const ACCOUNT_BY_EMAIL = `query AccountByEmail($prefix: String!) { accounts(first: 20, filter: { emailPrefix: $prefix }) { edges { node { id email } } } }`;
const JOB = `query Job($id: ID!) { generation(id: $id) {
  id status modelId prompt createdAt startedAt completedAt priceCoins costCoins provider routeModel workflowId runId temporalUiUrl
  error { code message } account { id email } key { id name prefix }
} }`;
const REFUNDS = `query Refunds($account: ID!, $reference: String!) { account(id: $account) { ledgerEntries(first: 1, filter: { kind: refund, reference: $reference }) { edges { node { id createdAt amountCoins } } } } }`;

export interface JobRow { id: string; modelId: string; status?: string; createdAt: string; error: { code: string; message: string } | null; account: { id: string; email: string } }

const jobUrl = (id: string) => `/admin/jobs/${encodeURIComponent(id)}`;

/** Jobs, few and short columns: the error as its code and the start of its message (the whole of it is on the job's page). */
export function jobsTable(jobs: JobRow[], empty = 'No jobs.'): Html {
  if (jobs.length === 0) return emptyState(empty);
  return html`<table class="jobs"><thead><tr><th>Job</th><th>Account</th><th>Model</th><th>When</th><th>Status</th></tr></thead><tbody>
${jobs.map(
  (j) => html`<tr><td><a href="${jobUrl(j.id)}">${idCode(j.id)}</a></td><td><a href="/admin/accounts/${encodeURIComponent(j.account.id)}">${truncate(j.account.email, 32)}</a></td><td>${truncate(j.modelId, 32)}</td><td>${when(j.createdAt)}</td><td>${j.status ?? 'failed'}${
    j.error ? html`<br><span class="job-error"><code>${j.error.code}</code> ${truncate(j.error.message, 60)}</span>` : ''
  }</td></tr>`,
)}
</tbody></table>`;
}

const text = (req: Request, name: string, max: number) => (typeof req.query[name] === 'string' ? req.query[name].trim().slice(0, max) : '');
const DAY = /^\d{4}-\d{2}-\d{2}$/;

/**
 * The search form's values, checked: a bad one is an error beside its field (the form comes back,
 * 400, with what was typed), never a page without the form.
 */
function searchOf(req: Request) {
  const s = { account: text(req, 'account', 254), model: text(req, 'model', 200), status: text(req, 'status', 20), from: text(req, 'from', 10), to: text(req, 'to', 10), after: text(req, 'after', 100) };
  const errors: Partial<Record<'status' | 'from' | 'to', string>> = {};
  if (s.status && !(STATUSES as readonly string[]).includes(s.status)) errors.status = `Status: choose one of ${STATUSES.join(', ')}.`;
  for (const [field, label] of [['from', 'From'], ['to', 'To']] as const) {
    if (s[field] && (!DAY.test(s[field]) || Number.isNaN(Date.parse(`${s[field]}T00:00:00Z`)))) errors[field] = `${label}: a date such as 2026-11-27.`;
  }
  return { s, errors };
}

const ACTIONS: ActionSpec[] = [
  {
    key: 'canceled',
    path: '/jobs/:id/cancel',
    title: () => 'Cancel the job',
    button: () => 'Cancel job',
    understand: 'I understand the job stops and its price is refunded in full.',
    danger: true,
    mutation: `mutation Cancel($id: ID!, $reason: String) { cancelGeneration(id: $id, reason: $reason) { id status } }`,
    variables: (req, reason) => ({ id: String(req.params.id), reason }),
    back: (req) => jobUrl(String(req.params.id)),
    done: 'The job was canceled and its price refunded.',
  },
  {
    key: 'refunded',
    path: '/jobs/:id/refund',
    title: () => 'Refund the job',
    button: () => 'Refund job',
    understand: 'I understand what the job was charged goes back to the account, once.',
    mutation: `mutation Refund($id: ID!, $reason: String!) { refundGeneration(id: $id, reason: $reason) { applied refundedCoins } }`,
    variables: (req, reason) => ({ id: String(req.params.id), reason }),
    back: (req) => jobUrl(String(req.params.id)),
    done: 'The job was refunded.',
  },
];
const DONE = doneMessages(ACTIONS);

export const mountJobs: Mount = (router, tools) => {
  router.get('/jobs', tools.signedIn('/admin/jobs', async (req, res, nav) => {
    const { s, errors } = searchOf(req);
    const invalid = Object.keys(errors).length > 0;
    let account: string | null = null;
    let unknownAccount = false;
    if (invalid) {
      // The form again, with each error beside its field; nothing is searched.
    } else if (s.account.includes('@')) {
      const found = await tools.read(req, ACCOUNT_BY_EMAIL, { prefix: s.account });
      const match = (found.accounts.edges as { node: { id: string; email: string } }[]).find((e) => e.node.email.toLowerCase() === s.account.toLowerCase());
      if (match) account = match.node.id;
      else unknownAccount = true;
    } else if (s.account) account = s.account;
    const filter = {
      ...(s.model ? { model: s.model } : {}),
      ...(s.status ? { status: s.status } : {}),
      ...(s.from ? { since: `${s.from}T00:00:00Z` } : {}),
      ...(s.to ? { until: new Date(Date.parse(`${s.to}T00:00:00Z`) + 86_400_000).toISOString() } : {}),
    };
    let jobs: JobRow[] = [];
    let next: string | null = null;
    if (!unknownAccount && !invalid) {
      const data = await tools.read(req, JOBS, { account, after: s.after || null, first: PAGE_SIZE, filter });
      jobs = (data.generations.edges as { node: JobRow }[]).map((e) => e.node);
      next = data.generations.pageInfo.hasNextPage ? (data.generations.pageInfo.endCursor as string) : null;
    }
    const keep = (after?: string) => {
      const q = new URLSearchParams(Object.entries({ ...s, after: after ?? '' }).filter(([, v]) => v !== ''));
      return `/admin/jobs${q.size > 0 ? `?${q.toString()}` : ''}`;
    };
    const first = errors.status ?? errors.from ?? errors.to;
    tools.send(res, adminPage('Jobs', nav, html`${notice('error', first)}
<form method="get" action="/admin/jobs" class="search admin-search" novalidate>
  <label>Account (id or e-mail) <input type="text" name="account" value="${s.account}" maxlength="254"></label>
  <label>Model <input type="text" name="model" value="${s.model}" maxlength="200"></label>
  <label>Status ${fieldError('status', errors.status)}<select name="status"${invalidAttrs('status', errors.status)}><option value="">any</option>${STATUSES.map((st) => html`<option value="${st}"${s.status === st ? html` selected` : ''}>${st}</option>`)}</select></label>
  <label>From (UTC) ${fieldError('from', errors.from)}<input type="${errors.from ? 'text' : 'date'}" name="from" value="${s.from}" placeholder="2026-11-27"${invalidAttrs('from', errors.from)}></label>
  <label>To (UTC) ${fieldError('to', errors.to)}<input type="${errors.to ? 'text' : 'date'}" name="to" value="${s.to}" placeholder="2026-11-27"${invalidAttrs('to', errors.to)}></label>
  <button type="submit">Search</button>
</form>
${unknownAccount ? notice('error', `No account has the e-mail ${s.account}.`) : ''}
${invalid ? '' : jobsTable(jobs, s.after ? 'No more jobs.' : 'No jobs match. Widen the dates, or clear a field and search again.')}
<nav class="pager" aria-label="Pages of jobs">${s.after ? html`<a href="${keep()}">First page</a>` : ''}${next ? html` <a href="${keep(next)}" rel="next">Next page</a>` : ''}</nav>`), invalid ? 400 : 200);
  }));

  router.get('/jobs/:id', tools.signedIn('/admin/jobs', async (req, res, nav) => {
    const id = String(req.params.id);
    const data = await tools.read(req, JOB, { id });
    const j = data.generation as Data | null;
    if (!j) return tools.send(res, adminPage('Not found', nav, html`<p class="error" role="alert">No such job.</p>`), 404);
    let refund: { createdAt: string; amountCoins: string } | undefined;
    if (j.status === 'succeeded') {
      const refunds = await tools.read(req, REFUNDS, { account: j.account.id, reference: j.id });
      refund = refunds.account?.ledgerEntries.edges[0]?.node;
    }
    const operator = nav.role === 'operator';
    const cancelable = j.status === 'queued' || j.status === 'running';
    const refundable = j.status === 'succeeded' && !refund && j.costCoins !== null && Number(j.costCoins) > 0;
    tools.send(res, adminPage(`Job ${j.id}`, nav, html`
${doneNotice(req, DONE)}${viewerNote(nav)}
<dl class="facts job-facts">
  <dt>Status</dt><dd id="job-status">${j.status}</dd>
  <dt>Account</dt><dd><a href="/admin/accounts/${encodeURIComponent(j.account.id)}">${j.account.email}</a></dd>
  <dt>Key</dt><dd>${j.key.name} (<code>${j.key.prefix}</code>)</dd>
  <dt>Model</dt><dd>${j.modelId}${j.provider ? html` <span class="hint">via ${j.provider}/${j.routeModel ?? ''}</span>` : ''}</dd>
  <dt>Created</dt><dd>${when(j.createdAt)}</dd>
  <dt>Started</dt><dd>${when(j.startedAt)}</dd>
  <dt>Ended</dt><dd>${when(j.completedAt)}</dd>
  <dt>Price</dt><dd>${money(Number(j.priceCoins))} reserved; charged ${j.costCoins === null || j.costCoins === undefined ? '—' : money(Number(j.costCoins))}</dd>
  ${refund ? html`<dt>Refunded</dt><dd id="job-refund">${money(Number(refund.amountCoins))}, ${when(refund.createdAt)}</dd>` : ''}
  <dt>Prompt</dt><dd>${truncate(String(j.prompt), 500)}</dd>
  <dt>Workflow</dt><dd>${idCode(j.workflowId)}${j.runId ? html` run ${idCode(j.runId)}` : ''}</dd>
  <dt>Temporal</dt><dd>${j.temporalUiUrl ? html`<a href="${j.temporalUiUrl}" rel="noopener">This job in the Temporal UI</a>` : 'The Temporal UI address is not configured (TEMPORAL_UI_URL).'}</dd>
</dl>
${j.error ? html`<section><h2>Error</h2><p><code>${j.error.code}</code></p><p class="job-error-full">${j.error.message}</p></section>` : ''}
${operator && cancelable ? html`<section><h2>Cancel</h2>${actionForm({ action: `${jobUrl(j.id)}/cancel`, csrf: nav.csrf, understand: ACTIONS[0]!.understand, button: 'Cancel job', danger: true })}</section>` : ''}
${operator && refundable ? html`<section><h2>Refund</h2>${actionForm({ action: `${jobUrl(j.id)}/refund`, csrf: nav.csrf, understand: ACTIONS[1]!.understand, button: 'Refund job' })}</section>` : ''}
<p><a href="/admin/jobs?${new URLSearchParams({ account: j.account.id }).toString()}">More jobs of this account</a></p>`));
  }));

  mountActions(router, tools, ACTIONS);
};
