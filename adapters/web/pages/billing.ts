import type { z } from 'zod';
import type { AutoTopUpView } from '../../../core/payments/auto-top-up.ts';
import type { billingSchema, topUpStatusSchema } from '../../../core/payments/billing.ts';
import { html, notice, page, type Html } from '../html.ts';

export type Billing = z.infer<typeof billingSchema>;
type Nav = { email: string; csrf: string };

/** Where the account pages' payment forms are sent on to: Stripe's payment pages and customer portal (the page's CSP form-action). */
export const PAYMENT_FORM_TARGETS = ['https://checkout.stripe.com', 'https://billing.stripe.com'];

const date = (iso: string | null) => (iso ? iso.slice(0, 10) : '—');
const grouped = (n: number) => n.toLocaleString('en-US');

/** What a dollar amount as typed buys, 1 USD = 1000 coins (cents count), or null when it is not an amount. */
export function coinsFor(amount: string): number | null {
  const match = /^(\d{1,9})(?:\.(\d{1,2}))?$/.exec(amount.trim());
  if (!match) return null;
  return (Number(match[1]) * 100 + Number((match[2] ?? '').padEnd(2, '0'))) * 10;
}

/** A value for a fresh form: 20 USD when the bounds allow it, else the minimum. */
function defaultAmount(b: Billing): string {
  const min = Number(b.topup_min_usd);
  const max = Number(b.topup_max_usd);
  return 20 >= min && 20 <= max ? '20' : b.topup_min_usd;
}

export interface BillingFormState {
  /** The amount as the person typed it (after a refusal). */
  amount?: string | undefined;
  /** A fresh random key per rendering of the form: a resubmitted form makes the same Checkout Session. */
  idempotencyKey: string;
  error?: string | undefined;
  /** ?checkout=… when the person comes back from Stripe. */
  returned?: string | undefined;
  /** The auto top-up form as the person filled it, and why it was refused. */
  autoTopUp?: { threshold?: string | undefined; amount?: string | undefined; error?: string | undefined; changed?: string | undefined } | undefined;
}

/** "Add credits" and "Plan" on the overview; with payments off, one sentence and no forms. */
export function billingSections(nav: Nav, b: Billing, s: BillingFormState, auto?: AutoTopUpView): Html {
  const back =
    s.returned === 'canceled'
      ? notice('info', 'The payment was canceled: nothing was charged.')
      : s.returned === 'subscribed'
        ? notice('info', 'Thank you. The plan’s coins are added as soon as Stripe confirms the first payment, usually within a minute.')
        : '';
  if (!b.payments_enabled) {
    return html`<h2>Add credits</h2>
<p class="info">Payments are not set up on this server. Coins are added by its operator: contact them with your account's email.</p>`;
  }
  const amount = s.amount ?? defaultAmount(b);
  const coins = coinsFor(amount);
  const sub = b.subscription;
  return html`${back}
<h2 id="add-credits">Add credits</h2>
${notice('error', s.error)}
<form method="post" action="/account/credits" class="stack" id="add-credits-form">
  <input type="hidden" name="_csrf" value="${nav.csrf}">
  <input type="hidden" name="idempotency_key" value="${s.idempotencyKey}">
  <label>Amount in US dollars (${b.topup_min_usd} to ${b.topup_max_usd})
    <input type="text" name="amount_usd" inputmode="decimal" autocomplete="off" required maxlength="13" pattern="[0-9]{1,9}([.][0-9]{1,2})?" value="${amount}" data-coins-for="coins-preview">
  </label>
  <p>Buys <output id="coins-preview" for="amount_usd">${coins === null ? '—' : grouped(coins)}</output> coins. 1 USD = 1000 coins; cents count (1 cent = 10 coins).</p>
  <button type="submit">Pay with Stripe</button>
</form>
<p>You pay on Stripe's page. The coins are added when Stripe confirms the payment, usually within seconds.</p>
${auto ? autoTopUpSection(nav, b, s, auto) : ''}
<h2 id="plan">Plan</h2>
${sub && sub.status === 'active'
  ? html`<dl class="facts">
  <dt>Plan</dt><dd>${sub.plan ?? 'a plan'}</dd>
  <dt>Status</dt><dd>${sub.status}</dd>
  <dt>Next renewal</dt><dd>${date(sub.current_period_end)}</dd>
</dl>`
  : b.plans.length === 0
    ? html`<p>This server offers no plans.</p>`
    : html`${sub ? html`<p>Your plan ${sub.plan ?? ''} ended on ${date(sub.ended_at)}.</p>` : ''}
<ul class="plans">${b.plans.map(
        (p) => html`<li><form method="post" action="/account/subscribe">
  <input type="hidden" name="_csrf" value="${nav.csrf}">
  <input type="hidden" name="idempotency_key" value="${s.idempotencyKey}">
  <input type="hidden" name="plan" value="${p.name}">
  <span><strong>${p.name}</strong>: ${grouped(p.coins_per_period)} coins each period</span>
  <button type="submit" aria-label="Subscribe to ${p.name}">Subscribe</button>
</form></li>`,
      )}</ul>`}
${b.can_manage_billing
  ? html`<form method="post" action="/account/billing/portal">
  <input type="hidden" name="_csrf" value="${nav.csrf}">
  <button type="submit">Manage billing</button> <span>Change the card, see invoices, or cancel the plan, on Stripe.</span>
</form>`
  : ''}
${b.payments.length > 0
  ? html`<h2>Recent payments</h2>
<ul class="payments">${b.payments.map(
      (p) => html`<li>${date(p.created_at)}: ${p.amount_usd} USD, ${grouped(p.coins)} coins${p.receipt_url ? html` · <a href="${p.receipt_url}" rel="noopener noreferrer">Receipt</a>` : ''}</li>`,
    )}</ul>`
  : ''}
<script src="/assets/credits.js"></script>`;
}

/**
 * Auto top-up (docs/payments.md): on, its rule and a form to change or stop it; off, a form to
 * turn it on, which goes through Stripe once to save the card when none is saved; turned off
 * by a decline, the reason.
 */
function autoTopUpSection(nav: Nav, b: Billing, s: BillingFormState, a: AutoTopUpView): Html {
  if (!a.available) return html`<h2 id="auto-top-up">Auto top-up</h2>
<p>Auto top-up is not offered on this server.</p>`;
  const f = s.autoTopUp ?? {};
  const threshold = f.threshold ?? (a.threshold_coins !== null ? String(a.threshold_coins) : '1000');
  const amount = f.amount ?? a.amount_usd ?? defaultAmount(b);
  const changed = f.changed === 'on' ? notice('info', 'Auto top-up is on.') : f.changed === 'off' ? notice('info', 'Auto top-up is off.') : '';
  const turnedOff = !a.enabled && a.disabled_reason ? notice('error', `Auto top-up was turned off on ${date(a.disabled_at)}: ${a.disabled_reason}`) : '';
  return html`<h2 id="auto-top-up">Auto top-up</h2>
${changed}${turnedOff}${notice('error', f.error)}
<p>${a.enabled
    ? html`<strong>On.</strong> When your purchased coins fall under ${grouped(a.threshold_coins ?? 0)}, your saved card is charged ${a.amount_usd} USD (${grouped(coinsFor(a.amount_usd ?? '') ?? 0)} coins), at most ${a.max_per_day} times in 24 hours (${a.charges_last_24h} so far).`
    : html`<strong>Off.</strong> Turn it on to have your card charged when your purchased coins run low, at most ${a.max_per_day} times in 24 hours.${a.card_saved ? '' : ' The first time, you pay the amount once on Stripe’s page, which saves the card.'}`}</p>
<form method="post" action="/account/auto-top-up" class="stack" id="auto-top-up-form">
  <input type="hidden" name="_csrf" value="${nav.csrf}">
  <input type="hidden" name="idempotency_key" value="${s.idempotencyKey}">
  <input type="hidden" name="enabled" value="on">
  <label>When purchased coins fall under
    <input type="text" name="threshold_coins" inputmode="numeric" autocomplete="off" required maxlength="9" pattern="[0-9]{1,9}" value="${threshold}">
  </label>
  <label>add, in US dollars (${b.topup_min_usd} to ${b.topup_max_usd})
    <input type="text" name="amount_usd" inputmode="decimal" autocomplete="off" required maxlength="13" pattern="[0-9]{1,9}([.][0-9]{1,2})?" value="${amount}">
  </label>
  <button type="submit">${a.enabled ? 'Save' : a.card_saved ? 'Turn on' : 'Turn on: pay once with Stripe'}</button>
</form>
${a.enabled
    ? html`<form method="post" action="/account/auto-top-up">
  <input type="hidden" name="_csrf" value="${nav.csrf}">
  <input type="hidden" name="enabled" value="off">
  <button type="submit">Turn auto top-up off</button>
</form>`
    : ''}`;
}

/** The success page: "crediting…" and a refresh every 2 seconds until the webhook's credit lands, then the coins. */
export function topUpSuccessPage(nav: Nav, status: z.infer<typeof topUpStatusSchema>): string {
  if (!status.credited) {
    return page(
      { title: 'Payment received', nav: { ...nav, current: '/account' }, pollSeconds: 2 },
      html`<p class="info" role="status">Payment received, crediting… This page updates by itself when Stripe confirms the payment, usually within seconds.</p>
<p><a href="/account/credits/success?session_id=${status.session_id}">Refresh now</a> · <a href="/account">Back to your account</a></p>`,
    );
  }
  return page(
    { title: 'Coins added', nav: { ...nav, current: '/account' } },
    html`<p class="info" role="status">${grouped(status.coins ?? 0)} coins were added to your account for ${status.amount_usd} USD.</p>
<p><a href="/account">See your balance</a> · <a href="/account/usage">History</a></p>`,
  );
}
