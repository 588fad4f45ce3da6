import type { Attributes } from '@opentelemetry/api';
import { coins, dbSpan } from '../telemetry.ts';
import type { EntityManager } from '@mikro-orm/postgresql';
import { CoreError, notFound, unauthorized } from '../errors.ts';
import { newId } from '../ids.ts';
import { formatCoins, type Micro } from './coins.ts';

/**
 * Two-phase spending, after TigerBeetle's pending transfers: reserve takes coins out of the
 * spendable pockets into `held`; settle captures part of a hold as `API usage` and returns the
 * rest; release returns all of it. Each hold ends exactly once: ending it again returns the
 * first outcome and moves no money. All of it happens inside PostgreSQL functions, one
 * statement each, under a row lock (see the foundation migration).
 */
export interface HoldOutcome {
  holdId: string;
  status: 'settled' | 'released';
  captured: Micro;
  amount: Micro;
}

export interface ReserveInput {
  accountId: string;
  amount: Micro;
  /** What the hold pays for: a request id or a job id. Shown in the ledger. */
  reference: string;
  /** Chosen by the caller to make the reservation idempotent (a job id, for example). */
  holdId?: string;
  expiresAt: Date;
  metadata?: Record<string, unknown>;
}

export async function reserve(em: EntityManager, input: ReserveInput): Promise<{ holdId: string }> {
  checkReservation(input);
  const holdId = input.holdId ?? newId('hold');
  const rows = await dbSpan('mas_reserve', () => reserveAttributes(input, holdId), () =>
    em.execute<{ status: string; available: string | null }[]>(
      'select status, available::text from mas_reserve(?, ?, ?::bigint, ?, ?::timestamptz, ?::jsonb)',
      [holdId, input.accountId, input.amount.toString(), input.reference, input.expiresAt.toISOString(), JSON.stringify(input.metadata ?? {})],
    ),
  );
  return reserveOutcome(rows[0]!, input, holdId);
}

/** Captures `actual` (at most what is held) and releases the rest. */
export function settle(em: EntityManager, holdId: string, actual: Micro): Promise<HoldOutcome> {
  return endHold(em, holdId, actual, 'settled');
}

/** Gives the whole hold back. */
export function release(em: EntityManager, holdId: string): Promise<HoldOutcome> {
  return endHold(em, holdId, 0n, 'released');
}

async function endHold(em: EntityManager, holdId: string, actual: Micro, outcome: 'settled' | 'released'): Promise<HoldOutcome> {
  const rows = await dbSpan('mas_end_hold', () => endAttributes(holdId, actual, outcome), () =>
    em.execute<{ status: string; captured: string | null; amount: string | null }[]>(
      'select status, captured::text, amount::text from mas_end_hold(?, ?::bigint, ?)',
      [holdId, actual.toString(), outcome],
    ),
  );
  return endOutcome(rows[0]!, holdId, actual);
}

/** The reservation's span attributes (docs/observability.md): ids and amounts, in coins. */
export function reserveAttributes(input: ReserveInput, holdId: string): Attributes {
  return { 'mas.hold_id': holdId, 'mas.account_id': input.accountId, 'mas.reserved_coins': coins(input.amount), 'mas.reference': input.reference };
}

/** The settle's or release's span attributes: `mas.cost_coins` is what the settle asks to capture. */
export function endAttributes(holdId: string, actual: Micro, outcome: 'settled' | 'released'): Attributes {
  return { 'mas.hold_id': holdId, 'mas.hold.outcome': outcome, 'mas.cost_coins': coins(actual) };
}

export function checkReservation(input: ReserveInput): void {
  if (input.amount < 0n) throw new RangeError('a reservation cannot be negative');
}

/** What mas_reserve answered, as the caller sees it: the hold, or the error to show. */
export function reserveOutcome(row: { status: string; available: string | null }, input: ReserveInput, holdId: string): { holdId: string } {
  switch (row.status) {
    case 'reserved':
    case 'exists':
      return { holdId };
    case 'key_revoked':
      throw unauthorized();
    case 'spend_cap_reached':
      throw new CoreError(
        'spend_cap_reached',
        `This app's spend cap is reached: this request needs ${formatCoins(input.amount)} coins and ${formatCoins(BigInt(row.available ?? '0'))} are left under the cap. The account owner can connect the app again with a higher cap.`,
      );
    case 'key_spend_limit_reached':
      throw new CoreError(
        'spend_cap_reached',
        `This API key's spend limit is reached: this request needs ${formatCoins(input.amount)} coins and ${formatCoins(BigInt(row.available ?? '0'))} are left under the key's limit. The account owner can raise the key's limit on the API keys page.`,
        { reason: 'key_spend_limit_reached', params: { needed_coins: formatCoins(input.amount), remaining_coins: formatCoins(BigInt(row.available ?? '0')) } },
      );
    case 'member_spend_limit_reached':
      throw new CoreError(
        'spend_cap_reached',
        `Your spend limit in this organization is reached: this request needs ${formatCoins(input.amount)} coins and ${formatCoins(BigInt(row.available ?? '0'))} are left under it. An admin of the organization can raise it.`,
        { reason: 'member_spend_limit_reached', params: { needed_coins: formatCoins(input.amount), remaining_coins: formatCoins(BigInt(row.available ?? '0')) } },
      );
    case 'negative_balance':
      throw new CoreError(
        'negative_balance',
        `Spending is paused: the purchased balance is ${formatCoins(BigInt(row.available ?? '0'))} coins, below zero, because a payment was refunded or disputed after its coins were spent. Add credits to bring it back above zero.`,
      );
    case 'insufficient':
      throw new CoreError(
        'insufficient_balance',
        `Insufficient balance: this request needs ${formatCoins(input.amount)} coins and ${formatCoins(BigInt(row.available!))} are available.`,
      );
    default:
      throw notFound('account_not_found', `No account ${input.accountId}.`);
  }
}

/** What mas_end_hold answered, as the caller sees it. */
export function endOutcome(row: { status: string; captured: string | null; amount: string | null }, holdId: string, actual: Micro): HoldOutcome {
  if (row.status === 'not_found') throw notFound('hold_not_found', `No hold ${holdId}.`);
  if (row.status === 'invalid_amount') {
    throw new RangeError(`cannot capture ${actual} from hold ${holdId} of ${row.amount} micro-coins`);
  }
  return { holdId, status: row.status as HoldOutcome['status'], captured: BigInt(row.captured!), amount: BigInt(row.amount!) };
}
