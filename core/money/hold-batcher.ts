import type DataLoader from 'dataloader';
import { statementBatcher, withRetry, type Execute } from '../db/batch.ts';
import { newId } from '../ids.ts';
import type { Micro } from './coins.ts';
import { dbSpan } from '../telemetry.ts';
import { checkReservation, endAttributes, endOutcome, reserveAttributes, reserveOutcome, type HoldOutcome, type ReserveInput } from './holds.ts';

type ReserveRow = { i: number; status: string; available: string | null };
type EndRow = { i: number; status: string; captured: string | null; amount: string | null };
type EndItem = { holdId: string; actual: Micro; outcome: 'settled' | 'released' };

export interface BatchedReserve extends ReserveInput {
  /** Reserve only while this API key of the account is active (else `unauthorized`, nothing held). */
  activeKeyId?: string;
}

/**
 * The same reserve, settle and release as `holds.ts`, for callers that are not inside a
 * transaction of their own (chat): concurrent calls share one statement through
 * mas_reserve_many / mas_end_hold_many, each item still its own hold with its own outcome.
 */
export class HoldBatcher {
  private readonly reserves: DataLoader<BatchedReserve & { holdId: string }, ReserveRow>;
  private readonly endings: DataLoader<EndItem, EndRow>;

  constructor(execute: Execute) {
    this.reserves = statementBatcher(async (items) => {
      const payload = items.map((x, i) => ({
        i,
        hold_id: x.holdId,
        account_id: x.accountId,
        amount: x.amount.toString(),
        reference: x.reference,
        expires_at: x.expiresAt.toISOString(),
        metadata: x.metadata ?? {},
        key_id: x.activeKeyId ?? null,
      }));
      const rows = await withRetry(() =>
        execute<ReserveRow>('select i, status, available::text from mas_reserve_many($1::jsonb)', [JSON.stringify(payload)]),
      );
      return inOrder(rows, items.length);
    });
    this.endings = statementBatcher(async (items) => {
      const payload = items.map((x, i) => ({ i, hold_id: x.holdId, actual: x.actual.toString(), outcome: x.outcome }));
      const rows = await withRetry(() =>
        execute<EndRow>('select i, status, captured::text, amount::text from mas_end_hold_many($1::jsonb)', [JSON.stringify(payload)]),
      );
      return inOrder(rows, items.length);
    });
  }

  async reserve(input: BatchedReserve): Promise<{ holdId: string }> {
    checkReservation(input);
    const item = { ...input, holdId: input.holdId ?? newId('hold') };
    return reserveOutcome(await dbSpan('mas_reserve_many', () => reserveAttributes(input, item.holdId), () => this.reserves.load(item)), input, item.holdId);
  }

  async settle(holdId: string, actual: Micro): Promise<HoldOutcome> {
    return endOutcome(await dbSpan('mas_end_hold_many', () => endAttributes(holdId, actual, 'settled'), () => this.endings.load({ holdId, actual, outcome: 'settled' })), holdId, actual);
  }

  async release(holdId: string): Promise<HoldOutcome> {
    return endOutcome(await dbSpan('mas_end_hold_many', () => endAttributes(holdId, 0n, 'released'), () => this.endings.load({ holdId, actual: 0n, outcome: 'released' })), holdId, 0n);
  }
}

/** The rows back in the order of the items (the functions work through them in lock order). */
function inOrder<R extends { i: number }>(rows: R[], n: number): (R | Error)[] {
  const out = new Array<R | Error | undefined>(n);
  for (const row of rows) out[Number(row.i)] = row;
  // Never expected; an Error is made only then (capturing a stack trace for every item costs).
  for (let i = 0; i < n; i++) out[i] ??= new Error('the batched statement returned no row for this item');
  return out as (R | Error)[];
}
