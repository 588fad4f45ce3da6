import { EntitySchema } from '@mikro-orm/core';

export class ApiKey {
  declare id: string;
  declare accountId: string;
  declare name: string;
  /** The first characters of the secret, enough to recognise a key in a list. */
  declare prefix: string;
  /** SHA-256 of the whole secret, hex; the secret itself is never stored. */
  declare keyHash: string;
  declare createdAt: Date;
  declare lastUsedAt: Date | null;
  declare revokedAt: Date | null;
  /**
   * `standard`: made by a person or an operator; `app`: an OAuth app connection's own key, managed
   * with the connection; `management`: manages keys and organizations, never calls models.
   */
  declare kind: 'standard' | 'app' | 'management';
  /** The person owning a key of an organization's wallet (`accountId` is the organization's); null on a personal key. */
  declare memberId: string | null;
  /** A key switched off by its owner: refused (401, saying so) until switched on again. */
  declare disabledAt: Date | null;
  /** The most the key may spend in its period, in micro-coins; null: no limit (core/keys/limits.ts). */
  declare spendLimitMicro: bigint | null;
  /** `total`: over the key's life; `monthly`: per calendar month, UTC. Set exactly when the limit is. */
  declare spendLimitPeriod: 'total' | 'monthly' | null;
  /** After this instant the key is refused like a revoked one; null: never. */
  declare expiresAt: Date | null;
  /** The model ids the key may use; null: all. */
  declare allowedModels: string[] | null;
}

export const ApiKeySchema = new EntitySchema<ApiKey>({
  class: ApiKey,
  tableName: 'api_keys',
  properties: {
    id: { type: 'string', primary: true },
    accountId: { type: 'string' },
    name: { type: 'string' },
    prefix: { type: 'string' },
    keyHash: { type: 'string', unique: true },
    createdAt: { type: 'Date', defaultRaw: 'now()', onCreate: () => new Date() },
    lastUsedAt: { type: 'Date', nullable: true },
    revokedAt: { type: 'Date', nullable: true },
    kind: { type: 'string', default: 'standard', onCreate: () => 'standard' },
    spendLimitMicro: { type: 'bigint', nullable: true },
    spendLimitPeriod: { type: 'string', nullable: true },
    expiresAt: { type: 'Date', nullable: true },
    allowedModels: { type: 'string[]', nullable: true },
    memberId: { type: 'string', nullable: true },
    disabledAt: { type: 'Date', nullable: true },
  },
});
