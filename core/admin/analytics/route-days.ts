import type { EntityManager } from '@mikro-orm/postgresql';
import type { DayRange } from './days.ts';

/**
 * The route rollup (migration route_margin): per UTC day, model, provider and route model, what
 * the requests that route served were charged and what they cost upstream. Rebuilt by the
 * analytics refresh (refresh.ts) a range of days at a time, in its advisory-lock turn.
 *
 * What counts, all in micro-coins:
 * - a chat: its completion record (chat completions and Responses alike), on the UTC day the
 *   request came in; revenue is what it was charged (`cost_micro`).
 * - a media job: one that succeeded, on the UTC day it ended (its charge was captured then);
 *   revenue is its `cost_micro`. A failed or canceled job was charged nothing; an operator's
 *   refund of a settled job is in the usage rollups (refunded), not subtracted here.
 * - upstream cost: the row's `upstream_cost_micro` where the request's path wrote one (the
 *   upstream's own figure, else the route's catalog `cost`); `costed_requests` and
 *   `costed_revenue_micro` count only those rows, so a margin is never made of a cost of zero
 *   standing in for an unknown one.
 * - provider and route model: '' for rows written before routes were recorded (their model's
 *   one provider served them).
 */
export async function rebuildRouteDays(tx: EntityManager, range: DayRange): Promise<void> {
  const from = `${range.from}T00:00:00Z`;
  const until = `${range.until}T00:00:00Z`;
  await tx.execute(`delete from route_daily where day >= ?::date and day < ?::date`, [range.from, range.until]);
  await tx.execute(
    `insert into route_daily (day, model_id, provider, route_model, requests, revenue_micro, costed_requests, costed_revenue_micro, upstream_cost_micro)
     select day, model_id, provider, route_model, count(*), sum(revenue),
            count(*) filter (where upstream is not null),
            coalesce(sum(revenue) filter (where upstream is not null), 0),
            coalesce(sum(upstream), 0)
     from (
       select (created_at at time zone 'UTC')::date as day, model as model_id, coalesce(provider, '') as provider,
              coalesce(route_model, '') as route_model, cost_micro as revenue, upstream_cost_micro as upstream
       from completion_records
       where created_at >= ?::timestamptz and created_at < ?::timestamptz
       union all
       select (completed_at at time zone 'UTC')::date, model_id, coalesce(provider, ''), coalesce(route_model, ''),
              coalesce(cost_micro, 0), upstream_cost_micro
       from generations
       where status = 'succeeded' and completed_at >= ?::timestamptz and completed_at < ?::timestamptz
     ) served
     group by 1, 2, 3, 4`,
    [from, until, from, until],
  );
}

/**
 * The UTC days whose route rows may have changed since `since` (the last refresh's start less a
 * margin): records created and jobs ended since. `since` null (never refreshed): every day the
 * records and the succeeded jobs hold.
 */
export async function routeDaysSince(em: EntityManager, since: Date | null): Promise<string[]> {
  const rows = await em.execute<{ day: string }[]>(
    since === null
      ? `select distinct (created_at at time zone 'UTC')::date::text as day from completion_records
         union select distinct (completed_at at time zone 'UTC')::date::text from generations where status = 'succeeded'`
      : `select distinct (created_at at time zone 'UTC')::date::text as day from completion_records where created_at >= ?
         union select distinct (completed_at at time zone 'UTC')::date::text from generations where completed_at >= ? and status = 'succeeded'`,
    since === null ? [] : [since, since],
  );
  return rows.map((r) => r.day);
}
