/**
 * An independent model of the money functions (core/money/money.sql), in plain bigint
 * arithmetic: it never calls the code under test. test/integration/wallet-model.test.ts runs
 * random command sequences against the database and this model and compares them after every
 * step. Each method states, as the model sees it, the rule of one money function:
 *
 * - `credit` (mas_credit): top-up into purchased, subscription grant into subscription; marks the
 *   account paid; a repeated idempotency key (global, over every account) moves nothing.
 * - `adjust` (mas_adjust): up into purchased; down out of purchased first, then subscription, and
 *   refused whole ('insufficient') when the spendable coins do not cover it (held coins are never
 *   taken, no pocket goes negative); the key counts once; paid is left as it was.
 * - `reserve` (mas_reserve, mas_reserve_many): subscription coins first; refused when the
 *   spendable coins do not cover it, when an app connection's cap has no room for it (room = cap
 *   minus what its holds captured and what its open holds hold), when the key's spend limit has
 *   no room for it (the same sums over the key's holds), when the organization member owning the
 *   key has no room under their limit (the same sums over all their keys of the organization,
 *   captures counted only in the limit's period: a monthly limit skips last month's), checked in
 *   that order, and on the batched path when the key is revoked or disabled; a hold id already used answers
 *   'exists' and moves nothing (on the batched path only when the cap and limits, if any, have
 *   room for the amount: see `reserve`).
 * - `end` (mas_end_hold, mas_end_hold_many): settle captures at most the hold (subscription
 *   part first) and returns the rest to the pockets it came from; release returns all of it; a
 *   capture above the hold or below 0 is refused and changes nothing; ending an ended hold
 *   answers its first outcome and moves nothing.
 * - `sweep` (releaseExpiredHolds): every open hold past its expiry is released, once.
 * - payments (core/payments, handlePaymentEvent, as the webhook and the reconciliation call it
 *   after verification): every event id acts once (`duplicate_event`). `payTopUp`: a paid
 *   Checkout Session (its webhook, or the reconciliation's event) or an auto top-up's
 *   PaymentIntent credits cents × 10 coins to purchased once per payment. Refunds and disputes are
 *   recorded per PaymentIntent whether or not the payment is credited yet (`reversal_pending`
 *   before): a charge's largest cumulative refunded amount; each refund object's furthest status
 *   (pending < succeeded < failed/canceled) and largest amount; each dispute's furthest state
 *   (inquiry < withdrawn < won/lost/closed) with the amount of the event that set it. A credited
 *   payment then settles (`settle`): the refunds want max(charges' refunded − failed refunds,
 *   standing refunds), each dispute its amount while withdrawn or lost; a claim holding more than
 *   it wants gives the rest back, then claims wanting more take it (refunds first, then disputes
 *   in the order first recorded) while what they hold stays within the payment's cents. Taking
 *   back may leave purchased below zero; while it is, every reservation is refused
 *   ('negative_balance', subscription coins do not hide it) and a correction down never takes
 *   from it.
 */

export type Pocket = 'subscription' | 'purchased';
export type HoldStatus = 'open' | 'settled' | 'released';
export type ReservePath = 'single' | 'batched';

export interface ModelAccount {
  id: string;
  sub: bigint;
  pur: bigint;
  held: bigint;
  paid: boolean;
}

export interface ModelHold {
  id: string;
  account: string;
  amount: bigint;
  fromSub: bigint;
  fromPur: bigint;
  connection: string | null;
  /** The key the hold was made through (metadata key_id), if any. */
  keyId: string | null;
  status: HoldStatus;
  captured: bigint;
  expired: boolean;
  /** Settled before this month began (its ended_at moved there): outside a monthly limit's period. */
  lastMonth: boolean;
}

/** A key that spends from `account`: its own spend limit (total), and the organization member owning it. */
export interface ModelKey {
  id: string;
  account: string;
  limit: bigint | null;
  /** The member (person) owning a key of an organization's wallet; null: a personal key. */
  member: string | null;
}

/** A person's membership of an organization, with the spend limit an admin set for them. */
export interface ModelMember {
  organization: string;
  person: string;
  limit: bigint | null;
  period: 'total' | 'monthly';
}

export interface ModelConnection {
  id: string;
  account: string;
  keyId: string;
  cap: bigint | null;
}

export type CreditOutcome = 'credited' | 'duplicate';
export type AdjustOutcome = 'applied' | 'duplicate' | 'insufficient';
export type ReserveOutcome =
  | 'reserved'
  | 'exists'
  | 'insufficient'
  | 'spend_cap_reached'
  | 'key_spend_limit_reached'
  | 'member_spend_limit_reached'
  | 'key_revoked'
  | 'negative_balance';
export type EndOutcome = { status: 'settled' | 'released'; captured: bigint } | { status: 'invalid_amount' } | { status: 'not_found' };

export interface ReserveRequest {
  holdId: string;
  account: string;
  amount: bigint;
  /** The app connection the hold counts against (metadata app_connection_id), if any. */
  connection?: string | null;
  /** Batched path only: reserve only while this key is active. */
  activeKeyId?: string | null;
  /** The key the hold counts against (metadata key_id: its limit, its member's limit), if any. */
  keyId?: string | null;
}

const min = (a: bigint, b: bigint) => (a < b ? a : b);
const max = (a: bigint, b: bigint) => (a > b ? a : b);

/** 1 cent = 10 coins = 10,000,000 micro-coins (1 USD = 1000 coins). */
export const MICRO_PER_CENT = 10_000_000n;

/** A top-up paid through the payment provider, as the model sees it. */
export interface ModelPaymentFacts {
  session: string;
  paymentIntent: string;
  account: string;
  cents: number;
  /** An auto top-up (credited by its PaymentIntent's event), else a Checkout Session. */
  auto: boolean;
}

export type DisputeState = 'inquiry' | 'withdrawn' | 'won' | 'lost' | 'closed';
/** The dispute events the model knows, and the state each says the funds are in (Stripe's statuses). */
export const DISPUTE_STEPS = {
  'created/needs_response': 'withdrawn',
  'created/warning_needs_response': 'inquiry',
  'updated/under_review': 'withdrawn',
  'updated/warning_under_review': 'inquiry',
  'funds_withdrawn/needs_response': 'withdrawn',
  'funds_reinstated/won': 'won',
  'closed/won': 'won',
  'closed/lost': 'lost',
  'closed/warning_closed': 'closed',
} as const satisfies Record<string, DisputeState>;
export type DisputeStep = keyof typeof DISPUTE_STEPS;

const disputeRank = (s: DisputeState) => (s === 'inquiry' ? 0 : s === 'withdrawn' ? 1 : 2);
const refundRank = (s: string) => (s === 'failed' || s === 'canceled' ? 2 : s === 'succeeded' ? 1 : 0);
const holdsMoney = (s: DisputeState) => s === 'withdrawn' || s === 'lost';

/** What the provider said about one PaymentIntent, credited or not. */
interface Claims {
  /** Per charge, the largest cumulative amount_refunded. */
  charges: Map<string, number>;
  refunds: Map<string, { cents: number; status: string }>;
  /** In the order first recorded. */
  disputes: Map<string, { state: DisputeState; cents: number }>;
}

/** A credited payment: what its refunds (together) and each dispute hold taken back, in cents. */
export interface ModelPayment extends ModelPaymentFacts {
  heldByRefunds: number;
  heldByDisputes: Map<string, number>;
}

export interface ModelStep {
  kind: 'refund' | 'refund_failed' | 'dispute' | 'dispute_won';
  object: string | null;
  cents: number;
}

export class WalletModel {
  readonly accounts = new Map<string, ModelAccount>();
  readonly holds = new Map<string, ModelHold>();
  readonly connections = new Map<string, ModelConnection>();
  readonly keys = new Map<string, ModelKey>();
  /** Organization members, by `organization/person`. */
  readonly members = new Map<string, ModelMember>();
  readonly revokedKeys = new Set<string>();
  /** Keys switched off (disabled_at set): refused as revoked ones, until switched on again. */
  readonly disabledKeys = new Set<string>();
  /** Every idempotency key a credit or adjustment wrote to the ledger (they are global). */
  readonly ledgerKeys = new Set<string>();
  /** The payment provider's event ids already handled (each acts once). */
  readonly events = new Set<string>();
  /** The credited payments, by PaymentIntent. */
  readonly payments = new Map<string, ModelPayment>();
  readonly claims = new Map<string, Claims>();

  addAccount(id: string): ModelAccount {
    const account = { id, sub: 0n, pur: 0n, held: 0n, paid: false };
    this.accounts.set(id, account);
    return account;
  }

  addConnection(c: ModelConnection): void {
    this.connections.set(c.id, c);
  }

  addKey(k: ModelKey): void {
    this.keys.set(k.id, k);
  }

  addMember(m: ModelMember): void {
    this.members.set(`${m.organization}/${m.person}`, m);
  }

  /** The member owning the key (of an organization's wallet), if any. */
  memberOf(keyId: string): ModelMember | undefined {
    const k = this.keys.get(keyId);
    return k?.member ? this.members.get(`${k.account}/${k.member}`) : undefined;
  }

  /** What counts against a key's limit: captured by its settled holds, held by its open ones. */
  keyUse(keyId: string): bigint {
    let used = 0n;
    for (const h of this.holds.values()) {
      if (h.keyId !== keyId) continue;
      if (h.status === 'open') used += h.amount;
      else if (h.status === 'settled') used += h.captured;
    }
    return used;
  }

  /** What a key may still reserve under its own limit; null without one. */
  keyRoom(keyId: string): bigint | null {
    const k = this.keys.get(keyId);
    if (!k || k.limit === null) return null;
    return k.limit - this.keyUse(keyId);
  }

  /**
   * What counts against a member's limit: over all their keys of the organization, what open
   * holds hold and what settled ones captured in the limit's period (a monthly limit skips the
   * holds that ended last month).
   */
  memberUse(m: ModelMember): bigint {
    let used = 0n;
    for (const h of this.holds.values()) {
      const k = h.keyId ? this.keys.get(h.keyId) : undefined;
      if (!k || k.account !== m.organization || k.member !== m.person) continue;
      if (h.status === 'open') used += h.amount;
      else if (h.status === 'settled' && !(m.period === 'monthly' && h.lastMonth)) used += h.captured;
    }
    return used;
  }

  /** What the member owning the key may still reserve under their limit; null without a member or a limit. */
  memberRoom(keyId: string): bigint | null {
    const m = this.memberOf(keyId);
    if (!m || m.limit === null) return null;
    return m.limit - this.memberUse(m);
  }

  account(id: string): ModelAccount {
    const a = this.accounts.get(id);
    if (!a) throw new Error(`model: no account ${id}`);
    return a;
  }

  credit(accountId: string, pocket: Pocket, amount: bigint, key: string): CreditOutcome {
    if (amount <= 0n) throw new Error('model: a credit is positive');
    if (this.ledgerKeys.has(key)) return 'duplicate';
    const a = this.account(accountId);
    if (pocket === 'subscription') a.sub += amount;
    else a.pur += amount;
    a.paid = true;
    this.ledgerKeys.add(key);
    return 'credited';
  }

  adjust(accountId: string, amount: bigint, key: string): AdjustOutcome {
    if (amount === 0n) throw new Error('model: an adjustment is not 0');
    if (this.ledgerKeys.has(key) || this.ledgerKeys.has(`${key}:subscription`)) return 'duplicate';
    const a = this.account(accountId);
    if (amount > 0n) {
      a.pur += amount;
      this.ledgerKeys.add(key);
      return 'applied';
    }
    const down = -amount;
    const purchased = max(a.pur, 0n);
    if (a.sub + purchased < down) return 'insufficient';
    const fromPur = min(purchased, down);
    const fromSub = down - fromPur;
    a.pur -= fromPur;
    a.sub -= fromSub;
    if (fromSub !== 0n) this.ledgerKeys.add(`${key}:subscription`);
    if (fromPur !== 0n) this.ledgerKeys.add(key);
    return 'applied';
  }

  /** What a connection may still reserve: its cap minus captured and open; null without a cap. */
  capRoom(connectionId: string): bigint | null {
    const c = this.connections.get(connectionId);
    if (!c || c.cap === null) return null;
    return c.cap - this.capUse(connectionId);
  }

  /** What counts against a connection's cap: captured by its settled holds, held by its open ones. */
  capUse(connectionId: string): bigint {
    let used = 0n;
    for (const h of this.holds.values()) {
      if (h.connection !== connectionId) continue;
      if (h.status === 'open') used += h.amount;
      else if (h.status === 'settled') used += h.captured;
    }
    return used;
  }

  reserve(path: ReservePath, r: ReserveRequest): ReserveOutcome {
    if (r.amount < 0n) throw new Error('model: a reservation is not negative');
    const exists = this.holds.has(r.holdId);
    if (path === 'batched' && r.activeKeyId && (this.revokedKeys.has(r.activeKeyId) || this.disabledKeys.has(r.activeKeyId))) return 'key_revoked';
    // mas_reserve answers 'exists' for a hold id already used before looking at the cap and the
    // limits; mas_reserve_many (today) looks at them first, so a repeated id whose connection,
    // key or member has no room left for the amount is refused there, though the hold exists. No
    // caller repeats a hold id on the batched path (chat makes a new one per request), so the
    // two differ only here.
    if (exists && path === 'single') return 'exists';
    if (r.connection) {
      const room = this.capRoom(r.connection);
      if (room !== null && room < r.amount) return 'spend_cap_reached';
    }
    if (r.keyId) {
      const room = this.keyRoom(r.keyId);
      if (room !== null && room < r.amount) return 'key_spend_limit_reached';
      const memberRoom = this.memberRoom(r.keyId);
      if (memberRoom !== null && memberRoom < r.amount) return 'member_spend_limit_reached';
    }
    if (exists) return 'exists';
    const a = this.account(r.account);
    if (a.pur < 0n) return 'negative_balance';
    if (a.sub + a.pur < r.amount) return 'insufficient';
    const fromSub = min(a.sub, r.amount);
    const fromPur = r.amount - fromSub;
    a.sub -= fromSub;
    a.pur -= fromPur;
    a.held += r.amount;
    this.holds.set(r.holdId, {
      id: r.holdId,
      account: r.account,
      amount: r.amount,
      fromSub,
      fromPur,
      connection: r.connection ?? null,
      keyId: r.keyId ?? null,
      status: 'open',
      captured: 0n,
      expired: false,
      lastMonth: false,
    });
    return 'reserved';
  }

  end(holdId: string, actual: bigint, outcome: 'settled' | 'released'): EndOutcome {
    const h = this.holds.get(holdId);
    if (!h) return { status: 'not_found' };
    if (h.status !== 'open') return { status: h.status, captured: h.captured };
    if (actual < 0n || actual > h.amount || (outcome === 'released' && actual !== 0n)) return { status: 'invalid_amount' };
    const a = this.account(h.account);
    const capSub = min(h.fromSub, actual);
    const capPur = actual - capSub;
    a.sub += h.fromSub - capSub;
    a.pur += h.fromPur - capPur;
    a.held -= h.amount;
    h.status = outcome;
    h.captured = actual;
    return { status: outcome, captured: actual };
  }

  revokeKey(keyId: string): void {
    this.revokedKeys.add(keyId);
  }

  /** Switches a key off or on again (PATCH /api/v1/keys/{id} `disabled`); answers whether it is now off. */
  toggleDisabled(keyId: string): boolean {
    if (this.disabledKeys.delete(keyId)) return false;
    this.disabledKeys.add(keyId);
    return true;
  }

  /** A settled hold's end is moved into last month (outside a monthly limit's period). */
  endedLastMonth(holdId: string): void {
    const h = this.holds.get(holdId);
    if (!h || h.status !== 'settled') throw new Error(`model: ${holdId} is not a settled hold`);
    h.lastMonth = true;
  }

  /** The hold's expiry is set in the past (only the sweep reads it). */
  expire(holdId: string): void {
    const h = this.holds.get(holdId);
    if (h) h.expired = true;
  }

  /** The sweep: releases every open hold past its expiry; answers the ids it released. */
  sweep(): string[] {
    const released: string[] = [];
    for (const h of this.holds.values()) {
      if (h.status === 'open' && h.expired) {
        this.end(h.id, 0n, 'released');
        released.push(h.id);
      }
    }
    return released;
  }

  private claimsOf(paymentIntent: string): Claims {
    let c = this.claims.get(paymentIntent);
    if (!c) {
      c = { charges: new Map(), refunds: new Map(), disputes: new Map() };
      this.claims.set(paymentIntent, c);
    }
    return c;
  }

  /** What the refunds of a PaymentIntent returned, as far as the events told (before the cap at the payment). */
  refundedCents(paymentIntent: string): number {
    const c = this.claimsOf(paymentIntent);
    const charged = [...c.charges.values()].reduce((a, x) => a + x, 0);
    const refunds = [...c.refunds.values()];
    const failed = refunds.filter((r) => refundRank(r.status) === 2).reduce((a, r) => a + r.cents, 0);
    const standing = refunds.filter((r) => refundRank(r.status) < 2).reduce((a, r) => a + r.cents, 0);
    return Math.max(0, charged - failed, standing);
  }

  /** What a credited payment's refunds and disputes want taken back, in all, before the cap: refunded + withdrawn disputes. */
  wantedCents(paymentIntent: string): number {
    const disputes = [...this.claimsOf(paymentIntent).disputes.values()].filter((d) => holdsMoney(d.state)).reduce((a, d) => a + d.cents, 0);
    return this.refundedCents(paymentIntent) + disputes;
  }

  /** What a credited payment holds taken back, in cents. */
  heldCents(p: ModelPayment): number {
    return p.heldByRefunds + [...p.heldByDisputes.values()].reduce((a, x) => a + x, 0);
  }

  /** Brings a credited payment's coins taken back in line with its claims; answers the steps. */
  settle(paymentIntent: string): ModelStep[] {
    const p = this.payments.get(paymentIntent);
    if (!p) return [];
    const c = this.claimsOf(paymentIntent);
    const claims = () => [
      { kind: 'refund' as const, id: null, wanted: this.refundedCents(paymentIntent), held: p.heldByRefunds },
      ...[...c.disputes.entries()].map(([id, d]) => ({ kind: 'dispute' as const, id, wanted: holdsMoney(d.state) ? d.cents : 0, held: p.heldByDisputes.get(id) ?? 0 })),
    ];
    const steps: ModelStep[] = [];
    const move = (kind: ModelStep['kind'], id: string | null, cents: number) => {
      const taken = kind === 'refund' || kind === 'dispute' ? cents : -cents;
      if (id === null) p.heldByRefunds += taken;
      else p.heldByDisputes.set(id, (p.heldByDisputes.get(id) ?? 0) + taken);
      this.account(p.account).pur -= BigInt(taken) * MICRO_PER_CENT;
      steps.push({ kind, object: id, cents });
    };
    for (const x of claims()) if (x.held > x.wanted) move(x.kind === 'refund' ? 'refund_failed' : 'dispute_won', x.id, x.held - x.wanted);
    let room = p.cents - this.heldCents(p);
    for (const x of claims()) {
      if (x.wanted <= x.held || room <= 0) continue;
      const step = Math.min(x.wanted - x.held, room);
      room -= step;
      move(x.kind, x.id, step);
    }
    return steps;
  }

  /**
   * A payment credited: a Checkout Session's (by its webhook, or by the reconciliation's event
   * `reconcile:<session>`), or an auto top-up's PaymentIntent. Its earlier refunds and disputes settle.
   */
  payTopUp(eventId: string, p: ModelPaymentFacts): string {
    if (this.events.has(eventId)) return 'duplicate_event';
    this.events.add(eventId);
    const key = p.auto ? `stripe:payment_intent:${p.paymentIntent}` : `stripe:checkout:${p.session}`;
    if (this.credit(p.account, 'purchased', BigInt(p.cents) * MICRO_PER_CENT, key) === 'duplicate') return 'already_credited';
    this.payments.set(p.paymentIntent, { ...p, heldByRefunds: 0, heldByDisputes: new Map() });
    this.settle(p.paymentIntent);
    return 'credited';
  }

  private refundOutcome(steps: ModelStep[], raised: boolean): string {
    if (steps.some((x) => x.kind === 'refund')) return 'refunded';
    return raised ? 'nothing_to_take' : 'already_refunded';
  }

  /** charge.refunded with Stripe's cumulative `amountRefunded`. */
  refund(eventId: string, paymentIntent: string, charge: string, amountRefunded: number): string {
    if (this.events.has(eventId)) return 'duplicate_event';
    this.events.add(eventId);
    const c = this.claimsOf(paymentIntent);
    const before = this.refundedCents(paymentIntent);
    c.charges.set(charge, Math.max(c.charges.get(charge) ?? 0, amountRefunded));
    const after = this.refundedCents(paymentIntent);
    if (!this.payments.has(paymentIntent)) return 'reversal_pending';
    return this.refundOutcome(this.settle(paymentIntent), after > before);
  }

  /** A refund object's event (refund.created, refund.updated, refund.failed). */
  refundObject(eventId: string, paymentIntent: string, r: { id: string; cents: number; status: string }): string {
    if (this.events.has(eventId)) return 'duplicate_event';
    this.events.add(eventId);
    const c = this.claimsOf(paymentIntent);
    const before = this.refundedCents(paymentIntent);
    const kept = c.refunds.get(r.id);
    if (!kept) c.refunds.set(r.id, { cents: r.cents, status: r.status });
    else {
      if (refundRank(r.status) > refundRank(kept.status)) kept.status = r.status;
      kept.cents = Math.max(kept.cents, r.cents);
    }
    const status = c.refunds.get(r.id)!.status;
    const ended = refundRank(status) === 2;
    const after = this.refundedCents(paymentIntent);
    if (!this.payments.has(paymentIntent)) return ended ? 'refund_failed' : r.cents === 0 ? 'already_refunded' : 'reversal_pending';
    const steps = this.settle(paymentIntent);
    if (ended) return 'refund_failed';
    return this.refundOutcome(steps, after > before);
  }

  /** A charge.dispute.* event. */
  dispute(eventId: string, paymentIntent: string, d: { id: string; step: DisputeStep; cents: number }): string {
    if (this.events.has(eventId)) return 'duplicate_event';
    this.events.add(eventId);
    const state: DisputeState = DISPUTE_STEPS[d.step];
    const c = this.claimsOf(paymentIntent);
    const recorded = c.disputes.get(d.id);
    const previous = recorded?.state ?? null;
    if (!recorded) c.disputes.set(d.id, { state, cents: d.cents });
    else if (disputeRank(state) > disputeRank(recorded.state)) {
      recorded.state = state;
      recorded.cents = d.cents;
    }
    const kept = c.disputes.get(d.id)!.state;
    const named: Record<DisputeState, string> = { inquiry: 'dispute_inquiry', withdrawn: 'dispute_taken', won: 'dispute_won', lost: 'dispute_lost', closed: 'dispute_closed' };
    if (!this.payments.has(paymentIntent)) return holdsMoney(kept) ? 'reversal_pending' : named[kept];
    const steps = this.settle(paymentIntent);
    if (kept !== state) return 'already_closed';
    if (kept === 'withdrawn') {
      if (steps.some((x) => x.kind === 'dispute' && x.object === d.id)) return 'dispute_taken';
      return previous === 'withdrawn' ? 'already_disputed' : 'nothing_to_take';
    }
    if (kept === 'won') return previous === 'won' ? 'already_given_back' : 'dispute_won';
    return named[kept];
  }

  holdsOf(accountId: string): ModelHold[] {
    return [...this.holds.values()].filter((h) => h.account === accountId);
  }
}
