import { coinsText, emptyState, html, money, usdText, COINS_PER_USD, notice, type Html } from '../html.ts';
import { jobsTable, type JobRow } from './jobs.ts';
import { marginForm, MARGINS, marginSections, type MarginsData } from './margin.ts';
import { adminPage, idCode, messageOfGraphql, onDay, readableDay, statusOfGraphql, truncate, when, type Mount } from './shared.ts';

/** The read-only pages: the dashboard, the margin and the audit log. */

const day = (d: Date) => d.toISOString().slice(0, 10);

const DASHBOARD = `query Dashboard($from: String!, $to: String!) {
  usage(from: $from, to: $to) { data { day measures { spentCoins } } totals { spentCoins requests } }
  topModels(from: $from, to: $to, limit: 5) { data { modelId measures { spentCoins requests } } }
  topAccounts(from: $from, to: $to, limit: 5) { data { accountId email measures { spentCoins requests } } }
  generations(first: 10, filter: { status: failed }) { edges { node { id modelId status createdAt error { code message } account { id email } } } }
  revenuePerDay(from: $from, to: $to) { day usdIn coinsCredited coinsSpent coinsTakenBack }
  organizations(first: 5) { edges { node { id name memberCount createdAt wallet { coins } } } }
  payments(limit: 10) { accountId checkoutSessionId paymentIntentId amountUsd coins status refundedCents reversals { kind stripeId amountCents } createdAt }
}`;
const AUDIT = `query Audit($after: String) { auditLog(first: 50, after: $after) { edges { node { id createdAt actorType actorId action targetType targetId reason } } pageInfo { hasNextPage endCursor } } }`;

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
  if (active.length === 0) return emptyState('No payments and no spend in these 30 days.', html`Payments show here once customers pay through Stripe; an account can also be topped up by hand on its page.`);
  return html`<table><thead><tr><th>Day (UTC)</th><th class="num">USD in</th><th class="num">Credited</th><th class="num">Spent</th><th class="num">Taken back</th></tr></thead><tbody>
${active.map((d) => html`<tr><td>${onDay(d.day)}</td><td class="num">${usdText(Number(d.usdIn) * COINS_PER_USD)}</td><td class="num">${money(d.coinsCredited)}</td><td class="num">${money(d.coinsSpent)}</td><td class="num">${money(d.coinsTakenBack)}</td></tr>`)}
</tbody></table>`;
}

/** Payments, in few columns: the Stripe ids in one cell, as codes that may break. */
function paymentsTable(payments: PaymentRow[]): Html {
  if (payments.length === 0) return emptyState('No payment yet.', html`Customers pay on their Billing page once Stripe is set up (STRIPE_SECRET_KEY; docs/payments.md in the repository).`);
  return html`<table><thead><tr><th>When</th><th>Account</th><th class="num">USD</th><th class="num">Coins</th><th>Status</th><th>Stripe</th></tr></thead><tbody>
${payments.map(
  (p) => html`<tr><td>${when(p.createdAt)}</td><td><a href="/admin/accounts/${encodeURIComponent(p.accountId)}">${idCode(p.accountId)}</a></td><td class="num">${usdText(Number(p.amountUsd) * COINS_PER_USD)}</td><td class="num">${coinsText(p.coins)}</td><td>${p.status}${
    p.reversals.length > 0 ? html`<br><span class="hint">${truncate(p.reversals.map((r) => `${r.kind} ${r.amountCents} cents`).join('; '), 80)}</span>` : ''
  }</td><td>${idCode(p.checkoutSessionId)}${p.paymentIntentId ? html`<br>${idCode(p.paymentIntentId)}` : ''}</td></tr>`,
)}
</tbody></table>`;
}

/** The spend per day as bars: an inline SVG, no script; it scales down to the screen's width (CSS). */
function spendChart(days: string[], spent: Map<string, number>): Html {
  const max = Math.max(1, ...spent.values());
  const w = 20;
  const h = 120;
  return html`<svg class="chart" role="img" aria-label="Coins spent per day, last 30 days" viewBox="0 0 ${days.length * w} ${h + 20}" width="${days.length * w}" height="${h + 20}">
${days.map((d, i) => {
  const v = spent.get(d) ?? 0;
  const bh = Math.round((v / max) * h);
  return html`<rect x="${i * w + 2}" y="${h - bh}" width="${w - 4}" height="${bh}" fill="#3b6ea5"><title>${readableDay(d)}: ${v} coins</title></rect>`;
})}
<text x="0" y="${h + 15}" font-size="10">${readableDay(days[0]!)}</text><text x="${days.length * w}" y="${h + 15}" font-size="10" text-anchor="end">${readableDay(days.at(-1)!)}</text>
</svg>`;
}

export const mountDashboard: Mount = (router, tools) => {
  router.get('/', tools.signedIn('/admin', async (req, res, nav) => {
    const to = new Date();
    const from = new Date(to.getTime() - 29 * 86_400_000);
    const data = await tools.read(req, DASHBOARD, { from: day(from), to: day(to) });
    const days = Array.from({ length: 30 }, (_, i) => day(new Date(from.getTime() + i * 86_400_000)));
    const spent = new Map<string, number>();
    for (const row of data.usage.data as { day: string; measures: { spentCoins: string } }[]) spent.set(row.day, (spent.get(row.day) ?? 0) + Number(row.measures.spentCoins));
    const jobs = (data.generations.edges as { node: JobRow }[]).map((e) => e.node);
    tools.send(res, adminPage('Dashboard', nav, html`
<section><h2>Spend per day, last 30 days</h2>
<p>${money(Number(data.usage.totals.spentCoins))} spent, ${Number(data.usage.totals.requests).toLocaleString('en-US')} requests. Days in UTC.</p>
${spendChart(days, spent)}</section>
<section><h2>Top models</h2>
${(data.topModels.data as unknown[]).length === 0 ? emptyState('Nothing spent in these 30 days.', html`The models customers use show here once they spend.`) : html`<table><thead><tr><th>Model</th><th class="num">Spent</th><th class="num">Requests</th></tr></thead><tbody>
${(data.topModels.data as { modelId: string; measures: { spentCoins: string; requests: number } }[]).map((m) => html`<tr><td>${truncate(m.modelId, 40)}</td><td class="num">${money(Number(m.measures.spentCoins))}</td><td class="num">${m.measures.requests}</td></tr>`)}
</tbody></table>`}</section>
<section><h2>Top accounts</h2>
${(data.topAccounts.data as unknown[]).length === 0 ? emptyState('Nothing spent in these 30 days.', html`The accounts that spend most show here.`) : html`<table><thead><tr><th>Account</th><th class="num">Spent</th><th class="num">Requests</th></tr></thead><tbody>
${(data.topAccounts.data as { accountId: string; email: string | null; measures: { spentCoins: string; requests: number } }[]).map((a) => html`<tr><td><a href="/admin/accounts/${encodeURIComponent(a.accountId)}">${truncate(a.email ?? a.accountId, 40)}</a></td><td class="num">${money(Number(a.measures.spentCoins))}</td><td class="num">${a.measures.requests}</td></tr>`)}
</tbody></table>`}</section>
<section><h2>Newest organizations</h2>
${(data.organizations.edges as unknown[]).length === 0 ? emptyState('No organizations yet.', html`Teams that share a wallet show here once someone makes an organization.`) : html`<table><thead><tr><th>Organization</th><th class="num">Members</th><th class="num">Balance</th><th>Created</th></tr></thead><tbody>
${(data.organizations.edges as { node: { id: string; name: string; memberCount: number; createdAt: string; wallet: { coins: string } } }[]).map(({ node: o }) => html`<tr><td><a href="/admin/organizations/${encodeURIComponent(o.id)}">${truncate(o.name, 40)}</a></td><td class="num">${o.memberCount}</td><td class="num">${money(Number(o.wallet.coins))}</td><td>${when(o.createdAt)}</td></tr>`)}
</tbody></table>`}
<p><a href="/admin/organizations">All organizations</a></p></section>
<section><h2>Revenue per day, last 30 days</h2>${revenueTable(data.revenuePerDay as RevenueDay[])}</section>
<section><h2>Newest payments</h2>${paymentsTable(data.payments as PaymentRow[])}</section>
<section><h2>Newest failed jobs</h2>${jobsTable(jobs, 'No failed jobs. Nothing to look into.')}
<p><a href="/admin/jobs?status=failed">All failed jobs</a></p></section>`));
  }));

  // Revenue, upstream cost and margin over a range (default the last 30 days); core checks the range.
  router.get('/margin', tools.signedIn('/admin/margin', async (req, res, nav) => {
    const to = new Date();
    const param = (name: string, fallback: string) => (typeof req.query[name] === 'string' && req.query[name] !== '' ? req.query[name].slice(0, 20) : fallback);
    const range = { from: param('from', day(new Date(to.getTime() - 29 * 86_400_000))), to: param('to', day(to)) };
    const result = await tools.query<MarginsData>(req, MARGINS, range);
    const failed = result.errors[0];
    if (failed || !result.data) {
      // A range the API refuses (a day that does not exist, from after to): the form again, the message beside the field, 400.
      const message = failed ? messageOfGraphql(failed) : 'The margins could not be read.';
      return tools.send(res, adminPage('Margin', nav, html`${notice('error', message)}${marginForm(range, { [/\bto\b/i.test(message) && !/\bfrom\b/i.test(message) ? 'to' : 'from']: message })}`), failed ? statusOfGraphql(failed) : 500);
    }
    tools.send(res, adminPage('Margin', nav, marginSections(range, result.data)));
  }));

  router.get('/audit', tools.signedIn('/admin/audit', async (req, res, nav) => {
    const after = typeof req.query.after === 'string' ? req.query.after.slice(0, 100) : '';
    const data = await tools.read(req, AUDIT, { after: after || null });
    const rows = (data.auditLog.edges as { node: { id: string; createdAt: string; actorType: string; actorId: string | null; action: string; targetType: string; targetId: string; reason: string | null } }[]).map((e) => e.node);
    const next = data.auditLog.pageInfo.hasNextPage ? (data.auditLog.pageInfo.endCursor as string) : null;
    tools.send(res, adminPage('Audit log', nav, html`${rows.length === 0 ? emptyState('No entries yet.', html`Every operator action (a top-up, a revoked key, a price change) is written here with its reason.`) : html`<table id="audit"><thead><tr><th>When</th><th>Action</th><th>Target</th><th>Reason</th><th>By</th></tr></thead><tbody>
${rows.map((r) => html`<tr><td>${when(r.createdAt)}</td><td>${r.action}</td><td>${r.targetType} ${idCode(r.targetId)}</td><td>${truncate(r.reason ?? '', 80)}</td><td>${r.actorType.replace('_', ' ')}${r.actorId ? html` ${idCode(truncate(r.actorId, 24))}` : ''}</td></tr>`)}
</tbody></table>`}
<nav class="pager" aria-label="Pages of the audit log">${after ? html`<a href="/admin/audit">First page</a>` : ''}${next ? html` <a href="/admin/audit?${new URLSearchParams({ after: next }).toString()}" rel="next">Next page</a>` : ''}</nav>`));
  }));
};
