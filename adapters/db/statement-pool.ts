import { createHash } from 'node:crypto';
import type { MikroORM } from '@mikro-orm/postgresql';
import type { Logger } from 'pino';
import pg from 'pg';
import type { Execute } from '../../core/db/batch.ts';

export interface StatementPool {
  execute: Execute;
  close(): Promise<void>;
}

/**
 * A few connections of their own for the hot path's batched statements (key look-ups,
 * reserves, settles), each run as a named prepared statement: parsed and planned once per
 * connection instead of on every call, and without the ORM's query layer. At most one
 * statement of each kind is in flight per process (see statementBatcher), so a handful of
 * connections is enough. Errors come out as MikroORM's exceptions, like every other query's.
 */
export function statementPool(orm: MikroORM, opts: { max?: number; logger?: Logger; statementTimeoutMs?: number } = {}): StatementPool {
  const pool = new pg.Pool({
    connectionString: orm.config.get('clientUrl'),
    max: opts.max ?? 4,
    idleTimeoutMillis: 30_000,
    allowExitOnIdle: true,
    application_name: 'mas-statements',
    // Statements of a kind run one at a time per process: one stuck behind a lock must not hold
    // up every chat request for long. It fails (503) and the next batch goes on.
    statement_timeout: opts.statementTimeoutMs ?? 10_000,
  });
  // An idle connection that breaks is dropped by the pool; the next statement opens another.
  pool.on('error', (err) => opts.logger?.warn({ err }, 'a pooled database connection failed while idle'));
  const converter = orm.em.getPlatform().getExceptionConverter();
  const names = new Map<string, string>();
  return {
    async execute<T>(sql: string, params: unknown[]): Promise<T[]> {
      let name = names.get(sql);
      if (!name) {
        name = `mas_${createHash('sha256').update(sql).digest('hex').slice(0, 20)}`;
        names.set(sql, name);
      }
      try {
        return (await pool.query({ name, text: sql, values: params })).rows as T[];
      } catch (err) {
        throw converter.convertException(err as Error);
      }
    },
    close: () => pool.end(),
  };
}
