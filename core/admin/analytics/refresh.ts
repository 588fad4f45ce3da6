import type { EntityManager } from '@mikro-orm/postgresql';
import { z } from 'zod';
import { isoTimeSchema } from '../../views.ts';
import { addDays, dayRanges, type DayRange } from './days.ts';
import { rebuildRouteDays, routeDaysSince } from './route-days.ts';

/**
 * Rebuilds the daily rollups (migration analytics) for the days that changed since the last
 * run: run by the `mas-analytics-refresh` Temporal Schedule (every minute), callable again at
 * any time. Idempotent: a day is rebuilt whole from the ledger and the jobs (delete, then
 * insert, in one transaction), so a second run gives the same rows; runs take turns on an
 * advisory lock, so two at once cannot interleave their deletes and inserts.
 *
 * Which days: today and yesterday (UTC) always, which covers entries that were being written
 * while the last run read (a ledger id is taken before its transaction commits); every day of
 * the ledger entries above the last run's highest id; every creation day of a job created or
 * ended since the last run began, less ten minutes; for the route rollup (route-days.ts), every
 * day of a completion record created or a job that succeeded since the last run began, less ten
 * minutes (all of them on the first run). Batched: at most BATCH_DAYS days per transaction.
 *
 * The definitions (what the rollups count), all in micro-coins:
 * - spent: what captures took (kind `capture`, on the held pocket, amount −captured): the
 *   coins a request or job was charged. A chat's unused reservation and a failed or canceled
 *   job's price come back as releases: never spend.
 * - refunded: ledger kind `refund`, coins an operator gave back for a settled job, counted on
 *   the day of the refund, under the job's model and key (its reference is the job id).
 * - job_released: what came back to the customer when a media job's hold was released (a
 *   failed or canceled job; the customer's history shows it as a refund), from the held pocket.
 * - adjusted: ledger kind `adjustment`, signed: an operator's corrections; no model or key.
 * - requests: charged requests and jobs, one capture each.
 * Model and key come from the hold's metadata (`model`, `key_id`: chat and jobs alike).
 */
export const BATCH_DAYS = 7;
const ANALYZE_AFTER_RANGES = 4;
const LOCK = 'mas:analytics-refresh';
/** How far before the last run's start a job's change is still looked for (a transaction in flight then). */
const JOB_MARGIN = '10 minutes';

export const refreshResultSchema = z
  .object({
    object: z.literal('analytics_refresh'),
    usage_days: z.number().int().describe('days of usage rebuilt'),
    job_days: z.number().int().describe('days of jobs rebuilt'),
    route_days: z.number().int().describe('days of the route rollup (revenue, upstream cost) rebuilt'),
    ledger_id: z.string().describe('the highest ledger entry id the rollups include'),
    as_of: isoTimeSchema.describe('when this run began: the rollups include what was committed then'),
  })
  .strict();

export async function refreshAnalytics(em: EntityManager): Promise<z.infer<typeof refreshResultSchema>> {
  const [start] = await em.execute<{ now: Date | string; today: string; hi: string; lo: string; since: Date | string | null; route_since: Date | string | null }[]>(
    `select now() as now, (now() at time zone 'UTC')::date::text as today,
            coalesce((select max(id) from ledger_entries), 0)::text as hi,
            s.ledger_id::text as lo, s.refreshed_at - interval '${JOB_MARGIN}' as since,
            s.route_refreshed_at - interval '${JOB_MARGIN}' as route_since
     from analytics_refresh_state s`,
  );
  const { today, hi, lo, since, route_since } = start!;
  const recent = [addDays(today, -1), today];

  const ledgerDays = await em.execute<{ day: string }[]>(
    `select distinct (created_at at time zone 'UTC')::date::text as day from ledger_entries where id > ?::bigint and id <= ?::bigint`,
    [lo, hi],
  );
  const jobDays = await em.execute<{ day: string }[]>(
    since === null
      ? `select distinct (created_at at time zone 'UTC')::date::text as day from generations`
      : `select (created_at at time zone 'UTC')::date::text as day from generations where created_at >= ?
         union select (created_at at time zone 'UTC')::date::text from generations where completed_at >= ?`,
    since === null ? [] : [new Date(since), new Date(since)],
  );

  const usageRanges = dayRanges([...recent, ...ledgerDays.map((r) => r.day)], BATCH_DAYS);
  const jobRanges = dayRanges([...recent, ...jobDays.map((r) => r.day)], BATCH_DAYS);
  const routeRanges = dayRanges([...recent, ...(await routeDaysSince(em, route_since === null ? null : new Date(route_since)))], BATCH_DAYS);
  for (const range of usageRanges) await inTurn(em, (tx) => rebuildUsage(tx, range));
  for (const range of jobRanges) await inTurn(em, (tx) => rebuildJobs(tx, range));
  for (const range of routeRanges) await inTurn(em, (tx) => rebuildRouteDays(tx, range));

  // After a large rebuild (the first run on an existing ledger), the planner learns the rollups'
  // sizes now rather than at autovacuum's next pass: planned as empty, a read can take 10 times longer.
  if (usageRanges.length + jobRanges.length + routeRanges.length > ANALYZE_AFTER_RANGES) await em.execute('analyze usage_daily, usage_daily_models, usage_daily_accounts, jobs_daily, route_daily');
  await inTurn(em, (tx) =>
    tx.execute(
      `update analytics_refresh_state set ledger_id = greatest(ledger_id, ?::bigint), refreshed_at = greatest(refreshed_at, ?::timestamptz),
         route_refreshed_at = greatest(route_refreshed_at, ?::timestamptz)`,
      [hi, new Date(start!.now), new Date(start!.now)],
    ),
  );
  return {
    object: 'analytics_refresh',
    usage_days: usageRanges.reduce((n, r) => n + r.days, 0),
    job_days: jobRanges.reduce((n, r) => n + r.days, 0),
    route_days: routeRanges.reduce((n, r) => n + r.days, 0),
    ledger_id: hi,
    as_of: new Date(start!.now).toISOString(),
  };
}

/** One transaction, after any other run's transaction on the rollups has ended. */
function inTurn<T>(em: EntityManager, fn: (tx: EntityManager) => Promise<T>): Promise<T> {
  return em.transactional(async (tx) => {
    await tx.execute('select pg_advisory_xact_lock(hashtextextended(?, 0))', [LOCK]);
    return fn(tx);
  });
}

const bounds = (r: DayRange) => [`${r.from}T00:00:00Z`, `${r.until}T00:00:00Z`];

const MEASURES = 'spent_micro, refunded_micro, job_released_micro, adjusted_micro, requests';
const SUMS = 'sum(spent_micro), sum(refunded_micro), sum(job_released_micro), sum(adjusted_micro), sum(requests)';

/**
 * The entries that count, read by creation time (the BRIN index): captures, refunds,
 * adjustments, and the releases of the held pocket of job holds (a chat's release is skipped
 * by its reference before the hold is even looked up, then the hold's kind decides).
 */
async function rebuildUsage(tx: EntityManager, range: DayRange): Promise<void> {
  const [from, until] = bounds(range);
  await tx.execute(`delete from usage_daily where day >= ?::date and day < ?::date`, [range.from, range.until]);
  await tx.execute(
    `insert into usage_daily (day, account_id, model_id, key_id, ${MEASURES})
     select (e.created_at at time zone 'UTC')::date, e.account_id,
            coalesce(h.metadata->>'model', g.model_id, ''), coalesce(h.metadata->>'key_id', g.key_id, ''),
            coalesce(sum(-e.amount_micro) filter (where e.kind = 'capture'), 0),
            coalesce(sum(e.amount_micro) filter (where e.kind = 'refund'), 0),
            coalesce(sum(-e.amount_micro) filter (where e.kind = 'release'), 0),
            coalesce(sum(e.amount_micro) filter (where e.kind = 'adjustment'), 0),
            count(*) filter (where e.kind = 'capture')
     from ledger_entries e
     left join holds h on h.id = e.hold_id
     left join generations g on e.kind = 'refund' and g.id = e.reference
     where e.created_at >= ?::timestamptz and e.created_at < ?::timestamptz
       and (e.kind in ('capture', 'refund', 'adjustment')
            or (e.kind = 'release' and e.pocket = 'held' and e.reference not like 'chatcmpl-%'))
       and (e.kind <> 'release' or h.metadata->>'kind' = 'generation')
     group by 1, 2, 3, 4`,
    [from, until],
  );
  await tx.execute(`delete from usage_daily_models where day >= ?::date and day < ?::date`, [range.from, range.until]);
  await tx.execute(
    `insert into usage_daily_models (day, model_id, ${MEASURES})
     select day, model_id, ${SUMS} from usage_daily where day >= ?::date and day < ?::date group by day, model_id`,
    [range.from, range.until],
  );
  await tx.execute(`delete from usage_daily_accounts where day >= ?::date and day < ?::date`, [range.from, range.until]);
  await tx.execute(
    `insert into usage_daily_accounts (day, account_id, ${MEASURES})
     select day, account_id, ${SUMS} from usage_daily where day >= ?::date and day < ?::date group by day, account_id`,
    [range.from, range.until],
  );
}

/**
 * Jobs by the day they were created, with their current status and failure code, and two
 * durations of each ended job: run (completed − started: the provider's work and storing the
 * result) and total (completed − created: what the client waited, queue included).
 */
/** An interval in whole milliseconds, never negative (clocks of two transactions). */
const ms = (interval: string) => `greatest(0, round(extract(epoch from ${interval}) * 1000))::int`;

async function rebuildJobs(tx: EntityManager, range: DayRange): Promise<void> {
  const [from, until] = bounds(range);
  const run = ms('completed_at - started_at');
  const total = ms('completed_at - created_at');
  await tx.execute(`delete from jobs_daily where day >= ?::date and day < ?::date`, [range.from, range.until]);
  await tx.execute(
    `insert into jobs_daily (day, model_id, status, error_code, jobs, run_ms, total_ms)
     select (created_at at time zone 'UTC')::date, model_id, status, coalesce(error->>'code', ''), count(*),
            coalesce(array_agg(${run} order by ${run}) filter (where completed_at is not null and started_at is not null), '{}'),
            coalesce(array_agg(${total} order by ${total}) filter (where completed_at is not null), '{}')
     from generations
     where created_at >= ?::timestamptz and created_at < ?::timestamptz
     group by 1, 2, 3, 4`,
    [from, until],
  );
}
