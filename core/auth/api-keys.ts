import type DataLoader from 'dataloader';
import { LRUCache } from 'lru-cache';
import type { Logger } from 'pino';
import { statementBatcher, type Execute } from '../db/batch.ts';
import { CoreError, keyDisabled, keyExpired, unauthorized } from '../errors.ts';
import { hashKey, isWellFormedKey } from '../keys/key-secret.ts';
import type { KeyPrincipal, ManagementPrincipal } from './principals.ts';

/** Active keys of accounts that are not disabled (nor, for an organization's key, its member), by secret hash, for a batch of hashes given as a text[] literal. */
export const KEY_LOOKUP_SQL = `select k.key_hash, k.id as key_id, k.account_id, a.paid, k.expires_at, k.allowed_models, k.kind, k.member_id, k.disabled_at
  from api_keys k join accounts a on a.id = k.account_id
  where k.key_hash = any($1::text[]) and k.revoked_at is null and a.disabled_at is null
    and (k.member_id is null or not exists (select 1 from accounts p where p.id = k.member_id and p.disabled_at is not null))`;

/** An active key; `expires_at` is checked at each use (a key found before its expiry may be cached past it), `allowed_models` null: all. */
export type KeyRow = {
  key_hash: string;
  key_id: string;
  account_id: string;
  paid: boolean;
  expires_at?: Date | string | null;
  allowed_models?: string[] | null;
  /** `management`: a management key, refused where models are called (and the only kind taken where keys are managed). */
  kind?: string;
  /** The person owning a key of an organization's wallet; null on a personal key. */
  member_id?: string | null;
  /** A disabled key is found (its holder is told it is disabled), never cached. */
  disabled_at?: Date | string | null;
};

/**
 * Finds active keys by the hash of their secret. Concurrent look-ups share one indexed query
 * (statementBatcher).
 *
 * `find` always asks the database: a revoke takes effect on the very next request on every
 * instance. `findRecent` may answer from a small cache of keys of paid accounts seen in the
 * last minutes, for the chat hot path, whose reservation checks the key again in the same
 * statement. Keys of unpaid accounts are not cached, so that a first top-up is seen at once
 * (a paid account never becomes unpaid); a key id's account never changes. A revoked key or a
 * disabled account leaves every instance's cache when PostgreSQL announces it (core/changes.ts);
 * the one-minute TTL is the safety net should a notice be lost.
 */
export class KeyLookup {
  private readonly loader: DataLoader<string, KeyRow | null>;
  private readonly recent: LRUCache<string, KeyRow>;

  constructor(execute: Execute, opts: { cacheSize?: number; cacheTtlMs?: number } = {}) {
    this.recent = new LRUCache({ max: opts.cacheSize ?? 10_000, ttl: opts.cacheTtlMs ?? 60_000 });
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

  /** The active key with this hash, from the database; the cache learns the answer. */
  async find(keyHash: string): Promise<KeyRow | null> {
    const row = await this.loader.load(keyHash);
    if (row?.paid && !row.disabled_at && row.kind !== 'management') this.recent.set(keyHash, row);
    else this.recent.delete(keyHash);
    return row;
  }

  /** Drops the cached keys that match (a revoked key, a disabled account's keys, or all). */
  forget(matches: (row: KeyRow) => boolean): void {
    for (const [hash, row] of this.recent.entries()) if (matches(row)) this.recent.delete(hash);
  }

  /** The key from the cache of recent look-ups when it is there, else as `find`. */
  async findRecent(keyHash: string): Promise<{ row: KeyRow | null; fromCache: boolean }> {
    const cached = this.recent.get(keyHash);
    if (cached) return { row: cached, fromCache: true };
    return { row: await this.find(keyHash), fromCache: false };
  }
}

/**
 * Resolves a bearer secret to its account. Every failure is the same `unauthorized` error, but
 * for a key past its expiry date, whose holder is told so (`api_key_expired`).
 * With `recent`, the key may come from the cache of recent look-ups (`fromCache`).
 */
export async function authenticate(
  keys: KeyLookup,
  bearer: string | null,
  lastUsed: LastUsedRecorder,
  opts: { recent?: boolean; now?: Date } = {},
): Promise<KeyPrincipal> {
  if (!bearer || !isWellFormedKey(bearer)) throw unauthorized();
  const hash = hashKey(bearer);
  const { row: found, fromCache } = opts.recent ? await keys.findRecent(hash) : { row: await keys.find(hash), fromCache: false };
  const row = checkedRow(found, opts.now);
  if (row.kind === 'management') throw managementKeyRefused();
  lastUsed.touch(row.key_id);
  return {
    kind: 'api_key',
    accountId: row.account_id,
    keyId: row.key_id,
    paid: row.paid,
    fromCache,
    ...(row.allowed_models && row.allowed_models.length > 0 ? { allowedModels: row.allowed_models } : {}),
  };
}

/**
 * Resolves a management key (docs/organizations.md) for the routes that manage keys and
 * organizations. An inference key there is refused (403), as a management key is where models
 * are called; every other failure is the one `unauthorized`. Always asked of the database.
 */
export async function authenticateManagement(keys: KeyLookup, bearer: string | null, lastUsed: LastUsedRecorder, now?: Date): Promise<ManagementPrincipal> {
  if (!bearer || !isWellFormedKey(bearer)) throw unauthorized();
  const row = checkedRow(await keys.find(hashKey(bearer)), now);
  if (row.kind !== 'management') {
    throw new CoreError('forbidden', 'This route needs a management key; an API key for models cannot manage keys or organizations. Create a management key on the API keys page.', { reason: 'management_key_required' });
  }
  lastUsed.touch(row.key_id);
  const member = row.member_id ?? null;
  return { kind: 'management', accountId: row.account_id, keyId: row.key_id, personId: member ?? row.account_id, organizationId: member ? row.account_id : null };
}

/** Refused where models are called: a management key only manages. */
const managementKeyRefused = () =>
  new CoreError('forbidden', 'A management key cannot call models: it only manages keys and organizations. Use an API key made for requests.', { reason: 'management_key_not_allowed' });

/** The key row, or the refusal its state calls for: unknown (401), disabled (401, saying so), expired (401, saying so). */
function checkedRow(row: KeyRow | null, now = new Date()): KeyRow {
  if (!row) throw unauthorized();
  if (row.disabled_at) throw keyDisabled();
  if (row.expires_at) {
    const expiresAt = new Date(row.expires_at);
    if (expiresAt.getTime() <= now.getTime()) throw keyExpired(expiresAt);
  }
  return row;
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
