import type { EntityManager } from '@mikro-orm/postgresql';
import { CoreError } from './errors.ts';

/** Ready means the database answers. */
export async function checkReady(em: EntityManager): Promise<{ status: 'ok'; database: 'ok' }> {
  try {
    await em.execute('select 1');
  } catch {
    throw new CoreError('unavailable', 'The database is not reachable.', { reason: 'database_unreachable' });
  }
  return { status: 'ok', database: 'ok' };
}

/**
 * What /metrics reads of the database at each scrape (docs/observability.md): the coins spent
 * (captured) since the previous call, the holds open now and what they hold, the jobs queued and running now, and, for the jobs that started or
 * ended after `since` (the database's clock, as the previous call returned it), how long each
 * waited in the queue (created → started) and ran (started → ended). `now` is the next `since`.
 */
export async function operationalFigures(em: EntityManager, since: Date | undefined, afterEntry?: string) {
  // Spend: the captures written after the last ledger entry the previous call saw (the
  // primary key's range; the first call only finds where the ledger ends).
  const [spend] = await em.execute<{ spent_micro: string; last_entry: string | null }[]>(
    afterEntry === undefined
      ? `select '0' as spent_micro, (select max(id) from ledger_entries)::text as last_entry`
      : `select coalesce(-sum(amount_micro) filter (where kind = 'capture'), 0)::text as spent_micro, max(id)::text as last_entry from ledger_entries where id > ?::bigint`,
    afterEntry === undefined ? [] : [afterEntry],
  );
  const spent = { spentMicro: BigInt(spend!.spent_micro), lastEntry: spend!.last_entry ?? afterEntry ?? '0' };
  return { ...spent, ...(await jobsAndHolds(em, since)) };
}

async function jobsAndHolds(em: EntityManager, since: Date | undefined) {
  const [counts] = await em.execute<{ holds_open: number; held_micro: string; jobs_queued: number; jobs_running: number; now: Date }[]>(
    `select (select count(*)::int from holds where status = 'open') as holds_open,
            (select coalesce(sum(amount_micro), 0)::text from holds where status = 'open') as held_micro,
            (select count(*)::int from generations where status = 'queued') as jobs_queued,
            (select count(*)::int from generations where status = 'running') as jobs_running,
            now() as now`,
  );
  const now = new Date(counts!.now);
  if (!since) return { ...figures(counts!), now, started: [], ended: [] };
  const started = await em.execute<{ seconds: number }[]>(
    `select extract(epoch from started_at - created_at)::float8 as seconds from generations
      where started_at > ? and started_at <= ? order by started_at limit 10000`,
    [since, now],
  );
  const ended = await em.execute<{ seconds: number; status: string }[]>(
    `select extract(epoch from completed_at - started_at)::float8 as seconds, status from generations
      where completed_at > ? and completed_at <= ? and started_at is not null order by completed_at limit 10000`,
    [since, now],
  );
  return { ...figures(counts!), now, started: started.map((r) => Number(r.seconds)), ended: ended.map((r) => ({ seconds: Number(r.seconds), status: r.status })) };
}

function figures(c: { holds_open: number; held_micro: string; jobs_queued: number; jobs_running: number }) {
  return { holdsOpen: Number(c.holds_open), heldMicro: BigInt(c.held_micro), jobsQueued: Number(c.jobs_queued), jobsRunning: Number(c.jobs_running) };
}
