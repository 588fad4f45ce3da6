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
 *   minus what its holds captured and what its open holds hold), and on the batched path when
 *   the key is revoked; a hold id already used answers 'exists' and moves nothing (on the batched
 *   path only when the cap, if any, has room for the amount: see `reserve`).
 * - `end` (mas_end_hold, mas_end_hold_many): settle captures at most the hold (subscription
 *   part first) and returns the rest to the pockets it came from; release returns all of it; a
 *   capture above the hold or below 0 is refused and changes nothing; ending an ended hold
 *   answers its first outcome and moves nothing.
 * - `sweep` (releaseExpiredHolds): every open hold past its expiry is released, once.
 * - payments (core/payments, handlePaymentEvent, as the webhook calls it after verification):
 *   every event id acts once (`duplicate_event`). `payTopUp`: a paid Checkout Session credits
 *   cents × 10 coins to purchased once per session. `refund`: Stripe's cumulative refunded
 *   amount, capped at the payment, takes back only its increase over what earlier refunds of the
 *   payment took. `dispute`: created (or closed lost) takes the disputed cents (capped) once per
 *   dispute; closed won gives back what that dispute took, once. Taking back may leave purchased
 *   below zero; while it is, every reservation is refused ('negative_balance', subscription
 *   coins do not hide it) and a correction down never takes from it.
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
  status: HoldStatus;
  captured: bigint;
  expired: boolean;
}

export interface ModelConnection {
  id: string;
  account: string;
  keyId: string;
  cap: bigint | null;
}

export type CreditOutcome = 'credited' | 'duplicate';
export type AdjustOutcome = 'applied' | 'duplicate' | 'insufficient';
export type ReserveOutcome = 'reserved' | 'exists' | 'insufficient' | 'spend_cap_reached' | 'key_revoked' | 'negative_balance';
export type EndOutcome = { status: 'settled' | 'released'; captured: bigint } | { status: 'invalid_amount' } | { status: 'not_found' };

export interface ReserveRequest {
  holdId: string;
  account: string;
  amount: bigint;
  /** The app connection the hold counts against (metadata app_connection_id), if any. */
  connection?: string | null;
  /** Batched path only: reserve only while this key is active. */
  activeKeyId?: string | null;
}

const min = (a: bigint, b: bigint) => (a < b ? a : b);
const max = (a: bigint, b: bigint) => (a > b ? a : b);

/** 1 cent = 10 coins = 10,000,000 micro-coins (1 USD = 1000 coins). */
export const MICRO_PER_CENT = 10_000_000n;

/** A top-up paid through the payment provider, as the model sees it. */
export interface ModelPayment {
  session: string;
  paymentIntent: string;
  account: string;
  cents: number;
  /** Cents its refunds took back so far. */
  refunded: number;
  /** Its disputes: the cents each took back, and whether a win gave them back. */
  disputes: Map<string, { cents: number; won: boolean }>;
}

export class WalletModel {
  readonly accounts = new Map<string, ModelAccount>();
  readonly holds = new Map<string, ModelHold>();
  readonly connections = new Map<string, ModelConnection>();
  readonly revokedKeys = new Set<string>();
  /** Every idempotency key a credit or adjustment wrote to the ledger (they are global). */
  readonly ledgerKeys = new Set<string>();
  /** The payment provider's event ids already handled (each acts once). */
  readonly events = new Set<string>();
  readonly payments = new Map<string, ModelPayment>();

  addAccount(id: string): ModelAccount {
    const account = { id, sub: 0n, pur: 0n, held: 0n, paid: false };
    this.accounts.set(id, account);
    return account;
  }

  addConnection(c: ModelConnection): void {
    this.connections.set(c.id, c);
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
    if (path === 'batched' && r.activeKeyId && this.revokedKeys.has(r.activeKeyId)) return 'key_revoked';
    // mas_reserve answers 'exists' for a hold id already used before looking at the cap;
    // mas_reserve_many (today) looks at the cap first, so a repeated id whose connection has no
    // room left for the amount is refused there, though the hold exists. No caller repeats a
    // hold id on the batched path (chat makes a new one per request), so the two differ only here.
    if (exists && path === 'single') return 'exists';
    if (r.connection) {
      const room = this.capRoom(r.connection);
      if (room !== null && room < r.amount) return 'spend_cap_reached';
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
      status: 'open',
      captured: 0n,
      expired: false,
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

  /** A paid top-up session (checkout.session.completed); a new event id each time unless `eventId` was seen. */
  payTopUp(eventId: string, p: { session: string; paymentIntent: string; account: string; cents: number }): string {
    if (this.events.has(eventId)) return 'duplicate_event';
    this.events.add(eventId);
    const outcome = this.credit(p.account, 'purchased', BigInt(p.cents) * MICRO_PER_CENT, `stripe:checkout:${p.session}`);
    if (outcome === 'duplicate') return 'already_credited';
    this.payments.set(p.paymentIntent, { ...p, refunded: 0, disputes: new Map() });
    return 'credited';
  }

  /** charge.refunded with Stripe's cumulative `amountRefunded`. */
  refund(eventId: string, paymentIntent: string, amountRefunded: number): string {
    if (this.events.has(eventId)) return 'duplicate_event';
    this.events.add(eventId);
    const p = this.payments.get(paymentIntent);
    if (!p) return 'unknown_payment';
    const cumulative = Math.min(amountRefunded, p.cents);
    const increase = cumulative - p.refunded;
    if (increase <= 0) return 'already_refunded';
    this.account(p.account).pur -= BigInt(increase) * MICRO_PER_CENT;
    p.refunded = cumulative;
    return 'refunded';
  }

  /** charge.dispute.created (status needs_response) or charge.dispute.closed (lost or won). */
  dispute(eventId: string, paymentIntent: string, d: { id: string; stage: 'created' | 'lost' | 'won'; cents: number }): string {
    if (this.events.has(eventId)) return 'duplicate_event';
    this.events.add(eventId);
    const p = this.payments.get(paymentIntent);
    if (!p) return 'unknown_payment';
    const a = this.account(p.account);
    const taken = p.disputes.get(d.id);
    if (d.stage === 'won') {
      if (!taken) return 'dispute_won';
      if (taken.won) return 'already_given_back';
      taken.won = true;
      a.pur += BigInt(taken.cents) * MICRO_PER_CENT;
      return 'dispute_won';
    }
    if (!taken) {
      const cents = Math.min(d.cents, p.cents);
      p.disputes.set(d.id, { cents, won: false });
      a.pur -= BigInt(cents) * MICRO_PER_CENT;
      return d.stage === 'created' ? 'dispute_taken' : 'dispute_lost';
    }
    return d.stage === 'created' ? 'already_disputed' : 'dispute_lost';
  }

  holdsOf(accountId: string): ModelHold[] {
    return [...this.holds.values()].filter((h) => h.account === accountId);
  }
}
