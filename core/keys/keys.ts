import type { EntityManager } from '@mikro-orm/postgresql';
import { z } from 'zod';
import { CoreError, notFound } from '../errors.ts';
import { newId } from '../ids.ts';
import { isoTimeSchema } from '../views.ts';
import { ApiKey } from './api-key.entity.ts';
import { displayPrefix, generateKeySecret, hashKey } from './key-secret.ts';

/**
 * SPEC part 8: at most 10 keys exist per account (revoked ones do not count). The keys of
 * connected apps are not among them: apps have their own limit (core/oauth/authorize.ts).
 */
export const MAX_ACTIVE_KEYS = 10;

export const createKeyInput = z.object({
  name: z.string().trim().min(1).max(100).optional(),
});

export const keyIdInput = z.object({ id: z.string().trim().regex(/^key_[0-9A-Za-z]{1,64}$/, 'must be a key id such as key_…') });

export const keySchema = z
  .object({
    id: z.string(),
    object: z.literal('api_key'),
    name: z.string(),
    prefix: z.string().describe('the start of the secret, to recognise the key'),
    created_at: isoTimeSchema,
    last_used_at: isoTimeSchema.nullable(),
    revoked_at: isoTimeSchema.nullable(),
  })
  .strict();

/** A key just created: the only time its secret is shown. */
export const createdKeySchema = keySchema.extend({ key: z.string().describe('the secret, shown only this once') }).strict();

export function keyView(k: ApiKey): z.infer<typeof keySchema> {
  return {
    id: k.id,
    object: 'api_key' as const,
    name: k.name,
    prefix: k.prefix,
    created_at: k.createdAt.toISOString(),
    last_used_at: k.lastUsedAt?.toISOString() ?? null,
    revoked_at: k.revokedAt?.toISOString() ?? null,
  };
}

/**
 * Creates a key and returns its secret, which is never stored and never shown again. The
 * account row is locked while the active keys are counted, so parallel creations cannot
 * pass the limit together.
 */
export async function createKey(em: EntityManager, accountId: string, input: z.output<typeof createKeyInput>) {
  return em.transactional(async (tx) => {
    const locked = await tx.execute('select id from accounts where id = ? for update', [accountId]);
    if (locked.length === 0) throw notFound('account_not_found', `No account ${accountId}.`);
    const active = await tx.count(ApiKey, { accountId, revokedAt: null, kind: 'standard' });
    if (active >= MAX_ACTIVE_KEYS) {
      throw new CoreError(
        'limit_reached',
        `This account already has ${MAX_ACTIVE_KEYS} active API keys, the most allowed. Revoke one first.`,
        { reason: 'key_limit_reached' },
      );
    }
    const secret = generateKeySecret();
    const key = tx.create(ApiKey, {
      id: newId('key'),
      accountId,
      name: input.name ?? 'API key',
      prefix: displayPrefix(secret),
      keyHash: hashKey(secret),
      createdAt: new Date(),
      lastUsedAt: null,
      revokedAt: null,
      kind: 'standard',
    });
    await tx.flush();
    return { ...keyView(key), key: secret };
  });
}

/** The account's keys; an app's key is listed with its app connection, not here. */
export async function listKeys(em: EntityManager, accountId: string) {
  const keys = await em.find(ApiKey, { accountId, kind: 'standard' }, { orderBy: { createdAt: 'asc', id: 'asc' } });
  return { object: 'list' as const, data: keys.map(keyView) };
}

/**
 * Revokes a key; it stops working on the very next request, on every instance. Idempotent.
 * An account revokes its own keys (an app's key goes with its connection); an operator any.
 */
export async function revokeKey(em: EntityManager, keyId: string, accountId?: string) {
  await em.execute(
    `update api_keys set revoked_at = now() where id = ? and revoked_at is null and (?::text is null or (account_id = ? and kind = 'standard'))`,
    [keyId, accountId ?? null, accountId ?? null],
  );
  const key = await em.findOne(ApiKey, accountId ? { id: keyId, accountId, kind: 'standard' } : { id: keyId }, { refresh: true });
  if (!key) throw notFound('key_not_found', `No API key ${keyId}.`);
  return keyView(key);
}

