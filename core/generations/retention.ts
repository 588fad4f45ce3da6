import type { EntityManager } from '@mikro-orm/postgresql';
import type { Clock, ResultStorage } from '../ports.ts';

/** Deletes one job's stored result; the job keeps its record, its output marked deleted. */
export async function deleteResult(deps: { storage: ResultStorage }, em: EntityManager, id: string, key: string): Promise<void> {
  // Storage first: a crash between the two leaves the row to be found again, never a file without its row.
  await deps.storage.delete(key);
  await em.execute(`update generations set output = output || '{"deleted": true}'::jsonb where id = ?`, [id]);
}

/**
 * Deletes the stored results of jobs whose retention has passed (`output_expires_at`, set when
 * the job succeeded), in batches; run by the result-retention Temporal Schedule. Idempotent:
 * a result already marked deleted is skipped, a run that dies halfway leaves the rest to the
 * next, and deleting a file twice is harmless (the schedule skips a run while one still goes).
 */
export async function deleteExpiredResults(deps: { storage: ResultStorage; clock: Clock }, em: EntityManager, batch = 200): Promise<{ deleted: number }> {
  let deleted = 0;
  for (;;) {
    const rows = await em.execute<{ id: string; key: string }[]>(
      `select id, output->>'key' as key from generations
       where status = 'succeeded' and output_expires_at < ?::timestamptz and output is not null and output->'deleted' is null
       order by output_expires_at limit ?`,
      [deps.clock().toISOString(), batch],
    );
    for (const row of rows) await deleteResult(deps, em, row.id, row.key);
    deleted += rows.length;
    if (rows.length < batch) return { deleted };
  }
}
