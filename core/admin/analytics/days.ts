import type { EntityManager } from '@mikro-orm/postgresql';
import { z } from 'zod';
import { coinsToJson } from '../../money/coins.ts';
import { coinsSchema, isoTimeSchema } from '../../views.ts';

/**
 * What every analytics query shares: UTC days (`YYYY-MM-DD`), an inclusive range of them, the
 * measures of a usage row, and the time the rollups are as of. The rollups lag the ledger by
 * up to one refresh interval (a minute) plus the refresh's own run: every answer says `as_of`,
 * the moment the last refresh began; what was committed after it is not counted yet.
 */
export const MAX_RANGE_DAYS = 366;

const DAY_MS = 86_400_000;
const dayMs = (day: string) => Date.parse(`${day}T00:00:00Z`);
const dayOf = (ms: number) => new Date(ms).toISOString().slice(0, 10);

export function addDays(day: string, n: number): string {
  return dayOf(dayMs(day) + n * DAY_MS);
}

export const daySchema = z.iso.date().describe('a UTC day, YYYY-MM-DD');

/** The range every query takes: `from` and `to`, both included. */
export const rangeShape = { from: daySchema, to: daySchema };

/** Refines an input with rangeShape: `to` not before `from`, at most MAX_RANGE_DAYS days. */
export function checkRange(r: { from: string; to: string }, ctx: z.RefinementCtx): void {
  if (r.from > r.to) ctx.addIssue({ code: 'custom', message: '`to` must not be before `from`', path: ['to'] });
  else if ((dayMs(r.to) - dayMs(r.from)) / DAY_MS >= MAX_RANGE_DAYS) ctx.addIssue({ code: 'custom', message: `a range is at most ${MAX_RANGE_DAYS} days`, path: ['to'] });
}

/** An id filter: a model, account or key id. */
export const idFilter = z.string().min(1).max(200);

/** A run of consecutive days: `from` included, `until` excluded. */
export interface DayRange {
  from: string;
  until: string;
  days: number;
}

/** The given days (any order, repeats allowed) as runs of consecutive days, each at most `max` long. */
export function dayRanges(days: string[], max: number): DayRange[] {
  const sorted = [...new Set(days)].sort();
  const ranges: DayRange[] = [];
  for (const day of sorted) {
    const last = ranges.at(-1);
    if (last && last.until === day && last.days < max) {
      last.until = addDays(day, 1);
      last.days++;
    } else {
      ranges.push({ from: day, until: addDays(day, 1), days: 1 });
    }
  }
  return ranges;
}

/** The measures of a usage row, in coins (definitions: core/admin/analytics/refresh.ts). */
export const measuresSchema = {
  spent_coins: coinsSchema.describe('captured: what requests and jobs were charged; refunds and releases are not spend'),
  refunded_coins: coinsSchema.describe('refunds of settled jobs (ledger kind refund), on the day of the refund'),
  net_coins: coinsSchema.describe('spent − refunded'),
  job_released_coins: coinsSchema.describe('prices of failed or canceled jobs given back (their holds released): never charged'),
  adjusted_coins: coinsSchema.describe("operators' corrections (ledger kind adjustment), signed; not spend, not refunds"),
  requests: z.number().int().describe('charged requests and jobs (one capture each)'),
};

/** Sums over no row are null. */
export interface MeasureRow {
  spent: string | null;
  refunded: string | null;
  job_released: string | null;
  adjusted: string | null;
  requests: number | null;
}

/** SQL sums of the rollup columns, named as MeasureRow reads them. */
export const MEASURE_SUMS = `sum(spent_micro)::text as spent, sum(refunded_micro)::text as refunded,
  sum(job_released_micro)::text as job_released, sum(adjusted_micro)::text as adjusted, sum(requests)::int as requests`;

/** The rollup columns of one row, named as MeasureRow reads them. */
export const MEASURE_COLUMNS = `spent_micro::text as spent, refunded_micro::text as refunded,
  job_released_micro::text as job_released, adjusted_micro::text as adjusted, requests`;

export function measures(r: MeasureRow) {
  const spent = BigInt(r.spent ?? 0);
  const refunded = BigInt(r.refunded ?? 0);
  return {
    spent_coins: coinsToJson(spent),
    refunded_coins: coinsToJson(refunded),
    net_coins: coinsToJson(spent - refunded),
    job_released_coins: coinsToJson(BigInt(r.job_released ?? 0)),
    adjusted_coins: coinsToJson(BigInt(r.adjusted ?? 0)),
    requests: Number(r.requests ?? 0),
  };
}

export const asOfSchema = isoTimeSchema.nullable().describe('when the last refresh of the rollups began (null: never yet); later entries are not counted');

export async function readAsOf(em: EntityManager): Promise<string | null> {
  const [row] = await em.execute<{ refreshed_at: Date | string | null }[]>('select refreshed_at from analytics_refresh_state');
  return row?.refreshed_at ? new Date(row.refreshed_at).toISOString() : null;
}

/** '' in a rollup's model or key column means none. */
export const noneToNull = (v: string | null | undefined) => (v === '' || v === undefined ? null : v);
