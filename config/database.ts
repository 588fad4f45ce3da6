import type { MikroORM } from '@mikro-orm/postgresql';
import type { Logger } from 'pino';
import { startEmbeddedPostgres } from '../adapters/embedded/postgres.ts';
import { migrate, openOrm } from '../core/orm.ts';
import type { Env } from './env.ts';

export interface Database {
  orm: MikroORM;
  /** True when the database is the embedded server under DATA_DIR. */
  embedded: boolean;
  close(): Promise<void>;
}

/**
 * The database named by DATABASE_URL, or else the embedded PostgreSQL under DATA_DIR (shared
 * with any other process of this service on the same DATA_DIR). Pending migrations are applied.
 */
export async function openDatabase(
  env: Pick<Env, 'DATABASE_URL' | 'DATA_DIR' | 'DATABASE_POOL_MAX'>,
  logger: Logger,
): Promise<Database> {
  const embedded = env.DATABASE_URL ? undefined : await startEmbeddedPostgres({ dataDir: env.DATA_DIR, logger });
  const url = env.DATABASE_URL ?? embedded!.url;
  let orm: MikroORM | undefined;
  try {
    orm = await openOrm({ url, poolMax: env.DATABASE_POOL_MAX, logger });
    const applied = await migrate(orm);
    if (applied.length > 0) logger.info({ migrations: applied }, 'applied database migrations');
  } catch (err) {
    await orm?.close().catch(() => undefined);
    await embedded?.release();
    throw err;
  }
  const ready = orm;
  return {
    orm: ready,
    embedded: embedded !== undefined,
    async close() {
      await ready.close();
      await embedded?.release();
    },
  };
}
