import { LockMode, type EntityManager } from '@mikro-orm/postgresql';
import { z } from 'zod';
import { CoreError, notFound } from '../errors.ts';
import { newId } from '../ids.ts';
import { coinsToJson } from '../money/coins.ts';
import { coinsSchema, isoTimeSchema } from '../views.ts';
import { ApiKey } from './api-key.entity.ts';
import { displayPrefix, generateKeySecret, hashKey } from './key-secret.ts';
import { keyLimitsInput, parseKeyLimits, type KeyLimitsInput } from './limits.ts';

/**
 * SPEC part 8: at most 10 keys exist per account (revoked ones do not count). The keys of
 * connected apps are not among them: apps have their own limit (core/oauth/authorize.ts).
 */
export const MAX_ACTIVE_KEYS = 10;

export const createKeyInput = z.object({
  name: z.string().trim().min(1).max(100).optional(),
  ...keyLimitsInput.shape,
});

export const keyIdInput = z.object({ id: z.string().trim().regex(/^key_[0-9A-Za-z]{1,64}$/, 'must be a key id such as key_…') });

/** An update of a key: its name, limits and whether it is disabled; a field left out keeps its value, `null` removes a limit. */
export const updateKeyInput = keyIdInput.extend({
  name: z.string().trim().min(1).max(100).optional(),
  ...keyLimitsInput.shape,
  disabled: z.boolean().optional(),
});

/** What a key has spent: captured in its period (the limit's; this calendar month, UTC, without a limit), in all, and held by open requests. */
export interface KeyUsage {
  periodSpent: bigint;
  totalSpent: bigint;
  held: bigint;
}
const NO_USAGE: KeyUsage = { periodSpent: 0n, totalSpent: 0n, held: 0n };

const limitFields = {
  spend_limit_coins: coinsSchema.nullable().describe('the most the key may spend in its period; null: no limit'),
  spend_limit_period: z.enum(['total', 'monthly']).nullable().describe('total: over the key’s life; monthly: per calendar month, UTC'),
  expires_at: isoTimeSchema.nullable().describe('after this the key is refused (401); null: never'),
  allowed_models: z.array(z.string()).nullable().describe('the models the key may use; null: all'),
  usage_coins: coinsSchema.describe('spent (charged) in the current period: the limit’s, or this calendar month (UTC) without a limit'),
  total_spent_coins: coinsSchema.describe('spent over the key’s life'),
  held_coins: coinsSchema.describe('reserved by requests still running'),
  remaining_coins: coinsSchema.nullable().describe('what the limit leaves: limit − usage − held, at least 0; null: no limit'),
};

export const keySchema = z
  .object({
    id: z.string(),
    object: z.literal('api_key'),
    name: z.string(),
    prefix: z.string().describe('the start of the secret, to recognise the key'),
    created_at: isoTimeSchema,
    last_used_at: isoTimeSchema.nullable(),
    revoked_at: isoTimeSchema.nullable(),
    type: z.enum(['standard', 'management']).describe('standard: calls models; management: manages keys and organizations'),
    organization_id: z.string().nullable().describe('the organization whose wallet the key spends from; null: the personal wallet'),
    user_id: z.string().describe('the person the key belongs to'),
    disabled: z.boolean().describe('a disabled key is refused (401) until enabled again'),
    ...limitFields,
  })
  .strict();

/** The calling key, as `GET /api/v1/key` shows it (OpenRouter's `GET /key`, in this API's shape). */
export const keyInfoSchema = z
  .object({
    id: z.string(),
    object: z.literal('key'),
    name: z.string(),
    prefix: z.string().describe('the start of the secret, to recognise the key'),
    created_at: isoTimeSchema,
    ...limitFields,
  })
  .strict();

/** A key just created: the only time its secret is shown. */
export const createdKeySchema = keySchema.extend({ key: z.string().describe('the secret, shown only this once') }).strict();

export function keyView(k: ApiKey, usage: KeyUsage = NO_USAGE): z.infer<typeof keySchema> {
  return {
    id: k.id,
    object: 'api_key' as const,
    name: k.name,
    prefix: k.prefix,
    created_at: k.createdAt.toISOString(),
    last_used_at: k.lastUsedAt?.toISOString() ?? null,
    revoked_at: k.revokedAt?.toISOString() ?? null,
    type: k.kind === 'management' ? ('management' as const) : ('standard' as const),
    organization_id: k.memberId ? k.accountId : null,
    user_id: k.memberId ?? k.accountId,
    disabled: k.disabledAt != null,
    ...limitsView(k, usage),
  };
}

function limitsView(k: ApiKey, usage: KeyUsage) {
  const limit = k.spendLimitMicro === null ? null : BigInt(k.spendLimitMicro);
  const remaining = limit === null ? null : limit - usage.periodSpent - usage.held;
  return {
    spend_limit_coins: limit === null ? null : coinsToJson(limit),
    spend_limit_period: limit === null ? null : k.spendLimitPeriod,
    expires_at: k.expiresAt?.toISOString() ?? null,
    allowed_models: k.allowedModels && k.allowedModels.length > 0 ? [...k.allowedModels] : null,
    usage_coins: coinsToJson(usage.periodSpent),
    total_spent_coins: coinsToJson(usage.totalSpent),
    held_coins: coinsToJson(usage.held),
    remaining_coins: remaining === null ? null : coinsToJson(remaining > 0n ? remaining : 0n),
  };
}

/**
 * What each key spent, from its holds (metadata key_id) through the holds_by_key index (`\\?` is
 * jsonb's `?` operator, escaped from MikroORM's placeholders): the
 * same sums mas_key_spend_room makes for the reservation, with the same period start.
 */
export async function keyUsage(em: EntityManager, keyIds: string[]): Promise<Map<string, KeyUsage>> {
  if (keyIds.length === 0) return new Map();
  const rows = await em.execute<{ id: string; period_spent: string; total_spent: string; held: string }[]>(
    `select k.id,
       coalesce((select sum(h.captured_micro) from holds h where h.metadata \\? 'key_id' and h.metadata->>'key_id' = k.id
                   and h.ended_at >= mas_key_period_start(coalesce(k.spend_limit_period, 'monthly')) and h.status = 'settled'), 0)::text as period_spent,
       coalesce((select sum(h.captured_micro) from holds h where h.metadata \\? 'key_id' and h.metadata->>'key_id' = k.id
                   and h.ended_at is not null and h.status = 'settled'), 0)::text as total_spent,
       coalesce((select sum(h.amount_micro) from holds h where h.metadata \\? 'key_id' and h.metadata->>'key_id' = k.id
                   and h.ended_at is null and h.status = 'open'), 0)::text as held
     from api_keys k where k.id = any(?::text[])`,
    [`{${keyIds.join(',')}}`],
  );
  return new Map(rows.map((r) => [r.id, { periodSpent: BigInt(r.period_spent), totalSpent: BigInt(r.total_spent), held: BigInt(r.held) }]));
}

/** The calling key with its limits and usage (`GET /api/v1/key`). */
export async function keyInfo(em: EntityManager, keyId: string): Promise<z.infer<typeof keyInfoSchema>> {
  const key = await em.findOne(ApiKey, { id: keyId });
  if (!key) throw notFound('key_not_found', `No API key ${keyId}.`);
  const usage = (await keyUsage(em, [key.id])).get(key.id) ?? NO_USAGE;
  return { id: key.id, object: 'key' as const, name: key.name, prefix: key.prefix, created_at: key.createdAt.toISOString(), ...limitsView(key, usage) };
}

/**
 * Creates a key and returns its secret, which is never stored and never shown again. The
 * account row is locked while the active keys are counted, so parallel creations cannot
 * pass the limit together.
 */
export async function createKey(
  em: EntityManager,
  accountId: string,
  input: { name?: string | undefined } & KeyLimitsInput,
  checks: LimitChecks = noCatalog(),
  owner: KeyOwner = {},
) {
  const limits = await parseKeyLimits(input, checks);
  const memberId = owner.memberId ?? null;
  return em.transactional(async (tx) => {
    const locked = await tx.execute('select id from accounts where id = ? for update', [accountId]);
    if (locked.length === 0) throw notFound('account_not_found', `No account ${accountId}.`);
    // SPEC part 8's 10 keys: per account, and per member of an organization (docs/organizations.md).
    const active = await tx.count(ApiKey, { accountId, memberId, revokedAt: null, kind: { $in: ['standard', 'management'] } });
    if (active >= MAX_ACTIVE_KEYS) {
      throw new CoreError(
        'limit_reached',
        memberId
          ? `You already have ${MAX_ACTIVE_KEYS} active keys in this organization, the most allowed per member. Revoke one first.`
          : `This account already has ${MAX_ACTIVE_KEYS} active API keys, the most allowed. Revoke one first.`,
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
      kind: owner.management ? 'management' : 'standard',
      memberId,
      disabledAt: null,
      spendLimitMicro: limits.spendLimitMicro ?? null,
      spendLimitPeriod: limits.spendLimitMicro ? (limits.spendLimitPeriod ?? 'total') : null,
      expiresAt: limits.expiresAt ?? null,
      allowedModels: limits.allowedModels ?? null,
    });
    await tx.flush();
    return { ...keyView(key), key: secret };
  });
}

/**
 * Whose a new key is: a key of an organization's wallet belongs to one member (`memberId`, the
 * wallet being the organization's); `management`: a management key (docs/organizations.md).
 */
export interface KeyOwner {
  memberId?: string | null;
  management?: boolean;
}

/** What checking a key's limits needs: the time expiry dates must follow, and whether a model id is in the catalog. */
export interface LimitChecks {
  now: Date;
  knownModel: (id: string) => Promise<boolean>;
}
/** For callers that set no allowed models (the demo account, tests). */
const noCatalog = (): LimitChecks => ({
  now: new Date(),
  knownModel: () => Promise.reject(new Error('a key with allowed models needs the catalog to check them')),
});

/** The account's keys; an app's key is listed with its app connection, not here. */
export async function listKeys(em: EntityManager, accountId: string) {
  const keys = await em.find(ApiKey, { accountId, kind: { $in: ['standard', 'management'] } }, { orderBy: { createdAt: 'asc', id: 'asc' } });
  const usage = await keyUsage(em, keys.map((k) => k.id));
  return { object: 'list' as const, data: keys.map((k) => keyView(k, usage.get(k.id))) };
}

/**
 * Changes a standard key's name and limits (owner only: another account's key is unknown). A
 * revoked key cannot be changed. Lowering a limit below what was already spent is allowed: the
 * key is refused from then on.
 */
export async function updateKey(em: EntityManager, accountId: string, input: z.output<typeof updateKeyInput>, checks: LimitChecks) {
  const { id: keyId, name, disabled, ...limitFields } = input;
  const change = { name };
  return em.transactional(async (tx) => {
    const key = await tx.findOne(ApiKey, { id: keyId, accountId, kind: { $in: ['standard', 'management'] } }, { lockMode: LockMode.PESSIMISTIC_WRITE });
    if (!key) throw notFound('key_not_found', `No API key ${keyId}.`, 'id');
    if (key.revokedAt) throw new CoreError('conflict', `The API key ${keyId} is revoked; a revoked key cannot be changed.`, { reason: 'key_revoked', param: 'id' });
    const limits = await parseKeyLimits(limitFields, { ...checks, currentPeriod: key.spendLimitPeriod });
    if (change.name !== undefined) key.name = change.name;
    if (limits.spendLimitMicro !== undefined) key.spendLimitMicro = limits.spendLimitMicro;
    if (limits.spendLimitPeriod !== undefined) key.spendLimitPeriod = limits.spendLimitPeriod;
    if (limits.expiresAt !== undefined) key.expiresAt = limits.expiresAt;
    if (limits.allowedModels !== undefined) key.allowedModels = limits.allowedModels;
    if (disabled !== undefined && disabled !== (key.disabledAt != null)) key.disabledAt = disabled ? checks.now : null;
    await tx.flush();
    const usage = (await keyUsage(tx, [key.id])).get(key.id);
    return keyView(key, usage);
  });
}

/** One of the account's standard keys, with its usage. */
export async function getKey(em: EntityManager, accountId: string, keyId: string) {
  const key = await em.findOne(ApiKey, { id: keyId, accountId, kind: { $in: ['standard', 'management'] } });
  if (!key) throw notFound('key_not_found', `No API key ${keyId}.`, 'id');
  return keyView(key, (await keyUsage(em, [key.id])).get(key.id));
}

/**
 * Revokes a key; it stops working on the very next request, on every instance. Idempotent.
 * An account revokes its own keys (an app's key goes with its connection); an operator any.
 */
export async function revokeKey(em: EntityManager, keyId: string, accountId?: string) {
  await em.execute(
    `update api_keys set revoked_at = now() where id = ? and revoked_at is null and (?::text is null or (account_id = ? and kind in ('standard', 'management')))`,
    [keyId, accountId ?? null, accountId ?? null],
  );
  const key = await em.findOne(ApiKey, accountId ? { id: keyId, accountId, kind: { $in: ['standard', 'management'] } } : { id: keyId }, { refresh: true });
  if (!key) throw notFound('key_not_found', `No API key ${keyId}.`);
  return keyView(key);
}

