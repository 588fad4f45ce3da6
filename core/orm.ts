import { MikroORM, type EntityManager } from '@mikro-orm/postgresql';
import type { Migrator } from '@mikro-orm/migrations';
import type { Logger } from 'pino';
import { AccountSchema } from './accounts/account.entity.ts';
import { ApiKeySchema } from './keys/api-key.entity.ts';
import { migrationNames } from './db/migrations/names.ts';

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
    // No Migrator extension here: `migrator()` loads it, with the migrations, when a process migrates.
    pool: { min: 0, max: poolMax },
    allowGlobalContext: false,
    forceUtcTimezone: true,
    debug: false,
    logger: (message) => logger?.debug({ orm: true }, message),
    ensureDatabase: false,
  });
}

/** Where MikroORM's migrator records the migrations it applied: its default table, in its default schema (this configuration sets neither). */
const MIGRATIONS_TABLE = 'public.mikro_orm_migrations';

/**
 * MikroORM's migrator over this orm, with every migration of core/db/migrations. Loaded on
 * first use, not by `openOrm`: the migrator's library (`@mikro-orm/migrations`, which every
 * migration's class extends) takes about 20 MiB of memory for good once imported, and a
 * process that finds nothing pending (`pendingMigrations`) never needs it.
 */
export async function migrator(orm: MikroORM): Promise<Migrator> {
  const [{ Migrator }, { migrations }] = await Promise.all([import('@mikro-orm/migrations'), import('./db/migrations/index.ts')]);
  if (!orm.config.getExtension('@mikro-orm/migrator')) {
    orm.config.set('migrations', { ...orm.config.get('migrations'), migrationsList: migrations, transactional: true, allOrNothing: true, snapshot: false });
    Migrator.register(orm);
  }
  return orm.config.getExtension('@mikro-orm/migrator') as Migrator;
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
      const done = await (await migrator(orm)).up();
      return done.map((m) => m.name);
    } finally {
      await conn.query('select pg_advisory_unlock($1)', [MIGRATION_LOCK]);
    }
  } finally {
    await knex.client.releaseConnection(conn);
  }
}

/**
 * The names of migrations not yet applied (processes that must not migrate refuse to start with
 * any), read from the migrator's table without loading the migrator: what it would answer, as
 * one query. A name recorded with a file extension counts without it, as the migrator counts it.
 */
export async function pendingMigrations(orm: MikroORM): Promise<string[]> {
  const [table] = await orm.em.getConnection().execute<{ exists: boolean }[]>(`select to_regclass('${MIGRATIONS_TABLE}') is not null as exists`);
  if (!table?.exists) return [...migrationNames];
  const rows = await orm.em.getConnection().execute<{ name: string }[]>(`select name from ${MIGRATIONS_TABLE}`);
  const applied = new Set(rows.map((r) => r.name.replace(/\.(js|ts)$/, '')));
  return migrationNames.filter((name) => !applied.has(name));
}
