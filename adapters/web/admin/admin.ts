import { randomUUID } from 'node:crypto';
import express, { Router, type Request, type RequestHandler, type Response } from 'express';
import type { Logger } from 'pino';
import { createContext, type CoreDeps } from '../../../core/context.ts';
import { createCaller } from '../../../core/router.ts';
import { toCoreError } from '../../../core/trpc.ts';
import type { TemporalUi } from '../../graphql/context.ts';
import { executeAdminQuery } from '../../graphql/execute.ts';
import type { HttpAdapter } from '../../http/app.ts';
import type { BrowserKit } from '../../http/browser.ts';
import { HTTP_STATUS } from '../../http/status.ts';
import { html, notice, page, type Html } from '../html.ts';
import { MARGINS, marginSections, type MarginsData } from './margin.ts';

export interface AdminPagesOptions {
  kit: BrowserKit;
  logger: Logger;
  temporal: Partial<TemporalUi>;
}

/** An operation's data: the operations above are validated against the schema, and each page reads the fields it asked for. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- see above
type Data = Record<string, any>;

type Nav = { email: string; csrf: string; current: string };
const adminPage = (title: string, nav: Nav | undefined, body: Html) => page({ title, nav, area: 'admin' }, body);

/** Where to go after signing in: only an /admin path of this site. */
export const safeAdminNext = (next: unknown) => (typeof next === 'string' && next.length <= 2000 && /^\/admin(?:[/?][\w\-./?=&%+*~:@,;!()]*)?$/.test(next) && !next.startsWith('//') ? next : '/admin');

const day = (d: Date) => d.toISOString().slice(0, 10);

const DASHBOARD = `query Dashboard($from: String!, $to: String!) {
  usage(from: $from, to: $to) { data { day measures { spentCoins } } totals { spentCoins requests } }
  topModels(from: $from, to: $to, limit: 5) { data { modelId measures { spentCoins requests } } }
  topAccounts(from: $from, to: $to, limit: 5) { data { accountId email measures { spentCoins requests } } }
  generations(first: 10, filter: { status: failed }) { edges { node { id modelId createdAt error { code message } temporalUiUrl account { id email } } } }
  revenuePerDay(from: $from, to: $to) { day usdIn coinsCredited coinsSpent coinsTakenBack }
  payments(limit: 10) { accountId checkoutSessionId paymentIntentId amountUsd coins status refundedCents reversals { kind stripeId amountCents } createdAt }
}`;
const FAILED_JOBS = `query FailedJobs { generations(first: 50, filter: { status: failed }) { edges { node { id modelId createdAt error { code message } temporalUiUrl account { id email } } } } }`;
const ACCOUNTS = `query Accounts($filter: AccountFilter) { accounts(first: 50, filter: $filter) { edges { node { id email createdAt disabledAt wallet { coins } } } } }`;
const ACCOUNT = `query Account($id: ID!) { account(id: $id) {
  id email createdAt disabledAt paidAccount temporalJobsUrl
  wallet { coins purchasedCoins subscriptionCoins heldCoins }
  apiKeys(first: 20) { edges { node { id name prefix kind createdAt lastUsedAt revokedAt } } }
  ledgerEntries(first: 20) { edges { node { id createdAt kind pocket amountCoins balanceAfterCoins description } } }
} }`;
const ADJUST = `mutation Adjust($input: AdjustBalanceInput!) { adjustBalance(input: $input) { applied wallet { coins } } }`;
const AUDIT = `query Audit { auditLog(first: 50) { edges { node { id createdAt actorType actorId action targetType targetId reason } } } }`;

interface RevenueDay { day: string; usdIn: string; coinsCredited: number; coinsSpent: number; coinsTakenBack: number }
interface PaymentRow {
  accountId: string;
  checkoutSessionId: string;
  paymentIntentId: string | null;
  amountUsd: string;
  coins: number;
  status: string;
  refundedCents: number;
  reversals: { kind: string; stripeId: string; amountCents: number }[];
  createdAt: string;
}

/** Revenue per day, newest first, only the days with something (docs/payments.md, "Operators"). */
function revenueTable(days: RevenueDay[]): Html {
  const active = days.filter((d) => d.usdIn !== '0.00' || d.coinsCredited !== 0 || d.coinsSpent !== 0 || d.coinsTakenBack !== 0).reverse();
  if (active.length === 0) return html`<p>No payments and no spend in these 30 days.</p>`;
  return html`<table><thead><tr><th>Day</th><th>USD in</th><th>Coins credited</th><th>Coins spent</th><th>Coins taken back</th></tr></thead><tbody>
${active.map((d) => html`<tr><td>${d.day}</td><td>${d.usdIn}</td><td>${d.coinsCredited}</td><td>${d.coinsSpent}</td><td>${d.coinsTakenBack}</td></tr>`)}
</tbody></table>`;
}

function paymentsTable(payments: PaymentRow[]): Html {
  if (payments.length === 0) return html`<p>No payment yet.</p>`;
  return html`<table><thead><tr><th>When</th><th>Account</th><th>Checkout Session</th><th>PaymentIntent</th><th>USD</th><th>Coins</th><th>Status</th><th>Refunds and disputes</th></tr></thead><tbody>
${payments.map(
  (p) => html`<tr><td>${p.createdAt}</td><td><a href="/admin/accounts/${p.accountId}">${p.accountId}</a></td><td>${p.checkoutSessionId}</td><td>${p.paymentIntentId ?? ''}</td><td>${p.amountUsd}</td><td>${p.coins}</td><td>${p.status}</td><td>${p.reversals.map((r) => `${r.kind} ${r.stripeId} (${r.amountCents} cents)`).join('; ')}</td></tr>`,
)}
</tbody></table>`;
}

interface FailedJob { id: string; modelId: string; createdAt: string; error: { code: string; message: string } | null; temporalUiUrl: string | null; account: { id: string; email: string } }

/** The spend per day as bars: an inline SVG, no script. */
function spendChart(days: string[], spent: Map<string, number>): Html {
  const max = Math.max(1, ...spent.values());
  const w = 20;
  const h = 120;
  return html`<svg class="chart" role="img" aria-label="Coins spent per day, last 30 days" viewBox="0 0 ${days.length * w} ${h + 20}" width="${days.length * w}" height="${h + 20}">
${days.map((d, i) => {
  const v = spent.get(d) ?? 0;
  const bh = Math.round((v / max) * h);
  return html`<rect x="${i * w + 2}" y="${h - bh}" width="${w - 4}" height="${bh}" fill="#3b6ea5"><title>${d}: ${v} coins</title></rect>`;
})}
<text x="0" y="${h + 15}" font-size="10">${days[0]}</text><text x="${days.length * w}" y="${h + 15}" font-size="10" text-anchor="end">${days.at(-1)}</text>
</svg>`;
}

function jobsTable(jobs: FailedJob[]): Html {
  if (jobs.length === 0) return html`<p>No failed jobs.</p>`;
  return html`<table><thead><tr><th>Job</th><th>Account</th><th>Model</th><th>When</th><th>Error</th><th>Temporal</th></tr></thead><tbody>
${jobs.map((j) => html`<tr><td><code>${j.id}</code></td><td><a href="/admin/accounts/${j.account.id}">${j.account.email}</a></td><td>${j.modelId}</td><td>${j.createdAt}</td><td>${j.error ? `${j.error.code}: ${j.error.message}` : ''}</td><td>${j.temporalUiUrl ? html`<a href="${j.temporalUiUrl}" rel="noopener">Temporal UI</a>` : '—'}</td></tr>`)}
</tbody></table>`;
}

/**
 * The admin pages at /admin (issue 18): sign-in with an admin user's password or one-time link,
 * a dashboard, accounts (with a balance adjustment), failed jobs and the audit log. Every read
 * and action is a GraphQL operation of the admin API, executed in this process with the admin
 * session's credential, so roles (a viewer cannot act) and auditing are the API's.
 */
export function adminPagesAdapter(deps: CoreDeps, opts: AdminPagesOptions): HttpAdapter {
  const { kit } = opts;
  const temporal: TemporalUi = { uiUrl: opts.temporal.uiUrl, namespace: opts.temporal.namespace ?? 'default' };
  const router = Router();
  // The admin API's path is not a page.
  router.use((req, _res, next) => next(req.path === '/graphql' || req.path.startsWith('/graphql/') ? 'router' : undefined));
  router.use(kit.middleware);
  router.use(express.urlencoded({ extended: false, limit: '16kb', parameterLimit: 20 }));
  router.use((_req, res, next) => {
    res.locals.route = '/admin';
    res.setHeader('Cache-Control', 'no-store');
    next();
  });

  const core = (req: Request) => createCaller(createContext(deps, { kind: 'admin', token: kit.adminSessionToken(req) }, { requestId: String(req.id), clientIp: req.ip }));
  const form = (req: Request, field: string) => {
    const value = (req.body as Record<string, unknown> | undefined)?.[field];
    return typeof value === 'string' ? value : '';
  };
  const send = (res: Response, body: string, status = 200) => void res.status(status).type('html').send(body);
  const query = <T = Data>(req: Request, source: string, variables: Record<string, unknown> = {}) =>
    executeAdminQuery<T>(deps, { kind: 'admin', token: kit.adminSessionToken(req) }, source, variables, { temporal, logger: req.log ?? opts.logger, requestId: String(req.id), clientIp: req.ip });
  /** A read: its data, or a GraphQL error thrown as a page error. */
  const read = async <T = Data>(req: Request, source: string, variables: Record<string, unknown> = {}) => {
    const result = await query<T>(req, source, variables);
    if (result.errors.length > 0 || !result.data) throw new PageError(result.errors[0]?.message ?? 'The query failed.');
    return result.data;
  };

  const pageError = (req: Request, res: Response, err: unknown) => {
    const failure = toCoreError(err);
    if (failure?.code === 'unauthorized') return res.redirect(303, `/admin/login?${new URLSearchParams({ next: safeAdminNext(req.originalUrl) }).toString()}`);
    if (failure) return send(res, adminPage('Something is wrong', undefined, html`<p class="error" role="alert">${failure.message}</p>`), HTTP_STATUS[failure.code]);
    if (err instanceof PageError) return send(res, adminPage('Something is wrong', undefined, html`<p class="error" role="alert">${err.message}</p>`), 400);
    (req.log ?? opts.logger).error({ err }, 'admin page failed');
    send(res, adminPage('Something went wrong', undefined, html`<p class="error" role="alert">The page could not be shown. Request id: ${String(req.id)}.</p>`), 500);
  };
  const signedIn = (current: string, fn: (req: Request, res: Response, nav: Nav) => Promise<void>): RequestHandler => async (req, res) => {
    try {
      if (!kit.adminSessionToken(req)) return res.redirect(303, `/admin/login?${new URLSearchParams({ next: safeAdminNext(req.originalUrl) }).toString()}`);
      const me = await core(req).admin.whoami();
      await fn(req, res, { email: `${me.role} admin`, csrf: kit.csrfToken(req, res), current });
    } catch (err) {
      pageError(req, res, err);
    }
  };

  const loginPage = (v: { csrf: string; next: string; email?: string; error?: string }) =>
    adminPage('Admin sign in', undefined, html`${notice('error', v.error)}
<form method="post" action="/admin/login" class="stack">
  <input type="hidden" name="_csrf" value="${v.csrf}">
  <input type="hidden" name="next" value="${v.next}">
  <label>Email <input type="email" name="email" autocomplete="username" required maxlength="254" value="${v.email ?? ''}"></label>
  <label>Password <input type="password" name="password" autocomplete="current-password" required maxlength="256"></label>
  <button type="submit">Sign in</button>
</form>`);
  const linkPage = (v: { csrf: string; token: string; error?: string }) =>
    adminPage('Admin sign-in link', undefined, html`${notice('error', v.error)}
<form method="post" action="/admin/login/link" class="stack">
  <input type="hidden" name="_csrf" value="${v.csrf}">
  <input type="hidden" name="token" value="${v.token}">
  <label>Choose a password (at least 12 characters) <input type="password" name="new_password" autocomplete="new-password" minlength="12" maxlength="256"></label>
  <button type="submit">Continue</button>
</form>`);

  router.get('/login', (req, res) => send(res, loginPage({ csrf: kit.csrfToken(req, res), next: safeAdminNext(req.query.next) })));
  router.post('/login', kit.requireCsrf, async (req, res) => {
    const email = form(req, 'email');
    const next = safeAdminNext(form(req, 'next'));
    try {
      const session = await core(req).admin.session.signIn({ email, password: form(req, 'password') });
      kit.setAdminSession(res, session.token, new Date(session.expires_at));
      res.redirect(303, next);
    } catch (err) {
      const failure = toCoreError(err);
      if (!failure) return pageError(req, res, err);
      send(res, loginPage({ csrf: kit.csrfToken(req, res), next, email, error: failure.message }), HTTP_STATUS[failure.code]);
    }
  });
  // A GET never redeems the link (link previews would use it up): the form posts it.
  router.get('/login/link', (req, res) => send(res, linkPage({ csrf: kit.csrfToken(req, res), token: String(req.query.token ?? '').slice(0, 200) })));
  router.post('/login/link', kit.requireCsrf, async (req, res) => {
    const token = form(req, 'token');
    const password = form(req, 'new_password');
    try {
      const session = await core(req).admin.session.redeemLink({ token, ...(password ? { new_password: password } : {}) });
      kit.setAdminSession(res, session.token, new Date(session.expires_at));
      res.redirect(303, '/admin');
    } catch (err) {
      const failure = toCoreError(err);
      if (!failure) return pageError(req, res, err);
      send(res, linkPage({ csrf: kit.csrfToken(req, res), token: failure.code === 'unauthorized' ? '' : token, error: failure.message }), HTTP_STATUS[failure.code]);
    }
  });
  router.post('/logout', kit.requireCsrf, async (req, res) => {
    await core(req).admin.session.signOut().catch(() => undefined);
    kit.clearAdminSession(res);
    res.redirect(303, '/admin/login');
  });

  router.get('/', signedIn('/admin', async (req, res, nav) => {
    const to = new Date();
    const from = new Date(to.getTime() - 29 * 86_400_000);
    const data = await read(req, DASHBOARD, { from: day(from), to: day(to) });
    const days = Array.from({ length: 30 }, (_, i) => day(new Date(from.getTime() + i * 86_400_000)));
    const spent = new Map<string, number>();
    for (const row of data.usage.data as { day: string; measures: { spentCoins: string } }[]) spent.set(row.day, (spent.get(row.day) ?? 0) + Number(row.measures.spentCoins));
    const jobs = (data.generations.edges as { node: FailedJob }[]).map((e) => e.node);
    send(res, adminPage('Dashboard', nav, html`
<section><h2>Spend per day, last 30 days</h2>
<p>${data.usage.totals.spentCoins} coins spent, ${data.usage.totals.requests} requests.</p>
${spendChart(days, spent)}</section>
<section><h2>Top models</h2>
<table><thead><tr><th>Model</th><th>Coins spent</th><th>Requests</th></tr></thead><tbody>
${(data.topModels.data as { modelId: string; measures: { spentCoins: string; requests: number } }[]).map((m) => html`<tr><td>${m.modelId}</td><td>${m.measures.spentCoins}</td><td>${m.measures.requests}</td></tr>`)}
</tbody></table></section>
<section><h2>Top accounts</h2>
<table><thead><tr><th>Account</th><th>Coins spent</th><th>Requests</th></tr></thead><tbody>
${(data.topAccounts.data as { accountId: string; email: string | null; measures: { spentCoins: string; requests: number } }[]).map((a) => html`<tr><td><a href="/admin/accounts/${a.accountId}">${a.email ?? a.accountId}</a></td><td>${a.measures.spentCoins}</td><td>${a.measures.requests}</td></tr>`)}
</tbody></table></section>
<section><h2>Revenue per day, last 30 days</h2>${revenueTable(data.revenuePerDay as RevenueDay[])}</section>
<section><h2>Newest payments</h2>${paymentsTable(data.payments as PaymentRow[])}</section>
<section><h2>Newest failed jobs</h2>${jobsTable(jobs)}</section>`));
  }));

  // Revenue, upstream cost and margin over a range (default the last 30 days); core checks the range.
  router.get('/margin', signedIn('/admin/margin', async (req, res, nav) => {
    const to = new Date();
    const param = (name: string, fallback: string) => (typeof req.query[name] === 'string' && req.query[name] !== '' ? req.query[name].slice(0, 20) : fallback);
    const range = { from: param('from', day(new Date(to.getTime() - 29 * 86_400_000))), to: param('to', day(to)) };
    const data = await read<MarginsData>(req, MARGINS, range);
    send(res, adminPage('Margin', nav, marginSections(range, data)));
  }));

  router.get('/jobs', signedIn('/admin/jobs', async (req, res, nav) => {
    const data = await read(req, FAILED_JOBS);
    send(res, adminPage('Failed jobs', nav, jobsTable((data.generations.edges as { node: FailedJob }[]).map((e) => e.node))));
  }));

  router.get('/accounts', signedIn('/admin/accounts', async (req, res, nav) => {
    const q = typeof req.query.q === 'string' ? req.query.q.trim().slice(0, 254) : '';
    const data = await read(req, ACCOUNTS, { filter: q ? { emailPrefix: q } : null });
    const rows = (data.accounts.edges as { node: { id: string; email: string; createdAt: string; disabledAt: string | null; wallet: { coins: string } } }[]).map((e) => e.node);
    send(res, adminPage('Accounts', nav, html`
<form method="get" action="/admin/accounts" class="inline"><label>Email starts with <input type="search" name="q" value="${q}" maxlength="254"></label> <button type="submit">Find</button></form>
${rows.length === 0 ? html`<p>No accounts.</p>` : html`<table><thead><tr><th>Email</th><th>Balance</th><th>Created</th><th>State</th></tr></thead><tbody>
${rows.map((a) => html`<tr><td><a href="/admin/accounts/${a.id}">${a.email}</a></td><td>${a.wallet.coins} coins</td><td>${a.createdAt}</td><td>${a.disabledAt ? 'disabled' : 'active'}</td></tr>`)}
</tbody></table>`}`));
  }));

  const renderAccount = async (req: Request, res: Response, nav: Nav, extra: { error?: string; status?: number; values?: { coins: string; reason: string } } = {}) => {
    const id = String(req.params.id);
    const data = await read(req, ACCOUNT, { id });
    const a = data.account;
    if (!a) return send(res, adminPage('Not found', nav, html`<p class="error" role="alert">No such account.</p>`), 404);
    const keys = (a.apiKeys.edges as { node: { id: string; name: string; prefix: string; kind: string; createdAt: string; lastUsedAt: string | null; revokedAt: string | null } }[]).map((e) => e.node);
    const entries = (a.ledgerEntries.edges as { node: { id: string; createdAt: string; kind: string; pocket: string; amountCoins: string; balanceAfterCoins: string; description: string } }[]).map((e) => e.node);
    send(res, adminPage(`Account ${a.email}`, nav, html`
${notice('error', extra.error)}${notice('info', req.query.adjusted === '1' ? 'The balance was adjusted.' : undefined)}
<section><h2>Wallet</h2>
<p>Balance: <strong id="balance">${a.wallet.coins} coins</strong> (purchased ${a.wallet.purchasedCoins}, subscription ${a.wallet.subscriptionCoins}, held ${a.wallet.heldCoins})${a.disabledAt ? html` · <strong>disabled</strong>` : ''}</p>
${a.temporalJobsUrl ? html`<p><a href="${a.temporalJobsUrl}" rel="noopener">This account's jobs in the Temporal UI</a></p>` : ''}
<form method="post" action="/admin/accounts/${a.id}/adjust" class="stack">
  <input type="hidden" name="_csrf" value="${nav.csrf}">
  <input type="hidden" name="idempotency_key" value="${randomUUID()}">
  <label>Coins (signed: +10 adds, -3 takes) <input type="text" name="coins" required maxlength="40" pattern="[+\\-]?[0-9]+(\\.[0-9]+)?" value="${extra.values?.coins ?? ''}"></label>
  <label>Reason <input type="text" name="reason" required maxlength="500" value="${extra.values?.reason ?? ''}"></label>
  <button type="submit">Adjust balance</button>
</form></section>
<section><h2>API keys</h2>
${keys.length === 0 ? html`<p>No keys.</p>` : html`<table><thead><tr><th>Name</th><th>Prefix</th><th>Kind</th><th>Created</th><th>Last used</th><th>Revoked</th></tr></thead><tbody>
${keys.map((k) => html`<tr><td>${k.name}</td><td><code>${k.prefix}</code></td><td>${k.kind}</td><td>${k.createdAt}</td><td>${k.lastUsedAt ?? '—'}</td><td>${k.revokedAt ?? '—'}</td></tr>`)}
</tbody></table>`}</section>
<section><h2>Recent ledger entries</h2>
${entries.length === 0 ? html`<p>No entries.</p>` : html`<table><thead><tr><th>When</th><th>Kind</th><th>Pocket</th><th>Coins</th><th>Balance after</th><th>Description</th></tr></thead><tbody>
${entries.map((e) => html`<tr><td>${e.createdAt}</td><td>${e.kind}</td><td>${e.pocket}</td><td>${e.amountCoins}</td><td>${e.balanceAfterCoins}</td><td>${e.description}</td></tr>`)}
</tbody></table>`}</section>`), extra.status);
  };
  router.get('/accounts/:id', signedIn('/admin/accounts', (req, res, nav) => renderAccount(req, res, nav)));
  router.post('/accounts/:id/adjust', kit.requireCsrf, signedIn('/admin/accounts', async (req, res, nav) => {
    const values = { coins: form(req, 'coins').trim(), reason: form(req, 'reason').trim() };
    const id = String(req.params.id);
    if (!values.reason) return renderAccount(req, res, nav, { error: 'A reason is required.', status: 400, values });
    const result = await query(req, ADJUST, { input: { account: id, coins: values.coins, reason: values.reason, idempotencyKey: form(req, 'idempotency_key') || randomUUID() } });
    if (result.errors.length > 0) return renderAccount(req, res, nav, { error: result.errors[0]!.message, status: statusOfGraphql(result.errors[0]!), values });
    res.redirect(303, `/admin/accounts/${encodeURIComponent(id)}?adjusted=1`);
  }));

  router.get('/audit', signedIn('/admin/audit', async (req, res, nav) => {
    const data = await read(req, AUDIT);
    const rows = (data.auditLog.edges as { node: { id: string; createdAt: string; actorType: string; actorId: string | null; action: string; targetType: string; targetId: string; reason: string | null } }[]).map((e) => e.node);
    send(res, adminPage('Audit log', nav, rows.length === 0 ? html`<p>No entries.</p>` : html`<table><thead><tr><th>When</th><th>Actor</th><th>Action</th><th>Target</th><th>Reason</th></tr></thead><tbody>
${rows.map((r) => html`<tr><td>${r.createdAt}</td><td>${r.actorType}${r.actorId ? ` ${r.actorId}` : ''}</td><td>${r.action}</td><td>${r.targetType} ${r.targetId}</td><td>${r.reason ?? ''}</td></tr>`)}
</tbody></table>`));
  }));

  router.use((req, res) => send(res, adminPage('Not found', undefined, html`<p>There is no page at /admin${req.path}. <a href="/admin">Dashboard</a></p>`), 404));
  router.use(((err, req, res, _next) => {
    if (err === kit.invalidCsrfError) {
      return send(res, adminPage('Form expired', undefined, html`<p class="error" role="alert">This form has expired or did not come from this site. Go back, reload the page and try again.</p>`), 403);
    }
    const status = (err as { status?: unknown }).status;
    if (typeof status === 'number' && status >= 400 && status < 500) return send(res, adminPage('This form could not be read', undefined, html`<p class="error" role="alert">The form was not readable.</p>`), status);
    pageError(req, res, err);
  }) as express.ErrorRequestHandler);
  return { path: '/admin', router };
}

class PageError extends Error {}

const statusOfGraphql = (err: { extensions?: Record<string, unknown> }) => {
  const code = err.extensions?.code;
  return code === 'FORBIDDEN' ? 403 : code === 'NOT_FOUND' ? 404 : 400;
};
