import { randomBytes } from 'node:crypto';
import type { MikroORM } from '@mikro-orm/postgresql';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAccount } from '../../core/accounts/accounts.ts';
import { migrator, openOrm } from '../../core/orm.ts';
import { handlePaymentEvent } from '../../core/payments/receive-webhook.ts';
import type { PaymentEvent } from '../../core/ports.ts';
import { createFreshDatabase, testDeps, uniqueEmail } from '../support/db.ts';

/**
 * Migration payment_claims on a database that already has refunds and disputes taken by the
 * earlier rules (payment_reversals rows keyed stripe:refund:… and stripe:dispute:…): they are read
 * back as the payment's claims, so the next event of the payment neither takes them again nor
 * gives back what a dispute still holds.
 */
const MICRO_PER_CENT = 10_000_000n;
let db: Awaited<ReturnType<typeof createFreshDatabase>>;
let orm: MikroORM;
beforeAll(async () => {
  db = await createFreshDatabase();
  orm = await openOrm({ url: db.url });
});
afterAll(async () => {
  await orm?.close();
  await db?.drop();
});

const unique = (prefix: string) => `${prefix}_test_${randomBytes(8).toString('hex')}`;

describe('migration payment_claims', () => {
  it("reads the earlier refunds and disputes back as the payment's claims: a later event settles from them", async () => {
    await (await migrator(orm)).up({ to: 'Migration20261207000000_key_room_limited_only' });
    const em = orm.em.fork();
    const account = await createAccount(em, { email: uniqueEmail('claims-migration') });
    const pi = unique('pi');
    const charge = unique('ch');
    const [held, won] = [unique('dp'), unique('dp')];
    // A 20 USD top-up, a 5 USD refund, a 10 USD dispute still open and a 3 USD one won, as the earlier code wrote them.
    const [credit] = await em.execute<{ entry_id: string }[]>(`select entry_id::text from mas_credit(?, 'purchased', 'topup', ?::bigint, 'cs_old', 'stripe:checkout:cs_old', 'Top-up')`, [
      account.id,
      (2000n * MICRO_PER_CENT).toString(),
    ]);
    const payment = unique('pay');
    await em.execute(
      `insert into payments (id, checkout_session_id, account_id, amount_cents, currency, coins_micro, payment_intent_id, event_id, ledger_entry_id) values (?, 'cs_old', ?, 2000, 'usd', ?::bigint, ?, 'evt_old', ?::bigint)`,
      [payment, account.id, (2000n * MICRO_PER_CENT).toString(), pi, credit!.entry_id],
    );
    const step = async (kind: string, ref: string, cents: number, key: string, label: string) => {
      const coins = (kind === 'dispute_won' ? 1n : -1n) * BigInt(cents) * MICRO_PER_CENT;
      const [r] = await em.execute<{ entry_id: string }[]>('select entry_id::text from mas_reverse_payment(?, ?::bigint, ?, ?, ?)', [account.id, coins.toString(), ref, key, label]);
      await em.execute(
        `insert into payment_reversals (id, payment_id, account_id, kind, provider_object_id, amount_cents, coins_micro, step_key, event_id, ledger_entry_id) values (?, ?, ?, ?, ?, ?, ?::bigint, ?, 'evt_old', ?::bigint)`,
        [unique('prv'), payment, account.id, kind, ref, cents, coins.toString(), key, r!.entry_id],
      );
    };
    await step('refund', charge, 500, `stripe:refund:${charge}:500`, 'Refund (Stripe)');
    await step('dispute', held, 1000, `stripe:dispute:${held}`, 'Dispute');
    await step('dispute', won, 300, `stripe:dispute:${won}`, 'Dispute');
    await step('dispute_won', won, 300, `stripe:dispute:${won}:won`, 'Dispute won');

    await (await migrator(orm)).up();
    expect(await em.execute('select charge_id, payment_intent_id, refunded_cents::int from charge_refunds where payment_intent_id = ?', [pi])).toEqual([
      { charge_id: charge, payment_intent_id: pi, refunded_cents: 500 },
    ]);
    expect(await em.execute('select dispute_id, amount_cents::int, state from payment_disputes where payment_intent_id = ? order by seq', [pi])).toEqual([
      { dispute_id: held, amount_cents: 1000, state: 'withdrawn' },
      { dispute_id: won, amount_cents: 300, state: 'won' },
    ]);

    const deps = testDeps(orm);
    const handle = async (event: PaymentEvent) => (await handlePaymentEvent(deps, orm.em.fork(), event)).outcome;
    const base = (type: string) => ({ eventId: unique('evt'), providerType: type, createdAt: new Date() });
    const dispute = (id: string, stage: 'created' | 'closed', status: string, cents: number) =>
      handle({ ...base(`charge.dispute.${stage}`), kind: 'dispute', stage, dispute: { id, chargeId: charge, paymentIntentId: pi, amountCents: cents, currency: 'usd', status, balanceAmounts: null } });
    const purchased = async () => BigInt((await em.execute<{ p: string }[]>('select purchased_micro::text as p from wallets where account_id = ?', [account.id]))[0]!.p);

    // 20 − 5 − 10 USD: 5 USD of coins left. The open dispute's creation again, and the won one's close again: nothing.
    expect(await purchased()).toBe(500n * MICRO_PER_CENT);
    expect(await dispute(held, 'created', 'needs_response', 1000)).toBe('already_disputed');
    expect(await dispute(won, 'closed', 'won', 300)).toBe('already_given_back');
    // A second refund, 8 USD in all: 3 USD more. The open dispute won: its 10 USD back.
    expect(await handle({ ...base('charge.refunded'), kind: 'refund', charge: { id: charge, paymentIntentId: pi, amountCents: 2000, amountRefundedCents: 800, currency: 'usd' } })).toBe('refunded');
    expect(await purchased()).toBe(200n * MICRO_PER_CENT);
    expect(await dispute(held, 'closed', 'won', 1000)).toBe('dispute_won');
    expect(await purchased()).toBe(1200n * MICRO_PER_CENT);
  });
});
