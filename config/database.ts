import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { MikroORM } from '@mikro-orm/postgresql';
import type { Logger } from 'pino';
import { startEmbeddedPostgres } from '../adapters/embedded/postgres.ts';
import { openOrm, pendingMigrations } from '../core/orm.ts';
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
    const pending = await pendingMigrations(orm);
    if (migrations === 'apply' || embedded) {
      const applied = pending.length > 0 ? await migrateApart(url) : [];
      if (applied.length > 0) logger.info({ migrations: applied }, 'applied database migrations');
    } else {
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

/**
 * Applies the pending migrations in a process of its own (config/migration-process.ts, given the
 * database as its DATABASE_URL, as the worker process is), on a connection of its own, under the
 * same advisory lock as `migrate`: the migrator and the migrations' code load there and leave
 * with it, so that a long-running process that migrated at its start does not keep them. Not a
 * worker thread: what the thread's allocations took stays with the process after the thread
 * ends (one probe each, the idle API of `npm start` on a fresh DATA_DIR: 177 MiB RSS migrating
 * in-process, 175 in a thread, 168 in a process; bench/RESULTS.md, "Memory"). Returns the names
 * it applied (none when another process applied them first).
 */
export async function migrateApart(url: string): Promise<string[]> {
  // From the sources (tests, tsx) the child runs the .ts file through tsx; from dist/ the .js.
  const fromSources = import.meta.url.endsWith('.ts');
  const entry = fileURLToPath(new URL(fromSources ? './migration-process.ts' : './migration-process.js', import.meta.url));
  const child = spawn(process.execPath, fromSources ? ['--import', 'tsx', entry] : [entry], {
    env: { ...process.env, DATABASE_URL: url },
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  return new Promise<string[]>((resolve, reject) => {
    let answer: MigrationAnswer | undefined;
    child.once('message', (a: MigrationAnswer) => (answer = a));
    child.once('error', reject);
    child.once('exit', (code, signal) => {
      if (answer?.applied) resolve(answer.applied);
      else if (answer?.error) reject(Object.assign(new Error(answer.error.message), answer.error.props, { stack: answer.error.stack }));
      else reject(new Error(`the migration process exited (${signal ?? code}) before it had migrated`));
    });
  });
}

interface MigrationAnswer {
  applied?: string[];
  error?: { message: string; stack?: string; props: Record<string, unknown> };
}
