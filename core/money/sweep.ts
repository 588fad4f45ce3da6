import type { EntityManager } from '@mikro-orm/postgresql';
import { deleteOldIdempotencyKeys } from '../idempotency.ts';
import type { Clock } from '../ports.ts';
import { release } from './holds.ts';

/**
 * Releases holds whose expiry has passed: what a process that died between reserve and settle
 * left behind. Safe to run on every instance at once, and concurrently with a late settle:
 * each hold still ends exactly once (whichever comes first wins, the other sees its outcome).
 */
export async function releaseExpiredHolds(em: EntityManager, now: Date, batch = 200): Promise<number> {
  let total = 0;
  for (;;) {
    const rows = await em.execute<{ id: string }[]>(
      `select id from holds where status = 'open' and expires_at < ?::timestamptz order by expires_at limit ?`,
      [now.toISOString(), batch],
    );
    for (const row of rows) await release(em, row.id);
    total += rows.length;
    if (rows.length < batch) return total;
  }
}

/** The hold-sweep schedule's work: expired holds, and idempotency keys past their keeping time. */
export async function sweep(deps: { clock: Clock }, em: EntityManager) {
  return { released: await releaseExpiredHolds(em, deps.clock()), forgottenIdempotencyKeys: await deleteOldIdempotencyKeys(em) };
}
