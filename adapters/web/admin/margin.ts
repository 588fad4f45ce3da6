import { COINS_PER_USD, emptyState, fieldError, html, invalidAttrs, type Html } from '../html.ts';
import { onDay, readableDay, when } from './shared.ts';

/**
 * The Margin page's query and tables (docs/admin.md, "Margin"): revenue, upstream cost and
 * margin per day and per model and route over a range, from the admin API's `margins` query.
 * Amounts are printed as the API gives them (Coins: exact decimals, at most 6 decimals).
 */
export const MARGINS = `query Margins($from: String!, $to: String!) {
  perDay: margins(from: $from, to: $to, groupBy: [day]) { totals { ...M } data { day measures { ...M } } asOf }
  perRoute: margins(from: $from, to: $to, groupBy: [model, route]) { data { modelId provider routeModel measures { ...M } } }
}
fragment M on MarginMeasures { requests revenueCoins costedRequests costedRevenueCoins upstreamCostCoins marginCoins marginPercent costKnownPercent }`;

export interface MarginMeasures {
  requests: number;
  revenueCoins: number;
  costedRequests: number;
  costedRevenueCoins: number;
  upstreamCostCoins: number;
  marginCoins: number;
  marginPercent: string | null;
  costKnownPercent: string | null;
}
export interface MarginsData {
  perDay: { totals: MarginMeasures; data: { day: string; measures: MarginMeasures }[]; asOf: string | null };
  perRoute: { data: { modelId: string; provider: string; routeModel: string; measures: MarginMeasures }[] };
}

const HEAD = html`<th>Requests</th><th>Revenue</th><th>Cost known for</th><th>Upstream cost</th><th>Margin</th><th>Margin %</th>`;

/** The measures of one row: the margin only over the costed requests, and how many those are. */
const cells = (m: MarginMeasures) =>
  html`<td>${m.requests}</td><td>${m.revenueCoins}</td><td>${m.costedRequests} (${m.costKnownPercent ?? '—'}%)</td><td>${m.costedRequests > 0 ? m.upstreamCostCoins : '—'}</td><td>${m.costedRequests > 0 ? m.marginCoins : '—'}</td><td>${m.marginPercent === null ? '—' : `${m.marginPercent}%`}</td>`;

const route = (provider: string, model: string) => (provider === '' ? html`<em>the model provider of the time (before routes were recorded)</em>` : html`${provider}/${model}`);

/** The range form; an error the API gave is shown beside the field it is about. */
export function marginForm(range: { from: string; to: string }, errors: { from?: string; to?: string } = {}): Html {
  return html`
<form method="get" action="/admin/margin" class="inline" novalidate>
  <label>From (UTC) ${fieldError('from', errors.from)}<input type="${errors.from ? 'text' : 'date'}" name="from" value="${range.from}" required placeholder="2026-11-27"${invalidAttrs('from', errors.from)}></label>
  <label>To (UTC) ${fieldError('to', errors.to)}<input type="${errors.to ? 'text' : 'date'}" name="to" value="${range.to}" required placeholder="2026-11-27"${invalidAttrs('to', errors.to)}></label>
  <button type="submit">Show</button>
</form>`;
}

export function marginSections(range: { from: string; to: string }, data: MarginsData): Html {
  const t = data.perDay.totals;
  return html`${marginForm(range)}
<section><h2>Totals, ${readableDay(range.from)} to ${readableDay(range.to)}</h2>
<p id="margin-totals">Revenue ${t.revenueCoins} coins over ${t.requests} requests. Upstream cost is known for ${t.costedRequests} of them (${t.costKnownPercent ?? '—'}%):
they were charged ${t.costedRevenueCoins} coins and cost ${t.upstreamCostCoins} upstream, a margin of ${t.marginCoins} coins (${t.marginPercent === null ? '—' : `${t.marginPercent}%`}).</p>
<p>Amounts in coins, exact (1 USD = ${COINS_PER_USD.toLocaleString('en-US')} coins); days in UTC. The margin counts only the requests whose upstream cost is known; the rollups are as of ${when(data.perDay.asOf, 'never (no refresh yet)')}.</p></section>
<section><h2>Per day</h2>
${data.perDay.data.length === 0 ? emptyState('Nothing served in this range.', html`Choose a wider range above; today's requests count once the rollups are next refreshed.`) : html`<table id="margin-days"><thead><tr><th>Day</th>${HEAD}</tr></thead><tbody>
${data.perDay.data.map((d) => html`<tr><td>${onDay(d.day)}</td>${cells(d.measures)}</tr>`)}
</tbody></table>`}</section>
<section><h2>Per model and route</h2>
${data.perRoute.data.length === 0 ? emptyState('Nothing served in this range.', html`Requests appear here per model and route once customers call them.`) : html`<table id="margin-routes"><thead><tr><th>Model</th><th>Route</th>${HEAD}</tr></thead><tbody>
${data.perRoute.data.map((r) => html`<tr><td>${r.modelId}</td><td>${route(r.provider, r.routeModel)}</td>${cells(r.measures)}</tr>`)}
</tbody></table>`}</section>`;
}
