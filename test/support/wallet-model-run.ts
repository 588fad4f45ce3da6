import { randomBytes } from 'node:crypto';
import fc from 'fast-check';
import { expect } from 'vitest';
import type { MikroORM } from '@mikro-orm/postgresql';
import { statementPool } from '../../adapters/db/statement-pool.ts';
import { createAccount } from '../../core/accounts/accounts.ts';
import { isCoreError } from '../../core/errors.ts';
import { createKey, revokeKey } from '../../core/keys/keys.ts';
import { HoldBatcher } from '../../core/money/hold-batcher.ts';
import { release, reserve, settle } from '../../core/money/holds.ts';
import { releaseExpiredHolds } from '../../core/money/sweep.ts';
import { credit } from '../../core/money/wallet.ts';
import { createOrganization } from '../../core/organizations/organizations.ts';
import type { CoreDeps } from '../../core/context.ts';
import { handlePaymentEvent } from '../../core/payments/receive-webhook.ts';
import type { PaymentEvent } from '../../core/ports.ts';
import { makeAppConnection } from './apps.ts';
import { makeKey, uniqueEmail, walletInvariants } from './db.ts';
import {
  DISPUTE_STEPS,
  MICRO_PER_CENT,
  WalletModel,
  type DisputeStep,
  type EndOutcome,
  type ModelAccount,
  type ModelConnection,
  type ModelMember,
  type ModelPaymentFacts,
  type Pocket,
  type ReserveOutcome,
  type ReservePath,
  type ReserveRequest,
} from './wallet-model.ts';

/**
 * The wallet model property (issue 30): random command sequences (fast-check `commands`) run
 * against the money functions in the real database and against the independent bigint model of
 * ./wallet-model.ts, compared after every step. Run by test/integration/wallet-model.test.ts
 * (few runs, `npm test`) and test/reliability/wallet-model.test.ts (many, `npm run
 * test:reliability`); WALLET_MODEL_RUNS sets the number of runs of either.
 *
 * Each run has two accounts, each with an API key and an app connection (OAuth) with a key of
 * its own and a random spend cap (or none): four principals; and an organization (issue 49)
 * whose owner is the first account's person and whose other member is the second's, each with a
 * random spend limit (or none), total or monthly, and some spend settled last month: three more
 * principals, keys of the organization's wallet, two of the first member (one with a spend limit
 * of its own) and one of the second. The commands:
 * - credit: a top-up or a subscription grant, its idempotency key drawn from a small pool shared
 *   by every account (keys are global: a key used on one account is a duplicate on another);
 * - adjust: mas_adjust, an operator's correction (either sign) or a refund (positive), keys from
 *   a pool of their own;
 * - reserve: one reservation, through mas_reserve (single) or the chat path's batcher
 *   (mas_reserve_many, which also checks the key), of a drawn amount or one at the edge (−1, 0,
 *   +1 micro-coin) of the room under the cap or limits or the spendable coins, sometimes reusing
 *   a hold id;
 * - limit: an admin sets a member's limit at or above what the member has spent (0 to spare
 *   included), or removes it;
 * - end: settle (0–100 % of the hold), release, capture above the hold or below 0 (refused,
 *   nothing moves), through mas_end_hold or mas_end_hold_many, mostly on an open hold, else on
 *   an ended one (it answers its first outcome) or on any id named (a refused one: not found);
 * - revoke: one of the keys (revokeKey): its batched reservations are refused from then on,
 *   its open holds still end as any other;
 * - disable: one of the keys switched off, or on again (disabled_at, as a key's update sets it):
 *   refused in a batch as a revoked one while off;
 * - sweep: some holds' expires_at is set in the past in SQL, then one or two sweeps run at once
 *   (releaseExpiredHolds, with a cutoff in 1970 so that only this test's expired holds match);
 * - race: two or three endings of one hold (open if any) at once (settle, release, the sweep
 *   after its expiry, through either path): exactly one wins, every caller sees its outcome;
 * - batch: several batched reservations in one turn of the event loop (one mas_reserve_many);
 * - payments, through handlePaymentEvent (what the webhook and the reconciliation run once an
 *   event is verified): a payment (a Checkout top-up or an auto top-up) credited at once or left
 *   uncredited, so that its refunds and disputes come first (out-of-order delivery); its credit
 *   later (the webhook, the reconciliation's `reconcile:<session>` event, or the auto top-up's
 *   payment_intent.succeeded; again: already credited); charge.refunded with a cumulative amount
 *   drawn up to the payment and above it; refund objects (two per payment) pending, succeeded,
 *   failed or canceled; every dispute event (created, updated, funds_withdrawn,
 *   funds_reinstated, closed) as a chargeback or an inquiry, won, lost or closed (two dispute ids
 *   per payment), in any order; and a replay of an event already delivered;
 * - parallel: several single reservations at once on separate connections; the model replays
 *   the successful ones in the order the database took them (their ledger entries' ids) and
 *   checks that each refused one did not fit at the end either.
 * After every command, for each account: the pockets and paid flag equal the model; the ledger
 * sums per pocket equal the pockets, and each entry's balance_after is the running sum of its
 * pocket; every hold (status, amount, split, captured, connection, key) equals the model, and its
 * ledger entries show it reserved once and ended at most once; nothing is negative; what each
 * capped connection captured plus holds never exceeds its cap, and equals the model's; the same
 * for each key (over its holds, within its limit if any) and each member (over all their keys of
 * the organization, captures in the period: a monthly limit skips last month's; within their
 * limit if any); the organization's wallet never goes below zero; each
 * credited payment has taken back (its payment_reversals, net) what the model says, which is
 * min(credited, refunded + withdrawn disputes): never more than it credited, never below zero.
 */

/** Runs under `npm test`; `npm run test:reliability` runs RELIABILITY_FACTOR times as many. */
export const DEFAULT_RUNS = 60;
export const RELIABILITY_FACTOR = 20;

/** The number of runs: WALLET_MODEL_RUNS when set, else the default times `factor`. */
export function walletModelRuns(factor = 1): number {
  const fromEnv = process.env.WALLET_MODEL_RUNS;
  if (fromEnv !== undefined && fromEnv !== '') {
    const n = Number(fromEnv);
    if (!Number.isInteger(n) || n < 1) throw new Error(`WALLET_MODEL_RUNS must be a positive integer, not ${fromEnv}`);
    return n;
  }
  return DEFAULT_RUNS * factor;
}

/** Expired holds of this test expire in 1970; the sweep's cutoff is just after. */
const EXPIRED_AT = '1970-01-02T00:00:00Z';
const SWEEP_CUTOFF = new Date('1970-01-03T00:00:00Z');

interface Principal {
  account: string;
  keyId: string;
  connection: string | null;
}

/** The organization of a run: each member's limit (or none) and period, the first member's second key's own limit, and each member's spend settled last month. */
interface OrgDraw {
  limits: [bigint | null, bigint | null];
  periods: ['total' | 'monthly', 'total' | 'monthly'];
  keyLimit: bigint | null;
  history: [bigint, bigint];
}

/** The model side of a run: the bigint model and the names both sides share. */
interface State {
  m: WalletModel;
  principals: Principal[];
  /** Every hold id a reservation named, refused or not, in order. */
  attempts: { id: string; account: string }[];
  tag: string;
  seq: number;
  /** The payments of the run (credited or not yet), in order. */
  sessions: ModelPaymentFacts[];
  /** Every payment event delivered, for replays. */
  payEvents: PaymentEvent[];
}

interface Real {
  orm: MikroORM;
  batcher: HoldBatcher;
  stats: Map<string, number>;
}

type EndMode = 'settle' | 'release' | 'over' | 'negative';
/** A reservation's amount: as drawn, or at the edge (−1, 0, +1) of what the cap or the wallet allows. */
type Fit = { to: 'amount' } | { to: 'room' | 'available'; delta: bigint };
type Op =
  | { t: 'credit'; acct: number; pocket: Pocket; amount: bigint; key: number }
  | { t: 'adjust'; acct: number; kind: 'adjustment' | 'refund'; amount: bigint; key: number }
  | { t: 'reserve'; who: number; amount: bigint; fit: Fit; path: ReservePath; reuse: number | null }
  | { t: 'end'; target: 'open' | 'any' | 'named'; hold: number; mode: EndMode; fraction: number; over: bigint; path: ReservePath }
  | { t: 'revoke'; who: number }
  | { t: 'disable'; who: number }
  | { t: 'limit'; member: number; mode: 'spare' | 'exact' | 'remove'; spare: bigint }
  | { t: 'sweep'; holds: number[]; sweepers: number }
  | { t: 'race'; hold: number; contenders: { mode: 'settle' | 'release' | 'sweep'; fraction: number; path: ReservePath }[] }
  | { t: 'batch'; items: { who: number; amount: bigint }[] }
  | { t: 'parallel'; items: { who: number; amount: bigint }[] }
  | { t: 'pay'; acct: number; cents: number; auto: boolean; now: boolean; via: 'webhook' | 'reconcile' }
  | { t: 'credited'; pay: number; via: 'webhook' | 'reconcile' }
  | { t: 'refund'; pay: number; percent: number; plus: number }
  | { t: 'refundobj'; pay: number; refund: number; percent: number; status: string }
  | { t: 'dispute'; pay: number; dispute: number; step: DisputeStep; percent: number }
  | { t: 'replay'; event: number };

// Amounts in micro-coins, of the same order as each other, so that every refusal happens.
const creditAmount = fc.bigInt({ min: 1n, max: 5_000_000n });
const reserveAmount = fc.oneof(fc.constant(0n), fc.bigInt({ min: 1n, max: 4_000_000n }), fc.bigInt({ min: 1n, max: 300_000n }));
// Caps mostly below what the wallets hold, so that the cap, not the balance, refuses.
const cap = fc.oneof(fc.bigInt({ min: 1n, max: 2_500_000n }), fc.bigInt({ min: 1n, max: 8_000_000n }));
const path = fc.constantFrom<ReservePath>('single', 'batched');
/**
 * A principal: 0 and 2 are the accounts' keys, 1 and 3 their app connections (drawn more often),
 * 4 to 6 the organization's keys (4 and 5 the first member's, 6 the second's).
 */
const who = fc.oneof({ weight: 2, arbitrary: fc.nat(3) }, { weight: 2, arbitrary: fc.constantFrom(1, 3) }, { weight: 3, arbitrary: fc.integer({ min: 4, max: 6 }) });
const acct = fc.nat(2);
const fraction = fc.oneof(fc.integer({ min: 0, max: 100 }), fc.constantFrom(0, 100));

/** The commands, weighted: reservations and endings most, revocations least. */
const opArb: fc.Arbitrary<Op> = fc.oneof(
  {
    weight: 3,
    arbitrary: fc.record({ t: fc.constant('credit' as const), acct, pocket: fc.constantFrom<Pocket>('subscription', 'purchased'), amount: creditAmount, key: fc.nat(5) }),
  },
  {
    weight: 2,
    arbitrary: fc.oneof(
      fc.record({ t: fc.constant('adjust' as const), acct, kind: fc.constant('adjustment' as const), amount: fc.oneof(creditAmount, creditAmount.map((x) => -x)), key: fc.nat(4) }),
      fc.record({ t: fc.constant('adjust' as const), acct, kind: fc.constant('refund' as const), amount: creditAmount, key: fc.nat(4) }),
    ),
  },
  {
    weight: 5,
    arbitrary: fc.record({
      t: fc.constant('reserve' as const),
      who,
      amount: reserveAmount,
      fit: fc.oneof(
        { weight: 3, arbitrary: fc.constant<Fit>({ to: 'amount' }) },
        { weight: 2, arbitrary: fc.record({ to: fc.constantFrom('room' as const, 'room' as const, 'available' as const), delta: fc.constantFrom(-1n, 0n, 1n, 1n) }) },
      ),
      path,
      reuse: fc.oneof({ weight: 6, arbitrary: fc.constant(null) }, { weight: 1, arbitrary: fc.nat(40) }),
    }),
  },
  {
    weight: 6,
    arbitrary: fc.record({
      t: fc.constant('end' as const),
      target: fc.constantFrom<'open' | 'any' | 'named'>('open', 'open', 'open', 'open', 'any', 'named'),
      hold: fc.nat(40),
      mode: fc.constantFrom<EndMode>('settle', 'settle', 'release', 'over', 'negative'),
      fraction,
      over: fc.oneof(fc.constant(1n), fc.bigInt({ min: 1n, max: 1_000_000n })),
      path,
    }),
  },
  { weight: 1, arbitrary: fc.record({ t: fc.constant('revoke' as const), who }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant('disable' as const), who }) },
  {
    weight: 1,
    arbitrary: fc.record({
      t: fc.constant('limit' as const),
      member: fc.nat(1),
      mode: fc.constantFrom('spare' as const, 'spare' as const, 'exact' as const, 'remove' as const),
      spare: fc.bigInt({ min: 0n, max: 1_000_000n }),
    }),
  },
  {
    weight: 2,
    arbitrary: fc.record({ t: fc.constant('sweep' as const), holds: fc.array(fc.nat(40), { minLength: 1, maxLength: 3 }), sweepers: fc.integer({ min: 1, max: 2 }) }),
  },
  {
    weight: 2,
    arbitrary: fc.record({
      t: fc.constant('race' as const),
      hold: fc.nat(40),
      contenders: fc.array(fc.record({ mode: fc.constantFrom('settle' as const, 'release' as const, 'sweep' as const), fraction, path }), { minLength: 2, maxLength: 3 }),
    }),
  },
  { weight: 2, arbitrary: fc.record({ t: fc.constant('batch' as const), items: fc.array(fc.record({ who, amount: reserveAmount }), { minLength: 2, maxLength: 5 }) }) },
  { weight: 2, arbitrary: fc.record({ t: fc.constant('parallel' as const), items: fc.array(fc.record({ who, amount: reserveAmount }), { minLength: 2, maxLength: 5 }) }) },
  // Payments: 1 cent = 10,000,000 micro-coins, so 1–3 cents is of the order of the balances above.
  // A payment credited now, or left for its refunds and disputes to come first.
  {
    weight: 2,
    arbitrary: fc.record({
      t: fc.constant('pay' as const),
      acct: fc.nat(1),
      cents: fc.integer({ min: 1, max: 3 }),
      auto: fc.boolean(),
      now: fc.constantFrom(true, true, false),
      via: fc.constantFrom<'webhook' | 'reconcile'>('webhook', 'reconcile'),
    }),
  },
  { weight: 1, arbitrary: fc.record({ t: fc.constant('credited' as const), pay: fc.nat(10), via: fc.constantFrom<'webhook' | 'reconcile'>('webhook', 'reconcile') }) },
  { weight: 2, arbitrary: fc.record({ t: fc.constant('refund' as const), pay: fc.nat(10), percent: fc.constantFrom(0, 34, 50, 67, 100), plus: fc.constantFrom(0, 0, 1) }) },
  {
    weight: 1,
    arbitrary: fc.record({
      t: fc.constant('refundobj' as const),
      pay: fc.nat(10),
      refund: fc.nat(1),
      percent: fc.constantFrom(34, 50, 100),
      status: fc.constantFrom('pending', 'succeeded', 'succeeded', 'failed', 'canceled', 'requires_action'),
    }),
  },
  {
    weight: 3,
    arbitrary: fc.record({
      t: fc.constant('dispute' as const),
      pay: fc.nat(10),
      dispute: fc.nat(1),
      step: fc.constantFrom(...(Object.keys(DISPUTE_STEPS) as DisputeStep[])),
      percent: fc.constantFrom(34, 100, 150),
    }),
  },
  { weight: 1, arbitrary: fc.record({ t: fc.constant('replay' as const), event: fc.nat(20) }) },
);

/** The organization's limits: mostly set (so that they refuse), as the caps are. */
const period = fc.constantFrom<'total' | 'monthly'>('total', 'monthly');
const history = fc.oneof(fc.constant(0n), fc.bigInt({ min: 1n, max: 1_500_000n }));
const orgArb: fc.Arbitrary<OrgDraw> = fc.record({
  limits: fc.tuple(fc.option(cap, { freq: 4, nil: null }), fc.option(cap, { freq: 4, nil: null })),
  periods: fc.tuple(period, period),
  keyLimit: fc.option(cap, { freq: 2, nil: null }),
  history: fc.tuple(history, history),
});

/** What handlePaymentEvent reads of the configuration. */
const PAYMENT_DEPS = { config: { payments: { currency: 'usd', topUpMaxCents: 1_000_000 } } } as unknown as Pick<CoreDeps, 'config'>;

const show = (op: Op) => JSON.stringify(op, (_k, v: unknown) => (typeof v === 'bigint' ? `${v}n` : v));

class Step implements fc.AsyncCommand<State, Real> {
  readonly op: Op;
  constructor(op: Op) {
    this.op = op;
  }
  check(s: Readonly<State>): boolean {
    switch (this.op.t) {
      case 'end':
        return this.op.target === 'named' ? s.attempts.length > 0 : s.m.holds.size > 0;
      case 'sweep':
        return s.attempts.length > 0;
      case 'race':
        return s.m.holds.size > 0;
      case 'credited':
      case 'refund':
      case 'refundobj':
      case 'dispute':
        return s.sessions.length > 0;
      case 'replay':
        return s.payEvents.length > 0;
      default:
        return true;
    }
  }
  async run(s: State, real: Real): Promise<void> {
    await runOp(s, real, this.op);
    count(real, 'command');
    count(real, this.op.t);
    await expectAgreement(s, real);
  }
  toString(): string {
    return show(this.op);
  }
}

function count(real: Real, label: string) {
  real.stats.set(label, (real.stats.get(label) ?? 0) + 1);
}

const inAnHour = () => new Date(Date.now() + 3_600_000);
const newHoldId = (s: State) => `hold_wm${s.tag}x${++s.seq}`;
const pick = <T>(xs: readonly T[], i: number): T => xs[i % xs.length]!;

type RealReserve = 'ok' | 'insufficient' | 'spend_cap_reached' | 'key_spend_limit_reached' | 'member_spend_limit_reached' | 'key_revoked' | 'negative_balance';
const asReal = (o: ReserveOutcome): RealReserve => (o === 'reserved' || o === 'exists' ? 'ok' : o);

async function reserveReal(real: Real, via: ReservePath, r: ReserveRequest): Promise<RealReserve> {
  const input = {
    accountId: r.account,
    amount: r.amount,
    holdId: r.holdId,
    reference: `wm-${r.holdId}`,
    expiresAt: inAnHour(),
    metadata: { kind: 'chat', ...(r.connection ? { app_connection_id: r.connection } : {}), ...(r.keyId ? { key_id: r.keyId } : {}) },
  };
  try {
    if (via === 'single') await reserve(real.orm.em.fork(), input);
    else await real.batcher.reserve({ ...input, ...(r.activeKeyId ? { activeKeyId: r.activeKeyId } : {}) });
    return 'ok';
  } catch (err) {
    if (isCoreError(err)) {
      if (err.code === 'insufficient_balance') return 'insufficient';
      if (err.code === 'negative_balance') return 'negative_balance';
      if (err.code === 'spend_cap_reached' && (err.reason === 'key_spend_limit_reached' || err.reason === 'member_spend_limit_reached')) return err.reason;
      if (err.code === 'spend_cap_reached') return 'spend_cap_reached';
      if (err.code === 'unauthorized') return 'key_revoked';
    }
    throw err;
  }
}

async function endReal(real: Real, via: ReservePath, holdId: string, actual: bigint, outcome: 'settled' | 'released'): Promise<EndOutcome> {
  try {
    const o =
      via === 'single'
        ? outcome === 'settled'
          ? await settle(real.orm.em.fork(), holdId, actual)
          : await release(real.orm.em.fork(), holdId)
        : outcome === 'settled'
          ? await real.batcher.settle(holdId, actual)
          : await real.batcher.release(holdId);
    return { status: o.status, captured: o.captured };
  } catch (err) {
    if (err instanceof RangeError) return { status: 'invalid_amount' };
    if (isCoreError(err) && err.code === 'not_found') return { status: 'not_found' };
    throw err;
  }
}

/** The amount to reserve: as drawn, or next to the principal's room (the least of its cap's, its key's and its member's; else its wallet's spendable coins). */
function amountFor(s: State, p: Principal, amount: bigint, fit: Fit): bigint {
  if (fit.to === 'amount') return amount;
  const a = s.m.account(p.account);
  const rooms = fit.to === 'room' ? [p.connection ? s.m.capRoom(p.connection) : null, s.m.keyRoom(p.keyId), s.m.memberRoom(p.keyId)].filter((x): x is bigint => x !== null) : [];
  const edge = rooms.length > 0 ? rooms.reduce((x, y) => (x < y ? x : y)) : a.sub + a.pur;
  const x = edge + fit.delta;
  return x < 0n ? 0n : x;
}

function requestFor(s: State, p: Principal, holdId: string, amount: bigint, via: ReservePath): ReserveRequest {
  return { holdId, account: p.account, amount, connection: p.connection, keyId: p.keyId, activeKeyId: via === 'batched' ? p.keyId : null };
}

async function expireInSql(real: Real, ids: string[]) {
  await real.orm.em.fork().execute(`update holds set expires_at = ?::timestamptz where id = any(string_to_array(?, ','))`, [EXPIRED_AT, ids.join(',')]);
}

async function runOp(s: State, real: Real, op: Op): Promise<void> {
  const accounts = [...s.m.accounts.keys()];
  switch (op.t) {
    case 'credit': {
      const account = pick(accounts, op.acct);
      const key = `wm${s.tag}:credit:${op.key}`;
      const expected = s.m.credit(account, op.pocket, op.amount, key);
      const kind = op.pocket === 'purchased' ? 'topup' : 'subscription_grant';
      const got = await credit(real.orm.em.fork(), { accountId: account, kind, amount: op.amount, reference: 'wallet-model', idempotencyKey: key, description: 'model' });
      expect(got.applied ? 'credited' : 'duplicate').toBe(expected);
      count(real, `credit:${expected}`);
      return;
    }
    case 'adjust': {
      const account = pick(accounts, op.acct);
      const key = `wm${s.tag}:adjust:${op.key}`;
      const expected = s.m.adjust(account, op.amount, key);
      const [row] = await real.orm.em
        .fork()
        .execute<{ status: string }[]>('select status from mas_adjust(?, ?, ?::bigint, ?, ?, ?)', [account, op.kind, op.amount.toString(), `adj_${key}`, key, 'model']);
      expect(row!.status).toBe(expected);
      count(real, `adjust:${op.amount < 0n ? 'down' : 'up'}:${expected}`);
      return;
    }
    case 'reserve': {
      let p = pick(s.principals, op.who);
      let holdId: string;
      if (op.reuse !== null && s.attempts.length > 0) {
        // The same hold id again, by a principal of the account that first named it.
        const first = pick(s.attempts, op.reuse);
        holdId = first.id;
        p = pick(
          s.principals.filter((x) => x.account === first.account),
          op.who,
        );
      } else {
        holdId = newHoldId(s);
        s.attempts.push({ id: holdId, account: p.account });
      }
      const r = requestFor(s, p, holdId, amountFor(s, p, op.amount, op.fit), op.path);
      const expected = s.m.reserve(op.path, r);
      expect(await reserveReal(real, op.path, r)).toBe(asReal(expected));
      count(real, `reserve:${op.path}:${expected}`);
      return;
    }
    case 'end': {
      // An open hold mostly; else any hold, or any id a reservation named (refused: not found).
      const open = [...s.m.holds.values()].filter((h) => h.status === 'open');
      const id =
        op.target === 'named' ? pick(s.attempts, op.hold).id : op.target === 'open' && open.length > 0 ? pick(open, op.hold).id : pick([...s.m.holds.values()], op.hold).id;
      const amount = s.m.holds.get(id)?.amount ?? 0n;
      const actual =
        op.mode === 'settle' ? (amount * BigInt(op.fraction)) / 100n : op.mode === 'over' ? amount + op.over : op.mode === 'negative' ? -op.over : 0n;
      const outcome = op.mode === 'release' ? 'released' : 'settled';
      const before = s.m.holds.get(id)?.status ?? 'none';
      const expected = s.m.end(id, actual, outcome);
      expect(await endReal(real, op.path, id, actual, outcome)).toEqual(expected);
      count(real, `end:${op.mode}:${before === 'open' || before === 'none' ? expected.status : `again:${expected.status}`}`);
      return;
    }
    case 'revoke': {
      const p = pick(s.principals, op.who);
      await revokeKey(real.orm.em.fork(), p.keyId);
      s.m.revokeKey(p.keyId);
      return;
    }
    case 'disable': {
      const p = pick(s.principals, op.who);
      const [row] = await real.orm.em
        .fork()
        .execute<{ disabled: boolean }[]>(
          'update api_keys set disabled_at = case when disabled_at is null then now() else null end where id = ? returning disabled_at is not null as disabled',
          [p.keyId],
        );
      expect(row!.disabled).toBe(s.m.toggleDisabled(p.keyId));
      count(real, `disable:${row!.disabled ? 'off' : 'on'}`);
      return;
    }
    case 'limit': {
      // An admin's change (updateMember's update): never below what the member has spent, so the limit still holds.
      const m = pick([...s.m.members.values()], op.member);
      const limit = op.mode === 'remove' ? null : s.m.memberUse(m) + (op.mode === 'exact' ? 0n : op.spare);
      await real.orm.em
        .fork()
        .execute('update organization_members set spend_limit_micro = ?, spend_limit_period = ? where organization_id = ? and account_id = ?', [
          limit === null ? null : limit.toString(),
          limit === null ? null : m.period,
          m.organization,
          m.person,
        ]);
      m.limit = limit;
      count(real, `limit:${op.mode}`);
      return;
    }
    case 'sweep': {
      const ids = [...new Set(op.holds.map((i) => pick(s.attempts, i).id))];
      await expireInSql(real, ids);
      for (const id of ids) s.m.expire(id);
      const expected = s.m.sweep();
      // Each hold ends once, which the state check proves. A sweep's count is the expired holds it
      // found open and ended or saw ended (two at once may both count one hold), and another test
      // file's sweep (cutoff: now) may take some first: so each count is at most the model's.
      const released = await Promise.all(Array.from({ length: op.sweepers }, () => releaseExpiredHolds(real.orm.em.fork(), SWEEP_CUTOFF)));
      for (const n of released) expect(n).toBeLessThanOrEqual(expected.length);
      count(real, `sweep:released:${expected.length}`);
      return;
    }
    case 'race': {
      // An open hold when there is one (an ended one answers every contender its first outcome).
      const all = [...s.m.holds.values()];
      const open = all.filter((x) => x.status === 'open');
      const h = pick(open.length > 0 ? open : all, op.hold);
      const first = h.status === 'open' ? null : { status: h.status, captured: h.captured };
      if (op.contenders.some((c) => c.mode === 'sweep')) {
        await expireInSql(real, [h.id]);
        s.m.expire(h.id);
      }
      const asked = op.contenders.map((c) => ({
        status: c.mode === 'settle' ? ('settled' as const) : ('released' as const),
        captured: c.mode === 'settle' ? (h.amount * BigInt(c.fraction)) / 100n : 0n,
      }));
      const results = await Promise.all(
        op.contenders.map((c, i) =>
          c.mode === 'sweep' ? releaseExpiredHolds(real.orm.em.fork(), SWEEP_CUTOFF).then(() => null) : endReal(real, c.path, h.id, asked[i]!.captured, asked[i]!.status),
        ),
      );
      const seen = results.filter((r): r is EndOutcome => r !== null);
      // Every caller sees one outcome: the first ending's (which must be one of those asked).
      const winner = first ?? seen[0] ?? { status: 'released' as const, captured: 0n };
      for (const r of seen) expect(r).toEqual(winner);
      if (!first) {
        expect(asked).toContainEqual(winner);
        if (winner.status !== 'settled' && winner.status !== 'released') throw new Error(`race: unexpected outcome ${winner.status}`);
        expect(s.m.end(h.id, winner.captured, winner.status)).toEqual(winner);
      }
      count(real, `race:${first ? 'ended already' : winner.status}`);
      return;
    }
    case 'batch': {
      // One turn of the event loop: one mas_reserve_many, which works through an account's items
      // in their order (items of different accounts touch nothing in common).
      const reqs = op.items.map((it) => {
        const p = pick(s.principals, it.who);
        const holdId = newHoldId(s);
        s.attempts.push({ id: holdId, account: p.account });
        return requestFor(s, p, holdId, it.amount, 'batched');
      });
      const got = await Promise.all(reqs.map((r) => reserveReal(real, 'batched', r)));
      const expected = reqs.map((r) => s.m.reserve('batched', r));
      expect(got).toEqual(expected.map(asReal));
      for (const e of expected) count(real, `batch:${e}`);
      return;
    }
    case 'parallel': {
      const reqs = op.items.map((it) => {
        const p = pick(s.principals, it.who);
        const holdId = newHoldId(s);
        s.attempts.push({ id: holdId, account: p.account });
        return requestFor(s, p, holdId, it.amount, 'single');
      });
      const got = await Promise.all(reqs.map((r) => reserveReal(real, 'single', r)));
      // The order the database took the successful ones in: their first ledger entry (a
      // reservation of 0 writes none, and moves nothing either way).
      const rows = await real.orm.em
        .fork()
        .execute<{ hold_id: string; first: string }[]>(
          `select hold_id, min(id)::text as first from ledger_entries where hold_id = any(string_to_array(?, ',')) group by hold_id`,
          [reqs.map((r) => r.holdId).join(',')],
        );
      const firstEntry = new Map(rows.map((r) => [r.hold_id, BigInt(r.first)]));
      const ok = reqs.filter((_, i) => got[i] === 'ok');
      ok.sort((a, b) => {
        const x = firstEntry.get(a.holdId) ?? -1n;
        const y = firstEntry.get(b.holdId) ?? -1n;
        return x < y ? -1 : x > y ? 1 : 0;
      });
      for (const r of ok) expect(s.m.reserve('single', r)).toBe('reserved');
      // Refusals: what is available and a cap's room only went down during the group, so a
      // reservation refused then does not fit now either.
      reqs.forEach((r, i) => {
        if (got[i] === 'insufficient') {
          const a = s.m.account(r.account);
          expect(a.sub + a.pur).toBeLessThan(r.amount);
        } else if (got[i] === 'negative_balance') {
          // Reservations never add to the purchased pocket: negative then, negative now.
          expect(s.m.account(r.account).pur).toBeLessThan(0n);
        } else if (got[i] === 'spend_cap_reached') {
          const room = r.connection ? s.m.capRoom(r.connection) : null;
          expect(room !== null && room < r.amount).toBe(true);
        } else if (got[i] === 'key_spend_limit_reached') {
          const room = s.m.keyRoom(r.keyId!);
          expect(room !== null && room < r.amount).toBe(true);
        } else if (got[i] === 'member_spend_limit_reached') {
          const room = s.m.memberRoom(r.keyId!);
          expect(room !== null && room < r.amount).toBe(true);
        } else {
          expect(got[i]).toBe('ok');
        }
        count(real, `parallel:${got[i]}`);
      });
      return;
    }
    case 'pay': {
      const n = ++s.seq;
      const p: ModelPaymentFacts = { session: `cs_wm${s.tag}x${n}`, paymentIntent: `pi_wm${s.tag}x${n}`, account: pick(accounts, op.acct), cents: op.cents, auto: op.auto };
      s.sessions.push(p);
      if (op.now) await creditPayment(s, real, p, op.via);
      else count(real, 'payment:later');
      return;
    }
    case 'credited': {
      await creditPayment(s, real, pick(s.sessions, op.pay), op.via);
      return;
    }
    case 'refund': {
      const p = pick(s.sessions, op.pay);
      const eventId = `evt_wm${s.tag}x${++s.seq}`;
      const amountRefunded = Math.floor((p.cents * op.percent) / 100) + op.plus;
      const charge = `ch_${p.paymentIntent}`;
      const expected = s.m.refund(eventId, p.paymentIntent, charge, amountRefunded);
      const event: PaymentEvent = {
        eventId,
        providerType: 'charge.refunded',
        createdAt: new Date(),
        kind: 'refund',
        charge: { id: charge, paymentIntentId: p.paymentIntent, amountCents: p.cents, amountRefundedCents: amountRefunded, currency: 'usd' },
      };
      await deliverPayment(s, real, event, expected);
      return;
    }
    case 'refundobj': {
      const p = pick(s.sessions, op.pay);
      const eventId = `evt_wm${s.tag}x${++s.seq}`;
      const r = { id: `re_${op.refund}_${p.paymentIntent}`, cents: Math.max(1, Math.floor((p.cents * op.percent) / 100)), status: op.status };
      const expected = s.m.refundObject(eventId, p.paymentIntent, r);
      const event: PaymentEvent = {
        eventId,
        providerType: op.status === 'failed' ? 'refund.failed' : 'refund.updated',
        createdAt: new Date(),
        kind: 'refund_object',
        refund: { id: r.id, chargeId: `ch_${p.paymentIntent}`, paymentIntentId: p.paymentIntent, amountCents: r.cents, currency: 'usd', status: r.status },
      };
      await deliverPayment(s, real, event, expected);
      return;
    }
    case 'dispute': {
      const p = pick(s.sessions, op.pay);
      const eventId = `evt_wm${s.tag}x${++s.seq}`;
      const d = { id: `dp_${op.dispute}_${p.paymentIntent}`, step: op.step, cents: Math.max(1, Math.floor((p.cents * op.percent) / 100)) };
      const expected = s.m.dispute(eventId, p.paymentIntent, d);
      const [stage, status] = op.step.split('/') as [Extract<PaymentEvent, { kind: 'dispute' }>['stage'], string];
      const event: PaymentEvent = {
        eventId,
        providerType: `charge.dispute.${stage}`,
        createdAt: new Date(),
        kind: 'dispute',
        stage,
        dispute: {
          id: d.id,
          chargeId: `ch_${p.paymentIntent}`,
          paymentIntentId: p.paymentIntent,
          amountCents: d.cents,
          currency: 'usd',
          status,
          // What Stripe's balance transactions show at these steps: the funds withdrawn, then reinstated.
          balanceAmounts: stage === 'funds_withdrawn' ? [-d.cents] : stage === 'funds_reinstated' ? [-d.cents, d.cents] : null,
        },
      };
      await deliverPayment(s, real, event, expected);
      return;
    }
    case 'replay': {
      const event = pick(s.payEvents, op.event);
      expect(s.m.events.has(event.eventId)).toBe(true);
      const got = await handlePaymentEvent(PAYMENT_DEPS, real.orm.em.fork(), event);
      expect(got.outcome).toBe('duplicate_event');
      count(real, 'payment:replay');
      return;
    }
  }
}

/**
 * A payment credited: a Checkout top-up by its webhook (a new event id each time) or by the
 * reconciliation (its own event id, `reconcile:<session>`, as reconcilePayments hands it over),
 * an auto top-up by its payment_intent.succeeded.
 */
async function creditPayment(s: State, real: Real, p: ModelPaymentFacts, via: 'webhook' | 'reconcile'): Promise<void> {
  const eventId = !p.auto && via === 'reconcile' ? `reconcile:${p.session}` : `evt_wm${s.tag}x${++s.seq}`;
  const expected = s.m.payTopUp(eventId, p);
  const event: PaymentEvent = p.auto
    ? {
        eventId,
        providerType: 'payment_intent.succeeded',
        createdAt: new Date(),
        kind: 'payment_intent',
        stage: 'succeeded',
        intent: { id: p.paymentIntent, purpose: 'auto_topup', accountId: p.account, chargeId: null, amountReceivedCents: p.cents, currency: 'usd', customerId: null, failure: null },
      }
    : {
        eventId,
        providerType: via === 'reconcile' ? 'reconcile:checkout.session' : 'checkout.session.completed',
        createdAt: new Date(),
        kind: 'checkout_session',
        stage: 'completed',
        session: { id: p.session, mode: 'payment', accountId: p.account, purpose: 'topup', paymentStatus: 'paid', amountTotalCents: p.cents, currency: 'usd', customerId: null, paymentIntentId: p.paymentIntent },
      };
  await deliverPayment(s, real, event, expected);
}

/** One payment event through core, as the webhook hands it over: the outcome is the model's. */
async function deliverPayment(s: State, real: Real, event: PaymentEvent, expected: string): Promise<void> {
  s.payEvents.push(event);
  const got = await handlePaymentEvent(PAYMENT_DEPS, real.orm.em.fork(), event);
  expect(got.outcome, `${event.providerType} ${event.eventId}`).toBe(expected);
  count(real, `payment:${event.kind === 'dispute' ? `dispute:${event.stage}` : event.kind}:${expected}`);
}

interface HoldRow {
  id: string;
  status: string;
  amount: string;
  captured: string | null;
  from_sub: string;
  from_pur: string;
  connection: string | null;
  key_id: string | null;
  held_sum: string;
  spend_sum: string;
  reservations: number;
  captures: number;
  releases: number;
}

/** Everything the database holds about the run's wallets equals the model, and the invariants hold. */
async function expectAgreement(s: State, real: Real): Promise<void> {
  // The checks read independent things: they run at once, each on a connection of its own.
  await Promise.all([
    ...[...s.m.accounts.values()].map((a) => expectAccountAgreement(s, real, a)),
    expectPaymentsAgreement(s, real),
    ...[...s.m.connections.values()].map((c) => expectCapAgreement(s, real, c)),
    expectLimitsAgreement(s, real),
  ]);
}

/** One account: its pockets, its ledger and its holds equal the model's. */
async function expectAccountAgreement(s: State, real: Real, a: ModelAccount): Promise<void> {
  // Its three reads at once too (each on a connection of its own).
  const [state, [drift], rows] = await Promise.all([
    walletInvariants(real.orm, a.id),
    real.orm.em.fork().execute<{ n: number }[]>(
      `select count(*)::int as n from (
         select balance_after_micro, sum(amount_micro) over (partition by pocket order by id) as running
         from ledger_entries where account_id = ?) x
       where balance_after_micro <> running`,
      [a.id],
    ),
    real.orm.em.fork().execute<HoldRow[]>(
      `select h.id, h.status, h.amount_micro::text as amount, h.captured_micro::text as captured,
              h.from_subscription_micro::text as from_sub, h.from_purchased_micro::text as from_pur,
              h.metadata->>'app_connection_id' as connection, h.metadata->>'key_id' as key_id,
              coalesce(sum(e.amount_micro) filter (where e.pocket = 'held'), 0)::text as held_sum,
              coalesce(sum(e.amount_micro) filter (where e.pocket <> 'held'), 0)::text as spend_sum,
              count(*) filter (where e.kind = 'reservation' and e.pocket = 'held')::int as reservations,
              count(*) filter (where e.kind = 'capture')::int as captures,
              count(*) filter (where e.kind = 'release' and e.pocket = 'held')::int as releases
       from holds h left join ledger_entries e on e.hold_id = h.id
       where h.account_id = ? group by h.id order by h.id`,
      [a.id],
    ),
  ]);
  expect(state.balance, `wallet ${a.id}`).toEqual({ subscription: a.sub, purchased: a.pur, held: a.held, paid: a.paid });
  expect(state.ledgerByPocket, `ledger of ${a.id}`).toEqual({ subscription: a.sub, purchased: a.pur, held: a.held });
  expect(state.openHolds).toBe(a.held);
  // Only the purchased pocket may go below zero (a payment taken back after its coins were spent).
  for (const v of [state.balance.subscription, state.balance.held]) expect(v).toBeGreaterThanOrEqual(0n);
  expect(drift!.n, 'ledger entries whose balance_after is not the running sum of their pocket').toBe(0);
  const model = s.m.holdsOf(a.id).sort((x, y) => (x.id < y.id ? -1 : x.id > y.id ? 1 : 0));
  expect(rows.map((r) => r.id)).toEqual(model.map((h) => h.id));
  rows.forEach((r, i) => {
    const h = model[i]!;
    const open = h.status === 'open';
    expect(
      {
        status: r.status,
        amount: BigInt(r.amount),
        captured: r.captured === null ? null : BigInt(r.captured),
        fromSub: BigInt(r.from_sub),
        fromPur: BigInt(r.from_pur),
        connection: r.connection,
        keyId: r.key_id,
      },
      `hold ${h.id}`,
    ).toEqual({ status: h.status, amount: h.amount, captured: open ? null : h.captured, fromSub: h.fromSub, fromPur: h.fromPur, connection: h.connection, keyId: h.keyId });
    // Reserved once and ended at most once, as its ledger entries show.
    expect(
      { held: BigInt(r.held_sum), spendable: BigInt(r.spend_sum), reservations: r.reservations, captures: r.captures, releases: r.releases },
      `ledger entries of hold ${h.id}`,
    ).toEqual({
      held: open ? h.amount : 0n,
      spendable: open ? -h.amount : -h.captured,
      reservations: h.amount > 0n ? 1 : 0,
      captures: !open && h.captured > 0n ? 1 : 0,
      releases: !open && h.amount - h.captured > 0n ? 1 : 0,
    });
  });
}

async function expectPaymentsAgreement(s: State, real: Real): Promise<void> {
  const em = real.orm.em.fork();
  // Each credited payment has taken back what the model says: min(credited, refunded + withdrawn
  // disputes), never more than it credited, never below zero; nothing is credited that the model did not.
  const taken = await em.execute<{ pi: string; cents: number; net: string }[]>(
    `select p.payment_intent_id as pi, p.amount_cents::int as cents, coalesce(-sum(r.coins_micro), 0)::text as net
     from payments p left join payment_reversals r on r.payment_id = p.id
     where p.account_id = any(string_to_array(?, ',')) group by p.id`,
    [[...s.m.accounts.keys()].join(',')],
  );
  expect(taken.map((t) => t.pi).sort(), 'the credited payments').toEqual([...s.m.payments.keys()].sort());
  for (const t of taken) {
    const p = s.m.payments.get(t.pi)!;
    const held = s.m.heldCents(p);
    expect(BigInt(t.net), `coins taken back from ${t.pi}`).toBe(BigInt(held) * MICRO_PER_CENT);
    expect(held).toBeGreaterThanOrEqual(0);
    expect(held, `${t.pi} takes back at most what it credited`).toBeLessThanOrEqual(t.cents);
    expect(held, `${t.pi}: min(credited, refunded + withdrawn disputes)`).toBe(Math.min(t.cents, s.m.wantedCents(t.pi)));
  }
}

/** What counts against a capped connection's cap: the model's, and within the cap. */
async function expectCapAgreement(s: State, real: Real, c: ModelConnection): Promise<void> {
  if (c.cap === null) return;
  const [row] = await real.orm.em.fork().execute<{ used: string }[]>(
    `select coalesce(sum(case status when 'open' then amount_micro when 'settled' then captured_micro else 0 end), 0)::text as used
     from holds where metadata->>'app_connection_id' = ?`,
    [c.id],
  );
  const used = BigInt(row!.used);
  expect(used, `spent and held under the cap of ${c.id}`).toBe(s.m.capUse(c.id));
  expect(used).toBeLessThanOrEqual(c.cap);
}

/** The keys' limits and the members' limits: what counts against each equals the model's and stays within it. */
async function expectLimitsAgreement(s: State, real: Real): Promise<void> {
  const em = real.orm.em.fork();
  // Per key of the organizations: what its holds hold, captured in all and captured this month
  // (UTC): one query. Each limited key within its limit; each member, over all their keys of the
  // organization, captures in the period (monthly: this month), within theirs.
  const orgs = [...new Set([...s.m.members.values()].map((m) => m.organization))];
  const rows = await em.execute<{ id: string; open: string; captured: string; month: string }[]>(
    `select k.id,
            coalesce(sum(h.amount_micro) filter (where h.status = 'open'), 0)::text as open,
            coalesce(sum(h.captured_micro) filter (where h.status = 'settled'), 0)::text as captured,
            coalesce(sum(h.captured_micro) filter (where h.status = 'settled' and h.ended_at >= date_trunc('month', now(), 'UTC')), 0)::text as month
     from api_keys k left join holds h on h.metadata->>'key_id' = k.id
     where k.account_id = any(string_to_array(?, ',')) group by k.id`,
    [orgs.join(',')],
  );
  const byKey = new Map(rows.map((r) => [r.id, { open: BigInt(r.open), captured: BigInt(r.captured), month: BigInt(r.month) }]));
  for (const k of s.m.keys.values()) {
    const u = byKey.get(k.id);
    expect(u, `key ${k.id}`).toBeDefined();
    const used = u!.open + u!.captured;
    expect(used, `spent and held through key ${k.id}`).toBe(s.m.keyUse(k.id));
    if (k.limit !== null) expect(used, `key ${k.id} within its limit`).toBeLessThanOrEqual(k.limit);
  }
  for (const m of s.m.members.values()) {
    let used = 0n;
    for (const k of s.m.keys.values()) {
      if (k.account !== m.organization || k.member !== m.person) continue;
      const u = byKey.get(k.id)!;
      used += u.open + (m.period === 'monthly' ? u.month : u.captured);
    }
    expect(used, `spent and held by member ${m.person} of ${m.organization}`).toBe(s.m.memberUse(m));
    if (m.limit !== null) expect(used, `member ${m.person} within their limit`).toBeLessThanOrEqual(m.limit);
  }
  // The organization's wallet is only spent from: it never goes below zero.
  for (const m of s.m.members.values()) {
    const o = s.m.account(m.organization);
    expect(o.sub >= 0n && o.pur >= 0n && o.held >= 0n, `the wallet of ${m.organization}`).toBe(true);
  }
}

let runs = 0;

/**
 * The organization of a run: the first person its owner, the second a member; keys 4 and 5 the
 * first's (5 with a limit of its own), 6 the second's. Each member's spend of last month is a
 * hold reserved and settled through their key, its end then moved into last month; the limits
 * are set after it, a total one never below it. (A run that spans the first instant of a month,
 * UTC, would see this month's captures become last month's, which the model does not follow.)
 */
async function setupOrganization(s: State, real: Real, draw: OrgDraw, start: bigint): Promise<void> {
  const [first, second] = [...s.m.accounts.keys()] as [string, string];
  const { id } = await createOrganization(real.orm.em.fork(), { personId: first, organizationId: null }, { name: `Model ${s.tag}` });
  s.m.addAccount(id);
  await real.orm.em.fork().execute(`insert into organization_members (organization_id, account_id, role) values (?, ?, 'member')`, [id, second]);
  const members: ModelMember[] = [first, second].map((person, i) => ({ organization: id, person, limit: null, period: draw.periods[i]! }));
  for (const m of members) s.m.addMember(m);
  for (const [i, person] of [first, first, second].entries()) {
    const key = await createKey(real.orm.em.fork(), id, {}, undefined, { memberId: person });
    const limit = i === 1 ? draw.keyLimit : null;
    if (limit !== null) await real.orm.em.fork().execute(`update api_keys set spend_limit_micro = ?, spend_limit_period = 'total' where id = ?`, [limit.toString(), key.id]);
    s.m.addKey({ id: key.id, account: id, limit, member: person });
    s.principals.push({ account: id, keyId: key.id, connection: null });
  }
  const funds = start + draw.history[0] + draw.history[1];
  if (funds > 0n) {
    const key = `wm${s.tag}:start:${id}`;
    s.m.credit(id, 'purchased', funds, key);
    await credit(real.orm.em.fork(), { accountId: id, kind: 'topup', amount: funds, reference: 'wallet-model', idempotencyKey: key, description: 'model' });
  }
  for (const [i, amount] of draw.history.entries()) {
    if (amount === 0n) continue;
    const p = s.principals[i === 0 ? 4 : 6]!;
    const holdId = newHoldId(s);
    const r = requestFor(s, p, holdId, amount, 'single');
    expect(s.m.reserve('single', r)).toBe('reserved');
    expect(await reserveReal(real, 'single', r)).toBe('ok');
    expect(await endReal(real, 'single', holdId, amount, 'settled')).toEqual(s.m.end(holdId, amount, 'settled'));
    await real.orm.em.fork().execute(`update holds set ended_at = date_trunc('month', now(), 'UTC') - interval '1 day' where id = ?`, [holdId]);
    s.m.endedLastMonth(holdId);
  }
  for (const [i, m] of members.entries()) {
    const drawn = draw.limits[i]!;
    if (drawn === null) continue;
    const used = s.m.memberUse(m);
    m.limit = drawn > used ? drawn : used;
    await real.orm.em
      .fork()
      .execute('update organization_members set spend_limit_micro = ?, spend_limit_period = ? where organization_id = ? and account_id = ?', [m.limit.toString(), m.period, id, m.person]);
  }
}

/** A fresh pair of accounts, keys and app connections, and an organization of the two, in the database and in the model. */
async function setup(real: Real, caps: [bigint | null, bigint | null], start: bigint[], org: OrgDraw): Promise<{ model: State; real: Real }> {
  const s: State = { m: new WalletModel(), principals: [], attempts: [], tag: `${process.pid.toString(36)}${(++runs).toString(36)}${randomBytes(3).toString('hex')}`, seq: 0, sessions: [], payEvents: [] };
  for (const [n, capMicro] of caps.entries()) {
    const account = await createAccount(real.orm.em.fork(), { email: uniqueEmail('wallet-model') });
    s.m.addAccount(account.id);
    const key = await makeKey(real.orm, account.id);
    const app = await makeAppConnection(real.orm, account.id, capMicro === null ? {} : { capMicro });
    s.m.addConnection({ id: app.id, account: account.id, keyId: app.key.id, cap: capMicro });
    s.principals.push({ account: account.id, keyId: key.id, connection: null }, { account: account.id, keyId: app.key.id, connection: app.id });
    // Coins to start with (or none): a grant and a top-up, through mas_credit and the model.
    for (const [j, pocket] of (['subscription', 'purchased'] as const).entries()) {
      const amount = start[2 * n + j] ?? 0n;
      if (amount === 0n) continue;
      const key = `wm${s.tag}:start:${account.id}:${pocket}`;
      s.m.credit(account.id, pocket, amount, key);
      await credit(real.orm.em.fork(), { accountId: account.id, kind: pocket === 'purchased' ? 'topup' : 'subscription_grant', amount, reference: 'wallet-model', idempotencyKey: key, description: 'model' });
    }
  }
  await setupOrganization(s, real, org, start[4] ?? 0n);
  await expectAgreement(s, real);
  return { model: s, real };
}

export interface WalletModelReport {
  runs: number;
  /** fast-check's seed: the same seed (and code) runs the same sequences again. */
  seed: number;
  commands: number;
  ms: number;
  /** How often each command ran and each outcome was seen, over every run (shrinking included). */
  stats: Map<string, number>;
}

/** Runs the property `numRuns` times; fails (with fast-check's shrunk command list) on any disagreement. */
export async function checkWalletModel(orm: MikroORM, opts: { numRuns: number; maxCommands?: number; seed?: number }): Promise<WalletModelReport> {
  const pool = statementPool(orm, { max: 4 });
  const real: Real = { orm, batcher: new HoldBatcher(pool.execute), stats: new Map() };
  const started = Date.now();
  const seed = opts.seed ?? (Date.now() ^ (Math.random() * 0x100000000)) | 0;
  try {
    await fc.assert(
      fc.asyncProperty(
        fc.tuple(cap, fc.option(cap, { freq: 3, nil: null })),
        fc.array(fc.oneof(fc.constant(0n), fc.bigInt({ min: 1n, max: 10_000_000n })), { minLength: 5, maxLength: 5 }),
        orgArb,
        fc.commands([opArb.map((op) => new Step(op))], { maxCommands: opts.maxCommands ?? 40, size: 'medium' }),
        async (caps, start, org, cmds) => {
          await fc.asyncModelRun(() => setup(real, caps, start, org), cmds);
        },
      ),
      { numRuns: opts.numRuns, seed },
    );
  } finally {
    await pool.close();
  }
  return { runs: opts.numRuns, seed, commands: real.stats.get('command') ?? 0, ms: Date.now() - started, stats: real.stats };
}
