import { MikroORM, type EntityManager } from '@mikro-orm/postgresql';
import { Migrator } from '@mikro-orm/migrations';
import type { Logger } from 'pino';
import { AccountSchema } from './accounts/account.entity.ts';
import { ApiKeySchema } from './keys/api-key.entity.ts';
import { migrations } from './db/migrations/index.ts';

export type { EntityManager };

export interface OrmOptions {
  url: string;
  poolMax?: number;
  logger?: Logger;
}

export async function openOrm({ url, poolMax = 10, logger }: OrmOptions): Promise<MikroORM> {
  return MikroORM.init({
    clientUrl: url,
    entities: [AccountSchema, ApiKeySchema],
    discovery: { disableDynamicFileAccess: true, requireEntitiesArray: true },
    extensions: [Migrator],
    migrations: { migrationsList: migrations, transactional: true, allOrNothing: true, snapshot: false },
    pool: { min: 0, max: poolMax },
    allowGlobalContext: false,
    forceUtcTimezone: true,
    debug: false,
    logger: (message) => logger?.debug({ orm: true }, message),
    ensureDatabase: false,
  });
}

/** Arbitrary constant: the PostgreSQL advisory lock that serialises migrations across processes. */
const MIGRATION_LOCK = 724_117_001;

/**
 * Applies pending migrations. Several processes may start at once (API instances, the CLI),
 * so they take turns on a PostgreSQL advisory lock rather than racing on the schema.
 */
export async function migrate(orm: MikroORM): Promise<string[]> {
  const knex = orm.em.getConnection().getKnex();
  const conn = await knex.client.acquireConnection();
  try {
    await conn.query('select pg_advisory_lock($1)', [MIGRATION_LOCK]);
    try {
      const done = await orm.getMigrator().up();
      return done.map((m) => m.name);
    } finally {
      await conn.query('select pg_advisory_unlock($1)', [MIGRATION_LOCK]);
    }
  } finally {
    await knex.client.releaseConnection(conn);
  }
}

/** The names of migrations not yet applied (processes that must not migrate refuse to start with any). */
export async function pendingMigrations(orm: MikroORM): Promise<string[]> {
  return (await orm.getMigrator().getPendingMigrations()).map((m) => m.name);
}
