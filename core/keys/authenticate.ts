import type { EntityManager } from '@mikro-orm/postgresql';
import type { Logger } from 'pino';
import { unauthorized } from '../errors.ts';
import { hashKey, isWellFormedKey } from './key-secret.ts';

export interface Principal {
  accountId: string;
  keyId: string;
  paid: boolean;
}

/**
 * Resolves a bearer secret to its account. Every failure is the same `unauthorized` error.
 * There is no cache: the look-up is one indexed query, and a revoke must take effect on the
 * very next request on every instance.
 */
export async function authenticate(em: EntityManager, bearer: string | null, lastUsed: LastUsedRecorder): Promise<Principal> {
  if (!bearer || !isWellFormedKey(bearer)) throw unauthorized();
  const rows = await em.execute<{ key_id: string; account_id: string; paid: boolean }[]>(
    `select k.id as key_id, k.account_id, a.paid
     from api_keys k join accounts a on a.id = k.account_id
     where k.key_hash = ? and k.revoked_at is null`,
    [hashKey(bearer)],
  );
  const row = rows[0];
  if (!row) throw unauthorized();
  lastUsed.touch(em, row.key_id);
  return { accountId: row.account_id, keyId: row.key_id, paid: row.paid };
}

/**
 * Writes `last_used_at` at most about once a minute per key, after the response path: the
 * write is not awaited, and this process skips keys it wrote recently. The SQL condition keeps
 * many instances from writing more often either.
 */
export class LastUsedRecorder {
  private readonly written = new Map<string, number>();
  private readonly intervalMs: number;
  private readonly logger: Logger;

  constructor(logger: Logger, intervalMs = 60_000) {
    this.logger = logger;
    this.intervalMs = intervalMs;
  }

  touch(em: EntityManager, keyId: string): void {
    const now = Date.now();
    const last = this.written.get(keyId);
    if (last !== undefined && now - last < this.intervalMs) return;
    this.written.set(keyId, now);
    if (this.written.size > 100_000) this.written.clear();
    em.execute(
      `update api_keys set last_used_at = now()
       where id = ? and (last_used_at is null or last_used_at < now() - make_interval(secs => ?))`,
      [keyId, Math.floor(this.intervalMs / 1000)],
    ).catch((err: unknown) => this.logger.warn({ err, keyId }, 'could not record key last use'));
  }
}
