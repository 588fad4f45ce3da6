import { createHash } from 'node:crypto';
import type { EntityManager } from '@mikro-orm/postgresql';
import { z } from 'zod';
import { CoreError } from './errors.ts';

/**
 * Idempotency keys, as Stripe has them: the same key and body from the same account get the
 * first response back and act once, even when the requests arrive in parallel; the same key
 * with another body is 422. Keys are kept at least 24 hours. Parallel requests take turns on
 * a PostgreSQL advisory lock held by the transaction that does the work, so the work and the
 * stored response commit together.
 */
export const idempotencyKeySchema = z
  .string()
  .min(1)
  .max(255)
  .regex(/^[\x21-\x7e]+$/, 'must be 1 to 255 printable ASCII characters without spaces');

export const KEEP_HOURS = 24;

export interface Stored<T> {
  result: T;
  /** True when this is the stored result of an earlier call with the same key. */
  replayed: boolean;
}

export function requestHash(request: unknown): string {
  return createHash('sha256').update(canonical(request)).digest('hex');
}

/**
 * Within `tx`: returns the stored result for this key, or runs `work` (in the same
 * transaction) and stores its result (JSON).
 */
export async function idempotent<T>(
  tx: EntityManager,
  ref: { accountId: string; scope: string; key: string; hash: string },
  work: () => Promise<T>,
): Promise<Stored<T>> {
  await tx.execute('select pg_advisory_xact_lock(hashtextextended(?, 0))', [`idem:${ref.accountId}:${ref.scope}:${ref.key}`]);
  const [row] = await tx.execute<{ request_hash: string; response_body: T }[]>(
    `select request_hash, response_body from idempotency_keys
     where account_id = ? and scope = ? and key = ? and created_at > now() - make_interval(hours => ?)`,
    [ref.accountId, ref.scope, ref.key, KEEP_HOURS],
  );
  if (row) {
    if (row.request_hash !== ref.hash) {
      throw new CoreError('idempotency_conflict', 'This idempotency key was already used with a different request. Use a new key for a new request.', {
        param: 'idempotency_key',
      });
    }
    return { result: row.response_body, replayed: true };
  }
  const result = await work();
  await tx.execute(
    `insert into idempotency_keys (account_id, scope, key, request_hash, response_body) values (?, ?, ?, ?, ?::jsonb)
     on conflict (account_id, scope, key) do update set request_hash = excluded.request_hash,
       response_body = excluded.response_body, created_at = now()`,
    [ref.accountId, ref.scope, ref.key, ref.hash, JSON.stringify(result)],
  );
  return { result, replayed: false };
}

export async function forgetIdempotencyKey(em: EntityManager, ref: { accountId: string; scope: string; key: string }): Promise<void> {
  await em.execute('delete from idempotency_keys where account_id = ? and scope = ? and key = ?', [ref.accountId, ref.scope, ref.key]);
}

export async function deleteOldIdempotencyKeys(em: EntityManager): Promise<number> {
  const rows = await em.execute<{ n: number }[]>(
    `with gone as (delete from idempotency_keys where created_at < now() - make_interval(hours => ?) returning 1) select count(*)::int as n from gone`,
    [KEEP_HOURS + 1],
  );
  return rows[0]!.n;
}

function canonical(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonical).join(',')}]`;
  if (value && typeof value === 'object') {
    return `{${Object.keys(value)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canonical((value as Record<string, unknown>)[k])}`)
      .join(',')}}`;
  }
  return JSON.stringify(value) ?? 'null';
}
