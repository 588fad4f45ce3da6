import type { UsageView } from '../../../core/accounts/usage.ts';
import type { GenerationView } from '../../../core/generations/views.ts';
import type { WalletEntryWithReceipt } from '../../../core/payments/receipts.ts';
import { coinsText, moneyCard, emptyState, exactCoinsText, fieldError, html, invalidAttrs, money, notice, onDay, page, when, type Html } from '../html.ts';
import { modelHref } from './public.ts';

/**
 * The account's Usage page (/account/usage): what was spent per day (a bar chart drawn on the
 * server as SVG, scaled to its container), per model and per key, with chat tokens, over a range
 * of days; the wallet history in words (core's `details`); recent jobs. One job's page
 * (/account/generations/<id>) is where the history's job links go.
 */
type Nav = { email: string; csrf: string };

const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];
/** "27 Nov" for a YYYY-MM-DD day. */
const shortDay = (day: string) => `${Number(day.slice(8, 10))} ${MONTHS[Number(day.slice(5, 7)) - 1]}`;
const num = (n: number) => n.toLocaleString('en-US', { maximumFractionDigits: 6 });

/** Spend per day as bars. The viewBox has a fixed width and `width="100%"`: it scales to any screen. */
export function spendPerDayChart(days: UsageView['days']): Html {
  const W = 600;
  const H = 160;
  const top = 10;
  const bottom = 24;
  const max = Math.max(...days.map((d) => d.spent_coins), 0);
  const step = W / Math.max(days.length, 1);
  const gap = step > 4 ? Math.min(2, step / 4) : 0;
  const label = `Coins spent per day (UTC), ${days[0]?.day ?? ''} to ${days.at(-1)?.day ?? ''}; most in a day: ${coinsText(max)}`;
  return html`<svg class="chart" role="img" aria-label="${label}" viewBox="0 0 ${W} ${H}" width="100%" preserveAspectRatio="xMidYMid meet">
${days.map((d, i) => {
  const bh = max > 0 ? ((H - top - bottom) * d.spent_coins) / max : 0;
  return html`<rect x="${(i * step + gap / 2).toFixed(2)}" y="${(H - bottom - bh).toFixed(2)}" width="${Math.max(step - gap, 0.5).toFixed(2)}" height="${bh.toFixed(2)}" fill="#3b6ea5"><title>${d.day} (UTC): ${coinsText(d.spent_coins)} coins, ${d.requests} requests</title></rect>`;
})}
<line x1="0" y1="${H - bottom}" x2="${W}" y2="${H - bottom}" stroke="#b9c0cc" stroke-width="1"></line>
<text x="0" y="${H - 6}" font-size="14" fill="#5a6475">${days[0] ? shortDay(days[0].day) : ''}</text>
<text x="${W}" y="${H - 6}" font-size="14" fill="#5a6475" text-anchor="end">${days.at(-1) ? shortDay(days.at(-1)!.day) : ''}</text>
<text x="${W}" y="${top + 4}" font-size="14" fill="#5a6475" text-anchor="end">${max > 0 ? `${coinsText(max)} coins` : 'nothing spent'}</text>
</svg>`;
}

const csvHref = (range: { from: string; to: string }, extra: Record<string, string> = {}) => `/account/usage.csv?${new URLSearchParams({ from: range.from, to: range.to, ...extra }).toString()}`;
const jobHref = (id: string) => `/account/generations/${encodeURIComponent(id)}`;

/** A history row's words, its job id a link to the job's page and a top-up's receipt a link. */
function whatCell(e: WalletEntryWithReceipt): Html {
  const gen = e.generation_id;
  const text = e.details || e.description;
  const words = gen && text.includes(gen)
    ? html`${text.slice(0, text.indexOf(gen))}<a href="${jobHref(gen)}">${gen}</a>${text.slice(text.indexOf(gen) + gen.length)}`
    : html`${text}`;
  return html`${words}${e.receipt_url ? html` · <a href="${e.receipt_url}" rel="noopener noreferrer">Receipt</a>` : ''}`;
}

export interface UsagePageData {
  usage?: UsageView | undefined;
  /** The range as typed, when core refused it (shown back with the message). */
  range: { from: string; to: string };
  error?: string | undefined;
  /** The field core named in \`error\`. */
  errorParam?: string | undefined;
  history: { data: WalletEntryWithReceipt[]; has_more: boolean };
  cursor?: string | undefined;
  generations: GenerationView[];
}

/**
 * The range of days a usage page shows, as a GET form. Core names \`from\` for a range it refuses
 * (a bad day, from after to, too long), \`to\` for a bad end day: the message goes beside that field.
 */
export function rangeForm(action: string, range: { from: string; to: string }, v: { error?: string | undefined; errorParam?: string | undefined }): Html {
  const fromError = v.error && v.errorParam !== 'to' ? v.error : undefined;
  const toError = v.error && v.errorParam === 'to' ? v.error : undefined;
  return html`<form method="get" action="${action}" class="range">
  <label>From (UTC) ${fieldError('from', fromError)}<input type="date" name="from" value="${range.from}" required${invalidAttrs('from', fromError)}></label>
  <label>To (UTC) ${fieldError('to', toError)}<input type="date" name="to" value="${range.to}" required${invalidAttrs('to', toError)}></label>
  <button type="submit">Show</button>
</form>`;
}

export function usagePage(nav: Nav, v: UsagePageData) {
  const u = v.usage;
  const range = u ? { from: u.from, to: u.to } : v.range;
  const next = v.history.has_more ? v.history.data.at(-1)?.id : undefined;
  const keep = new URLSearchParams({ from: range.from, to: range.to });
  return page(
    { title: 'Usage', nav: { ...nav, current: '/account/usage' } },
    html`${rangeForm('/account/usage', range, v)}
${notice('error', v.error)}
${u
  ? html`<div class="cards">
  <div class="card">Spent <strong>${moneyCard(u.totals.spent_coins)}</strong></div>
  <div class="card">Requests <strong>${num(u.totals.requests)}</strong></div>
  <div class="card">Input tokens <strong>${num(u.totals.input_tokens)}</strong></div>
  <div class="card">Output tokens <strong>${num(u.totals.output_tokens)}</strong></div>
</div>
<h2>Spend per day (UTC)</h2>
${spendPerDayChart(u.days)}
<p class="hint">From ${onDay(u.from)} to ${onDay(u.to)}, days in UTC. Chat counts when it is answered; a media job on the day it was submitted, with what it was charged (nothing when it failed).</p>
<h2>Per model</h2>
${u.models.length === 0
  ? emptyState('No requests in these days.', html`Pick other days above, or <a href="/account/keys">create a key</a> and make a first request (<a href="/docs">the docs</a> show how).`)
  : html`<table>
  <thead><tr><th>Model</th><th class="num">Requests</th><th class="num">Spent</th><th class="num">Tokens in / out</th><th>CSV</th></tr></thead>
  <tbody>${u.models.map(
    (m) => html`<tr><td><a href="${modelHref(m.model)}">${m.model}</a></td><td class="num">${num(m.requests)}</td><td class="num">${money(m.spent_coins)}</td><td class="num">${m.kind === 'chat' ? `${num(m.input_tokens)} / ${num(m.output_tokens)}` : '—'}</td><td><a href="${csvHref(range, { model: m.model })}" aria-label="History of ${m.model} as CSV">CSV</a></td></tr>`,
  )}</tbody>
</table>`}
<h2>Per key</h2>
${u.keys.length === 0
  ? emptyState('No requests in these days.', html`Requests made with your keys are counted here per key. <a href="/account/keys">Your keys</a>`)
  : html`<table>
  <thead><tr><th>Key</th><th class="num">Requests</th><th class="num">Spent</th><th class="num">Tokens in / out</th><th>CSV</th></tr></thead>
  <tbody>${u.keys.map(
    (k) => html`<tr><td>${k.name || k.key_id} <code>${k.prefix}…</code>${k.revoked ? ' (revoked)' : ''}</td><td class="num">${num(k.requests)}</td><td class="num">${money(k.spent_coins)}</td><td class="num">${num(k.input_tokens)} / ${num(k.output_tokens)}</td><td><a href="${csvHref(range, { key: k.key_id })}" aria-label="History of key ${k.name || k.key_id} as CSV">CSV</a></td></tr>`,
  )}</tbody>
</table>`}`
  : ''}
<h2>Wallet history</h2>
<p class="links"><a href="${csvHref(range)}" download>Download the history of these days as CSV</a> <a href="/account/usage.csv" download>All of it as CSV</a></p>
${v.history.data.length === 0
  ? emptyState('Nothing in your wallet’s history yet.', html`It fills as coins come in and requests spend them: <a href="/account/billing#add-credits">add credits</a> or <a href="/account/keys">create a key</a>.`)
  : html`<p class="hint">Amounts are rounded to the cent; each row’s exact amount, to the millionth of a coin, is under “Exact”.</p>
<table class="history">
  <thead><tr><th>When</th><th>What</th><th class="num">Amount</th><th class="num">Balance after</th></tr></thead>
  <tbody>${v.history.data.map(
        (e) => html`<tr id="${e.id}"><td>${when(e.created_at)}</td><td>${whatCell(e)}</td><td class="num">${money(e.amount_coins, { signed: true })}<details class="exact"><summary>Exact</summary>${e.amount_coins > 0 ? '+' : ''}${exactCoinsText(e.amount_coins)}, balance after ${exactCoinsText(e.balance_after_coins)}</details></td><td class="num">${money(e.balance_after_coins)}</td></tr>`,
      )}</tbody>
</table>`}
<nav class="pager" aria-label="Pages of the history">${v.cursor ? html`<a href="/account/usage?${keep.toString()}">Newest</a> ` : ''}${next ? html`<a href="/account/usage?${new URLSearchParams({ from: range.from, to: range.to, starting_after: next }).toString()}">Older</a>` : ''}</nav>
<h2>Recent generations</h2>
${v.generations.length === 0
  ? emptyState('No media jobs yet.', html`Images, video, audio and 3D models you generate through the API appear here. <a href="/models">See the models</a>`)
  : html`<table>
  <thead><tr><th>Job</th><th>Model</th><th>Status</th><th class="num">Cost</th><th>Result</th></tr></thead>
  <tbody>${v.generations.map(
        (g) => html`<tr id="${g.id}"><td class="id"><a href="${jobHref(g.id)}">${g.id}</a></td><td>${g.model}</td><td>${g.status}</td><td class="num">${money(g.cost_coins ?? g.price_coins)}</td>
  <td>${g.output ? html`<a href="${g.output.url}" aria-label="${g.output.mime_type} result of ${g.id}">${g.output.mime_type}</a>` : g.error ? g.error.message.slice(0, 80) : '—'}</td></tr>`,
      )}</tbody>
</table>`}`,
  );
}

/** One job of the account: where the history's job links go. */
export function generationPage(nav: Nav, g: GenerationView) {
  return page(
    { title: `Job ${g.id}`, nav: { ...nav, current: '/account/usage' } },
    html`<p class="links"><a href="/account/usage">Back to Usage</a></p>
<dl class="facts">
  <dt>Model</dt><dd><a href="${modelHref(g.model)}">${g.model}</a></dd>
  <dt>Status</dt><dd>${g.status}</dd>
  <dt>Price</dt><dd>${money(g.price_coins)}</dd>
  <dt>Charged</dt><dd>${g.cost_coins === null || g.cost_coins === undefined ? (g.status === 'failed' || g.status === 'canceled' ? html`${money(0)} (refunded)` : 'not yet') : money(g.cost_coins)}</dd>
  <dt>Submitted</dt><dd>${when(g.created_at)}</dd>
  ${g.completed_at ? html`<dt>Ended</dt><dd>${when(g.completed_at)}</dd>` : ''}
  ${g.output ? html`<dt>Result</dt><dd><a href="${g.output.url}">${g.output.mime_type}</a></dd>` : ''}
  ${g.error ? html`<dt>Error</dt><dd>${g.error.message}</dd>` : ''}
</dl>`,
  );
}
