import type DataLoader from 'dataloader';
import type { Logger } from 'pino';
import { statementBatcher, type Execute } from '../db/batch.ts';
import { unauthorized } from '../errors.ts';
import { hashKey, isWellFormedKey } from './key-secret.ts';

export interface Principal {
  accountId: string;
  keyId: string;
  paid: boolean;
}

/** Active keys by secret hash, for a batch of hashes given as a text[] literal. */
export const KEY_LOOKUP_SQL = `select k.key_hash, k.id as key_id, k.account_id, a.paid
  from api_keys k join accounts a on a.id = k.account_id
  where k.key_hash = any($1::text[]) and k.revoked_at is null`;

type KeyRow = { key_hash: string; key_id: string; account_id: string; paid: boolean };

/**
 * Finds active keys by the hash of their secret. There is no cache: a revoke must take effect
 * on the very next request on every instance. Concurrent look-ups share one indexed query
 * (statementBatcher).
 */
export class KeyLookup {
  private readonly loader: DataLoader<string, KeyRow | null>;

  constructor(execute: Execute) {
    this.loader = statementBatcher(async (hashes) => {
      // `= any(array)`: one unique-index probe per hash, whatever the size of the table.
      // The hashes are hex, so the array literal needs no quoting.
      const unique = [...new Set(hashes)];
      if (!unique.every((h) => /^[0-9a-f]{64}$/.test(h))) throw new Error('key hashes must be SHA-256 hex');
      const rows = await execute<KeyRow>(KEY_LOOKUP_SQL, [`{${unique.join(',')}}`]);
      const byHash = new Map(rows.map((r) => [r.key_hash, r]));
      return hashes.map((h) => byHash.get(h) ?? null);
    });
  }

  find(keyHash: string): Promise<KeyRow | null> {
    return this.loader.load(keyHash);
  }
}

/** Resolves a bearer secret to its account. Every failure is the same `unauthorized` error. */
export async function authenticate(keys: KeyLookup, bearer: string | null, lastUsed: LastUsedRecorder): Promise<Principal> {
  if (!bearer || !isWellFormedKey(bearer)) throw unauthorized();
  const row = await keys.find(hashKey(bearer));
  if (!row) throw unauthorized();
  lastUsed.touch(row.key_id);
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
  private readonly execute: Execute;

  constructor(execute: Execute, logger: Logger, intervalMs = 60_000) {
    this.execute = execute;
    this.logger = logger;
    this.intervalMs = intervalMs;
  }

  touch(keyId: string): void {
    const now = Date.now();
    const last = this.written.get(keyId);
    if (last !== undefined && now - last < this.intervalMs) return;
    this.written.set(keyId, now);
    if (this.written.size > 100_000) this.written.clear();
    this.execute(
      `update api_keys set last_used_at = now()
       where id = $1 and (last_used_at is null or last_used_at < now() - make_interval(secs => $2))`,
      [keyId, Math.floor(this.intervalMs / 1000)],
    ).catch((err: unknown) => this.logger.warn({ err, keyId }, 'could not record key last use'));
  }
}
