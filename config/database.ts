import type { MikroORM } from '@mikro-orm/postgresql';
import type { Logger } from 'pino';
import { startEmbeddedPostgres } from '../adapters/embedded/postgres.ts';
import { migrate, openOrm, pendingMigrations } from '../core/orm.ts';
import type { Env } from './env.ts';

export interface Database {
  orm: MikroORM;
  /** Where it is (a secret: it may hold the password). */
  url: string;
  /** True when the database is the embedded server under DATA_DIR. */
  embedded: boolean;
  close(): Promise<void>;
}

/**
 * Who migrates: `apply` runs pending migrations (`npm start`, `npm run migrate`, any process on
 * the embedded database); `check` refuses to start while any is pending, so that many API
 * instances and workers of a deployment never race on the schema: `npm run migrate` runs once.
 */
export type MigrationPolicy = 'apply' | 'check';

export class PendingMigrationsError extends Error {}

/**
 * The database named by DATABASE_URL, or else the embedded PostgreSQL under DATA_DIR (shared
 * with any other process of this service on the same DATA_DIR). The embedded database is
 * always migrated; an external one as `migrations` says.
 */
export async function openDatabase(
  env: Pick<Env, 'DATABASE_URL' | 'DATA_DIR' | 'DATABASE_POOL_MAX'>,
  logger: Logger,
  migrations: MigrationPolicy = 'apply',
): Promise<Database> {
  const embedded = env.DATABASE_URL ? undefined : await startEmbeddedPostgres({ dataDir: env.DATA_DIR, logger });
  const url = env.DATABASE_URL ?? embedded!.url;
  let orm: MikroORM | undefined;
  try {
    orm = await openOrm({ url, poolMax: env.DATABASE_POOL_MAX, logger });
    if (migrations === 'apply' || embedded) {
      const applied = await migrate(orm);
      if (applied.length > 0) logger.info({ migrations: applied }, 'applied database migrations');
    } else {
      const pending = await pendingMigrations(orm);
      if (pending.length > 0) {
        throw new PendingMigrationsError(
          `The database has ${pending.length} migration(s) not yet applied (${pending.join(', ')}). Run \`npm run migrate\` once (with the same DATABASE_URL), then start again.`,
        );
      }
    }
  } catch (err) {
    await orm?.close().catch(() => undefined);
    await embedded?.release();
    throw err;
  }
  const ready = orm;
  return {
    orm: ready,
    url,
    embedded: embedded !== undefined,
    async close() {
      await ready.close();
      await embedded?.release();
    },
  };
}
