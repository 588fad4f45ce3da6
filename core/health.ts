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
