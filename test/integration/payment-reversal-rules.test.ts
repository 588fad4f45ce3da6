import { randomBytes } from 'node:crypto';
import type { MikroORM } from '@mikro-orm/postgresql';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CoreDeps } from '../../core/context.ts';
import { handlePaymentEvent } from '../../core/payments/receive-webhook.ts';
import type { PaymentEvent } from '../../core/ports.ts';
import { makeAccount, openTestOrm, testDeps, walletInvariants } from '../support/db.ts';

/**
 * The rules of refunds and disputes of one payment (docs/payments.md, "Refunds and disputes"),
 * through the code the webhook and the reconciliation run once an event is verified
 * (handlePaymentEvent), with events as the Stripe adapter reads them, on the real database:
 * - whatever the order of refunds, disputes, inquiries and their outcomes, the coins taken back
 *   from one payment never exceed what it credited: they are min(credited, refunded + what the
 *   disputes hold withdrawn), and a won dispute gives back only what it held;
 * - a refund or dispute that arrives before its payment is credited is kept, and taken back when
 *   the payment is credited, by whichever path credits it;
 * - a dispute's events may come in any order: one created after it was won takes nothing.
 * Every expectation is computed here from cents: 1 cent = 10 coins = 10,000,000 micro-coins.
 * These tests are among the SQL mutation tests of scripts/sql-mutation.ts (mutants `settle-*`,
 * `record-*`, `refunded-*`).
 */
const MICRO_PER_CENT = 10_000_000n;

let orm: MikroORM;
let deps: CoreDeps;
beforeAll(async () => {
  orm = await openTestOrm();
  deps = testDeps(orm);
});
afterAll(() => orm?.close());

const unique = (prefix: string) => `${prefix}_test_${randomBytes(8).toString('hex')}`;

interface Payment {
  account: string;
  session: string;
  pi: string;
  charge: string;
  cents: number;
}

async function newPayment(cents: number): Promise<Payment> {
  const account = (await makeAccount(orm)).id;
  return { account, session: unique('cs'), pi: unique('pi'), charge: unique('ch'), cents };
}

async function handle(event: PaymentEvent): Promise<string> {
  return (await handlePaymentEvent(deps, orm.em.fork(), event)).outcome;
}

const base = (providerType: string) => ({ eventId: unique('evt'), providerType, createdAt: new Date() });

/** The payment credited: its webhook (checkout.session.completed), the reconciliation's event, or an auto top-up's payment_intent.succeeded. */
function credit(p: Payment, via: 'webhook' | 'reconcile' | 'auto_top_up' = 'webhook'): Promise<string> {
  if (via === 'auto_top_up') {
    return handle({
      ...base('payment_intent.succeeded'),
      kind: 'payment_intent',
      stage: 'succeeded',
      intent: { id: p.pi, purpose: 'auto_topup', accountId: p.account, chargeId: null, amountReceivedCents: p.cents, currency: 'usd', customerId: 'cus_test_rules', failure: null },
    });
  }
  const session = { id: p.session, mode: 'payment' as const, accountId: p.account, purpose: 'topup', paymentStatus: 'paid', amountTotalCents: p.cents, currency: 'usd', customerId: 'cus_test_rules', paymentIntentId: p.pi };
  return via === 'webhook'
    ? handle({ ...base('checkout.session.completed'), kind: 'checkout_session', stage: 'completed', session })
    : handle({ eventId: `reconcile:${p.session}`, providerType: 'reconcile:checkout.session', createdAt: new Date(), kind: 'checkout_session', stage: 'completed', session });
}

/** charge.refunded, with Stripe's cumulative amount_refunded. */
const refund = (p: Payment, amountRefunded: number) =>
  handle({ ...base('charge.refunded'), kind: 'refund', charge: { id: p.charge, paymentIntentId: p.pi, amountCents: p.cents, amountRefundedCents: amountRefunded, currency: 'usd' } });

type Stage = 'created' | 'updated' | 'funds_withdrawn' | 'funds_reinstated' | 'closed';
/** A charge.dispute.* event; `balance`: the amounts of its balance_transactions, when the event carries them. */
const dispute = (p: Payment, stage: Stage, d: { id: string; cents: number; status: string; balance?: number[] }) =>
  handle({
    ...base(`charge.dispute.${stage}`),
    kind: 'dispute',
    stage,
    dispute: { id: d.id, chargeId: p.charge, paymentIntentId: p.pi, amountCents: d.cents, currency: 'usd', status: d.status, balanceAmounts: d.balance ?? null },
  });

/** A refund object's event (refund.created, refund.updated, refund.failed). */
const refundObject = (p: Payment, r: { id: string; cents: number; status: string }, type = 'refund.updated') =>
  handle({ ...base(type), kind: 'refund_object', refund: { id: r.id, chargeId: p.charge, paymentIntentId: p.pi, amountCents: r.cents, currency: 'usd', status: r.status } });

/**
 * The payment's coins taken back are `cents` (net), in the wallet, in the ledger and in the
 * payment's reversals; the ledger and the wallet agree.
 */
async function expectTakenBack(p: Payment, cents: number, credited = true) {
  const state = await walletInvariants(orm, p.account);
  const purchased = credited ? BigInt(p.cents - cents) * MICRO_PER_CENT : 0n;
  expect(state.balance.purchased, 'purchased pocket').toBe(purchased);
  expect(state.ledgerByPocket.purchased, 'ledger of the purchased pocket').toBe(purchased);
  const [row] = await orm.em
    .fork()
    .execute<{ net: string }[]>(
      `select coalesce(-sum(r.coins_micro), 0)::text as net from payment_reversals r join payments p on p.id = r.payment_id where p.payment_intent_id = ?`,
      [p.pi],
    );
  expect(BigInt(row!.net), 'net coins of the payment reversals').toBe(BigInt(cents) * MICRO_PER_CENT);
}

async function descriptions(p: Payment) {
  const rows = await orm.em
    .fork()
    .execute<{ description: string; amount: string }[]>(`select description, amount_micro::text as amount from ledger_entries where account_id = ? order by id`, [p.account]);
  return rows.map((r) => `${r.description} ${BigInt(r.amount) / 1_000_000n}`);
}

describe('refunds and disputes of one payment take back at most what it credited', () => {
  it('a full refund and then a dispute of the same 20 USD take back 20,000 coins, not 40,000; the dispute won gives nothing back', async () => {
    const p = await newPayment(2000);
    expect(await credit(p)).toBe('credited');
    expect(await refund(p, 2000)).toBe('refunded');
    const d = { id: unique('dp'), cents: 2000, status: 'needs_response' };
    expect(await dispute(p, 'created', d)).toBe('nothing_to_take');
    await expectTakenBack(p, 2000);
    expect(await dispute(p, 'closed', { ...d, status: 'won' })).toBe('dispute_won');
    await expectTakenBack(p, 2000);
    expect(await descriptions(p)).toEqual(['Top-up 20000', 'Refund (Stripe) -20000']);
  });

  it('a partial refund of 5 USD and a dispute of 20 USD take back 20,000 coins, not 25,000; the dispute won gives back only its 15,000', async () => {
    const p = await newPayment(2000);
    await credit(p);
    expect(await refund(p, 500)).toBe('refunded');
    const d = { id: unique('dp'), cents: 2000, status: 'needs_response' };
    expect(await dispute(p, 'created', d)).toBe('dispute_taken');
    await expectTakenBack(p, 2000);
    expect(await dispute(p, 'closed', { ...d, status: 'won' })).toBe('dispute_won');
    await expectTakenBack(p, 500);
    expect(await descriptions(p)).toEqual(['Top-up 20000', 'Refund (Stripe) -5000', 'Dispute -15000', 'Dispute won 15000']);
  });

  it('a dispute and then a refund take the payment back once; the won dispute gives back what it held and the refund keeps its part', async () => {
    const p = await newPayment(2000);
    await credit(p);
    const d = { id: unique('dp'), cents: 2000, status: 'needs_response' };
    expect(await dispute(p, 'created', d)).toBe('dispute_taken');
    expect(await refund(p, 500)).toBe('nothing_to_take');
    await expectTakenBack(p, 2000);
    expect(await dispute(p, 'closed', { ...d, status: 'won' })).toBe('dispute_won');
    await expectTakenBack(p, 500);
    expect(await descriptions(p)).toEqual(['Top-up 20000', 'Dispute -20000', 'Dispute won 20000', 'Refund (Stripe) -5000']);
  });

  it('two refunds, a dispute and its outcome, in every order: min(credited, refunded + disputed) taken back, never more at any step', async () => {
    // 20 USD: refunds of 5 USD then 15 USD in all, and a 10 USD dispute that is lost, or won.
    const orders = (xs: number[]): number[][] => (xs.length <= 1 ? [xs] : xs.flatMap((x, i) => orders([...xs.slice(0, i), ...xs.slice(i + 1)]).map((rest) => [x, ...rest])));
    for (const outcome of ['lost', 'won'] as const) {
      for (const order of orders([0, 1, 2, 3])) {
        const p = await newPayment(2000);
        await credit(p);
        const d = { id: unique('dp'), cents: 1000 };
        const steps = [() => refund(p, 500), () => refund(p, 1500), () => dispute(p, 'created', { ...d, status: 'needs_response' }), () => dispute(p, 'closed', { ...d, status: outcome })];
        for (const i of order) {
          await steps[i]!();
          const { balance } = await walletInvariants(orm, p.account);
          expect(balance.purchased, `order ${order.join('')} (${outcome}), step ${i}`).toBeGreaterThanOrEqual(0n);
        }
        await expectTakenBack(p, outcome === 'lost' ? 2000 : 1500);
      }
    }
  }, 120_000);

  it('an inquiry (warning_needs_response, warning_under_review) takes nothing, nor its close; escalated (funds withdrawn) it takes the disputed cents', async () => {
    const p = await newPayment(1000);
    await credit(p);
    const d = { id: unique('dp'), cents: 600 };
    expect(await dispute(p, 'created', { ...d, status: 'warning_needs_response', balance: [] })).toBe('dispute_inquiry');
    expect(await dispute(p, 'updated', { ...d, status: 'warning_under_review', balance: [] })).toBe('dispute_inquiry');
    await expectTakenBack(p, 0);
    expect(await dispute(p, 'funds_withdrawn', { ...d, status: 'needs_response', balance: [-600] })).toBe('dispute_taken');
    await expectTakenBack(p, 600);
    expect(await dispute(p, 'funds_reinstated', { ...d, status: 'won', balance: [-600, 600] })).toBe('dispute_won');
    expect(await dispute(p, 'closed', { ...d, status: 'won', balance: [-600, 600] })).toBe('already_given_back');
    await expectTakenBack(p, 0);

    const q = await newPayment(1000);
    await credit(q);
    const e = { id: unique('dp'), cents: 1000 };
    expect(await dispute(q, 'created', { ...e, status: 'warning_needs_response' })).toBe('dispute_inquiry');
    expect(await dispute(q, 'closed', { ...e, status: 'warning_closed' })).toBe('dispute_closed');
    await expectTakenBack(q, 0);
  });

  it('a refund that fails at Stripe gives its coins back; its late pending or succeeded event takes nothing again', async () => {
    const p = await newPayment(1000);
    await credit(p);
    const r = { id: unique('re'), cents: 400 };
    expect(await refundObject(p, { ...r, status: 'pending' }, 'refund.created')).toBe('refunded');
    expect(await refund(p, 400)).toBe('already_refunded');
    await expectTakenBack(p, 400);
    expect(await refundObject(p, { ...r, status: 'failed' }, 'refund.failed')).toBe('refund_failed');
    await expectTakenBack(p, 0);
    expect(await refundObject(p, { ...r, status: 'succeeded' })).toBe('refund_failed');
    expect(await refund(p, 400)).toBe('already_refunded');
    await expectTakenBack(p, 0);
    // A second refund of 3 USD after the failure: its refund object says 3 USD, and charge.refunded
    // says 7 USD refunded in all, the failed 4 USD included: 3 USD either way.
    expect(await refundObject(p, { id: unique('re'), cents: 300, status: 'succeeded' }, 'refund.created')).toBe('refunded');
    await expectTakenBack(p, 300);
    expect(await refund(p, 700)).toBe('already_refunded');
    await expectTakenBack(p, 300);
    // A refund waiting for the customer (requires_action) that is then canceled: taken, then given back.
    const waiting = { id: unique('re'), cents: 200 };
    expect(await refundObject(p, { ...waiting, status: 'requires_action' }, 'refund.created')).toBe('refunded');
    await expectTakenBack(p, 500);
    expect(await refundObject(p, { ...waiting, status: 'canceled' })).toBe('refund_failed');
    await expectTakenBack(p, 300);
    expect(await descriptions(p)).toEqual(['Top-up 10000', 'Refund (Stripe) -4000', 'Refund failed 4000', 'Refund (Stripe) -3000', 'Refund (Stripe) -2000', 'Refund failed 2000']);
  });
});

describe('a refund or dispute that arrives before its payment is credited', () => {
  it('is kept (reversal_pending, audited) and taken back when the webhook credits the payment', async () => {
    const p = await newPayment(1500);
    expect(await refund(p, 1500)).toBe('reversal_pending');
    expect(await refund(p, 1500)).toBe('reversal_pending');
    await expectTakenBack(p, 0, false);
    expect(await credit(p)).toBe('credited');
    await expectTakenBack(p, 1500);
    expect(await descriptions(p)).toEqual(['Top-up 15000', 'Refund (Stripe) -15000']);
    const audits = await orm.em
      .fork()
      .execute<{ action: string; target_id: string }[]>(`select action, target_id from admin_audit_log where target_type = 'payment' and target_id in (?, ?) order by id`, [p.charge, p.session]);
    expect(audits.map((a) => a.action)).toEqual(['payment.reversal_pending', 'payment.reversal_pending', 'payment.refunded']);
  });

  it('is taken back when the reconciliation credits the payment the webhook missed: a 15 USD refund keeps nothing of the 15,000 coins', async () => {
    const p = await newPayment(1500);
    expect(await refund(p, 1500)).toBe('reversal_pending');
    expect(await credit(p, 'reconcile')).toBe('credited');
    await expectTakenBack(p, 1500);
    // The webhook's late delivery credits nothing more.
    expect(await credit(p)).toBe('already_credited');
    await expectTakenBack(p, 1500);
  });

  it('an auto top-up refunded in part and disputed before its payment_intent.succeeded is credited net of both, capped at the payment', async () => {
    const p = await newPayment(1000);
    const d = { id: unique('dp'), cents: 1000, status: 'needs_response' };
    expect(await refund(p, 300)).toBe('reversal_pending');
    expect(await dispute(p, 'created', d)).toBe('reversal_pending');
    expect(await credit(p, 'auto_top_up')).toBe('credited');
    await expectTakenBack(p, 1000);
    expect(await dispute(p, 'closed', { ...d, status: 'won' })).toBe('dispute_won');
    await expectTakenBack(p, 300);
  });

  it('an inquiry before the credit takes nothing; a lost dispute before the credit is taken once at the credit', async () => {
    const p = await newPayment(800);
    expect(await dispute(p, 'created', { id: unique('dp'), cents: 800, status: 'warning_needs_response' })).toBe('dispute_inquiry');
    const lost = { id: unique('dp'), cents: 500, status: 'lost' };
    expect(await dispute(p, 'closed', lost)).toBe('reversal_pending');
    expect(await credit(p)).toBe('credited');
    await expectTakenBack(p, 500);
    expect(await dispute(p, 'created', { ...lost, status: 'needs_response' })).toBe('already_closed');
    await expectTakenBack(p, 500);
  });

  it('a payment credited and refunded at once, 20 times: each refund is taken back once, whichever commits first', async () => {
    const payments = await Promise.all(Array.from({ length: 20 }, () => newPayment(900)));
    await Promise.all(payments.flatMap((p) => [credit(p), refund(p, 400)]));
    for (const p of payments) await expectTakenBack(p, 400);
  });
});

describe("a dispute's events out of order", () => {
  it('a dispute created after it was closed as won takes nothing: net zero', async () => {
    const p = await newPayment(1000);
    await credit(p);
    const d = { id: unique('dp'), cents: 1000 };
    expect(await dispute(p, 'closed', { ...d, status: 'won' })).toBe('dispute_won');
    expect(await dispute(p, 'created', { ...d, status: 'needs_response' })).toBe('already_closed');
    expect(await dispute(p, 'funds_withdrawn', { ...d, status: 'needs_response' })).toBe('already_closed');
    await expectTakenBack(p, 0);
    expect(await descriptions(p)).toEqual(['Top-up 10000']);
  });

  it('closed as lost, then created: taken once', async () => {
    const p = await newPayment(1000);
    await credit(p);
    const d = { id: unique('dp'), cents: 700 };
    expect(await dispute(p, 'closed', { ...d, status: 'lost' })).toBe('dispute_lost');
    expect(await dispute(p, 'created', { ...d, status: 'needs_response' })).toBe('already_closed');
    await expectTakenBack(p, 700);
  });
});
