import type { z } from 'zod';
import type { AutoTopUpView } from '../../../core/payments/auto-top-up.ts';
import type { billingSchema, topUpStatusSchema } from '../../../core/payments/billing.ts';
import { COINS_PER_USD, fieldError, formatTime, html, invalidAttrs, money, moneyText, notice, page, usdText, when, type Html } from '../html.ts';
import { balanceCards } from './account.ts';

export type Billing = z.infer<typeof billingSchema>;
type Nav = { email: string; csrf: string };

/** Where the account pages' payment forms are sent on to: Stripe's payment pages and customer portal (the page's CSP form-action). */
export const PAYMENT_FORM_TARGETS = ['https://checkout.stripe.com', 'https://billing.stripe.com'];

const grouped = (n: number) => n.toLocaleString('en-US');
/** A price in US dollars as the API gives it ("12.34") for people: "$12.34". */
const dollars = (usd: string | null | undefined) => (usd ? usdText(Number(usd) * COINS_PER_USD) : '—');
const PER: Record<string, string> = { day: 'a day', week: 'a week', month: 'a month', year: 'a year' };

/** What a dollar amount as typed buys (cents count), or null when it is not an amount. */
export function coinsFor(amount: string): number | null {
  const match = /^(\d{1,9})(?:\.(\d{1,2}))?$/.exec(amount.trim());
  if (!match) return null;
  return ((Number(match[1]) * 100 + Number((match[2] ?? '').padEnd(2, '0'))) * COINS_PER_USD) / 100;
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
  /** The field core named in `error`, to show the message beside it. */
  param?: string | undefined;
  /** The organization whose wallet the page shows and pays into (/account/billing?organization=ID, its owners only); absent: the person's own. */
  organization?: { id: string; name: string } | undefined;
  /** The auto top-up form as the person filled it, and why it was refused. */
  autoTopUp?: { threshold?: string | undefined; amount?: string | undefined; error?: string | undefined; param?: string | undefined; changed?: string | undefined } | undefined;
}

type Balance = Parameters<typeof balanceCards>[0];

/**
 * The Billing page (/account/billing): the balance, adding credits, auto top-up, the plan and the
 * recent payments; with `?organization=ID`, the same for an organization the person owns.
 */
export function billingPage(nav: Nav, v: { balance: Balance; billing: Billing; pay: BillingFormState; autoTopUp?: AutoTopUpView | undefined }): string {
  const org = v.pay.organization;
  return page({ title: org ? `Billing: ${org.name}` : 'Billing', nav: { ...nav, current: '/account/billing' } }, html`${org ? html`<p class="info">The wallet of the organization <strong>${org.name}</strong>, shared by its members. <a href="/account/billing">Your own billing</a></p>` : ''}${balanceCards(v.balance)}
${billingSections(nav, v.billing, v.pay, v.autoTopUp)}`);
}

/** Billing for an organization the person may not pay for: why, and the way back (403, or 404 for one they cannot see). */
export function billingRefusedPage(nav: Nav, message: string): string {
  return page({ title: 'Billing', nav: { ...nav, current: '/account/billing' } }, html`${notice('error', message)}
<p>Only an organization's owners see and manage its billing. <a href="/account/billing">Your own billing</a></p>`);
}

/** The hidden field that keeps a form on the organization's wallet. */
const organizationField = (s: BillingFormState) => (s.organization ? html`<input type="hidden" name="organization_id" value="${s.organization.id}">` : '');

/** "Add credits", auto top-up, "Plan" and the payments; with payments off, one sentence and no forms. */
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
  const amountError = s.param === 'amount_usd' || s.param === undefined ? s.error : undefined;
  const amount = s.amount ?? defaultAmount(b);
  const coins = coinsFor(amount);
  const sub = b.subscription;
  const plan = sub ? b.plans.find((p) => p.name === sub.plan) : undefined;
  return html`${back}
<h2 id="add-credits">Add credits</h2>
${notice('error', s.error)}
<form method="post" action="/account/credits" class="stack" id="add-credits-form">
  <input type="hidden" name="_csrf" value="${nav.csrf}">${organizationField(s)}
  <input type="hidden" name="idempotency_key" value="${s.idempotencyKey}">
  <label>Amount in US dollars (${dollars(b.topup_min_usd)} to ${dollars(b.topup_max_usd)}) ${fieldError('amount_usd', amountError)}
    <input type="text" name="amount_usd" inputmode="decimal" autocomplete="off" required maxlength="13" pattern="[0-9]{1,9}([.][0-9]{1,2})?" value="${amount}" data-coins-for="coins-preview"${invalidAttrs('amount_usd', amountError)}>
  </label>
  <p>Buys <output id="coins-preview" for="amount_usd" class="fig">${coins === null ? '—' : grouped(coins)}</output> coins. $1 = ${grouped(COINS_PER_USD)} coins; cents count (1 cent = ${grouped(COINS_PER_USD / 100)} coins).</p>
  <button type="submit">Pay with Stripe</button>
</form>
<p>You pay on Stripe's page. The coins are added when Stripe confirms the payment, usually within seconds.</p>
${auto ? autoTopUpSection(nav, b, s, auto) : ''}
<h2 id="plan">Plan</h2>
${sub && sub.status === 'active'
  ? html`<dl class="facts">
  <dt>Plan</dt><dd>${sub.plan ?? 'a plan'}</dd>
  <dt>Status</dt><dd>${sub.status}</dd>
  ${plan ? html`<dt>Price</dt><dd>${planTerms(plan)}</dd>` : ''}
  <dt>Next renewal</dt><dd>${when(sub.current_period_end)}</dd>
</dl>`
  : b.plans.length === 0
    ? html`<p>This server offers no plans.</p>`
    : html`${sub ? html`<p>Your plan ${sub.plan ?? ''} ended on ${when(sub.ended_at)}.</p>` : ''}
<ul class="plans">${b.plans.map(
        (p) => html`<li><form method="post" action="/account/subscribe">
  <input type="hidden" name="_csrf" value="${nav.csrf}">${organizationField(s)}
  <input type="hidden" name="idempotency_key" value="${s.idempotencyKey}">
  <input type="hidden" name="plan" value="${p.name}">
  <span><strong>${p.name}</strong>: ${planTerms(p)}</span>
  <button type="submit" aria-label="Subscribe to ${p.name}">Subscribe</button>
</form></li>`,
      )}</ul>`}
${b.can_manage_billing
  ? html`<form method="post" action="/account/billing/portal">
  <input type="hidden" name="_csrf" value="${nav.csrf}">${organizationField(s)}
  <button type="submit">Manage billing</button> <span>Change the card, see invoices, or cancel the plan, on Stripe.</span>
</form>`
  : ''}
${b.payments.length > 0
  ? html`<h2>Recent payments</h2>
<ul class="payments">${b.payments.map(
      (p) => html`<li>${when(p.created_at)}: <span class="fig">${dollars(p.amount_usd)}</span> for ${money(p.coins)}${p.receipt_url ? html` · <a href="${p.receipt_url}" rel="noopener noreferrer">Receipt</a>` : ''}</li>`,
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
  const turnedOff = !a.enabled && a.disabled_reason ? notice('error', `Auto top-up was turned off on ${a.disabled_at ? formatTime(a.disabled_at) : 'an earlier day'}: ${a.disabled_reason}`) : '';
  const thresholdError = f.param === 'threshold_coins' ? f.error : undefined;
  const autoAmountError = f.param === 'amount_usd' ? f.error : undefined;
  return html`<h2 id="auto-top-up">Auto top-up</h2>
${changed}${turnedOff}${notice('error', f.error)}
<p>${a.enabled
    ? html`<strong>On.</strong> When your purchased coins fall under ${money(a.threshold_coins ?? 0)}, your saved card is charged <span class="fig">${dollars(a.amount_usd)}</span> (${moneyText(coinsFor(a.amount_usd ?? '') ?? 0)}), at most ${a.max_per_day} times in 24 hours (${a.charges_last_24h} so far).`
    : html`<strong>Off.</strong> Turn it on to have your card charged when your purchased coins run low, at most ${a.max_per_day} times in 24 hours.${a.card_saved ? '' : ' The first time, you pay the amount once on Stripe’s page, which saves the card.'}`}</p>
<form method="post" action="/account/auto-top-up" class="stack" id="auto-top-up-form">
  <input type="hidden" name="_csrf" value="${nav.csrf}">${organizationField(s)}
  <input type="hidden" name="idempotency_key" value="${s.idempotencyKey}">
  <input type="hidden" name="enabled" value="on">
  <label>When purchased coins fall under ${fieldError('threshold_coins', thresholdError)}
    <input type="text" name="threshold_coins" inputmode="numeric" autocomplete="off" required maxlength="9" pattern="[0-9]{1,9}" value="${threshold}"${invalidAttrs('threshold_coins', thresholdError)}>
  </label>
  <label>add, in US dollars (${dollars(b.topup_min_usd)} to ${dollars(b.topup_max_usd)}) ${fieldError('auto_amount_usd', autoAmountError)}
    <input type="text" name="amount_usd" inputmode="decimal" autocomplete="off" required maxlength="13" pattern="[0-9]{1,9}([.][0-9]{1,2})?" value="${amount}"${invalidAttrs('auto_amount_usd', autoAmountError)}>
  </label>
  <button type="submit">${a.enabled ? 'Save' : a.card_saved ? 'Turn on' : 'Turn on: pay once with Stripe'}</button>
</form>
${a.enabled
    ? html`<form method="post" action="/account/auto-top-up">
  <input type="hidden" name="_csrf" value="${nav.csrf}">${organizationField(s)}
  <input type="hidden" name="enabled" value="off">
  <button type="submit">Turn auto top-up off</button>
</form>`
    : ''}`;
}

/** The success page: "crediting…" and a refresh every 2 seconds until the webhook's credit lands, then the coins. */
export function topUpSuccessPage(nav: Nav, status: z.infer<typeof topUpStatusSchema>, organizationId?: string): string {
  const org = organizationId ? `&organization=${encodeURIComponent(organizationId)}` : '';
  if (!status.credited) {
    return page(
      { title: 'Payment received', nav: { ...nav, current: '/account/billing' }, pollSeconds: 2 },
      html`<p class="info" role="status">Payment received, crediting… This page updates by itself when Stripe confirms the payment, usually within seconds.</p>
<p class="links"><a href="/account/credits/success?session_id=${status.session_id}${org}">Refresh now</a> <a href="/account/billing${org ? `?${org.slice(1)}` : ''}">Back to billing</a></p>`,
    );
  }
  return page(
    { title: 'Coins added', nav: { ...nav, current: '/account/billing' } },
    organizationId
      ? html`<p class="info" role="status">${grouped(status.coins ?? 0)} coins were added to the organization's wallet for ${dollars(status.amount_usd)}.</p>
<p class="links"><a href="/account/billing?${org.slice(1)}">Back to its billing</a></p>`
      : html`<p class="info" role="status">${grouped(status.coins ?? 0)} coins were added to your account for ${dollars(status.amount_usd)}.</p>
<p class="links"><a href="/account">See your balance</a> <a href="/account/usage">History</a></p>`,
  );
}

/** A plan's terms: "$10.00 a month for 10,000 coins a month", with what the operator stated. */
function planTerms(p: Billing['plans'][number]): Html {
  const per = p.period ? PER[p.period] : 'each period';
  return html`${p.price_usd ? html`<span class="plan-price fig">${dollars(p.price_usd)} ${per}</span> for ` : ''}<span class="fig">${grouped(p.coins_per_period)} coins</span> ${per}${p.price_usd ? '' : ' (the price shows on Stripe’s page)'}`;
}
