import { z } from 'zod';
import { invalid } from '../errors.ts';
import { InvalidAmountError, parseCoins, type Micro } from '../money/coins.ts';

/**
 * The limits a person (or an operator) sets on a standard API key, beyond the account-wide ones
 * (docs/api.md, "Key limits"):
 * - a spend limit in coins, over the key's life (`total`) or per calendar month in UTC
 *   (`monthly`), enforced inside the reservation (mas_reserve, mas_reserve_many), so that
 *   concurrent requests cannot pass it together;
 * - an expiry date, after which the key is refused like a revoked one (core/auth/api-keys.ts);
 * - the models it may use (none listed: all), checked where a model is resolved for a request.
 */

/** The largest spend limit accepted, in coins: far above any real use, far below bigint's range. */
export const MAX_SPEND_LIMIT_COINS = 100_000_000n;
/** At most this many models on a key's list. */
export const MAX_ALLOWED_MODELS = 100;

/**
 * The limit fields as a client sends them. In an update, a field left out keeps its value;
 * `null` (or an empty string from a form) removes the limit.
 */
export const keyLimitsInput = z.object({
  spend_limit_coins: z.union([z.string().trim().max(30), z.number(), z.null()]).optional(),
  spend_limit_period: z.enum(['total', 'monthly']).optional(),
  expires_at: z.union([z.string().trim().max(40), z.null()]).optional(),
  allowed_models: z.union([z.array(z.string().trim().min(1).max(200)).max(MAX_ALLOWED_MODELS), z.null()]).optional(),
});
export type KeyLimitsInput = z.output<typeof keyLimitsInput>;

/** The limits as stored; `undefined`: the field was not sent (an update leaves it as it is). */
export interface KeyLimits {
  spendLimitMicro?: Micro | null;
  spendLimitPeriod?: 'total' | 'monthly' | null;
  expiresAt?: Date | null;
  allowedModels?: string[] | null;
}

/**
 * Checks the limit fields and turns them into stored values. `knownModel` says whether a model
 * id names a model of the catalog (open to requests); `now` is the time expiry dates must follow.
 */
export async function parseKeyLimits(input: KeyLimitsInput, opts: { now: Date; knownModel: (id: string) => Promise<boolean>; currentPeriod?: 'total' | 'monthly' | null }): Promise<KeyLimits> {
  const out: KeyLimits = {};
  const limit = input.spend_limit_coins;
  if (limit !== undefined) {
    out.spendLimitMicro = limit === null || limit === '' ? null : spendLimit(limit);
    out.spendLimitPeriod = out.spendLimitMicro === null ? null : (input.spend_limit_period ?? opts.currentPeriod ?? 'total');
  } else if (input.spend_limit_period !== undefined) {
    // A new period for the limit the key already has; without a limit there is nothing to count.
    if (!opts.currentPeriod) throw invalid('spend_limit_period', "A period needs a spend limit: send 'spend_limit_coins' too.");
    out.spendLimitPeriod = input.spend_limit_period;
  }
  if (input.expires_at !== undefined) out.expiresAt = input.expires_at === null || input.expires_at === '' ? null : expiry(input.expires_at, opts.now);
  if (input.allowed_models !== undefined) {
    const models = input.allowed_models === null ? [] : [...new Set(input.allowed_models)];
    for (const [i, id] of models.entries()) {
      if (!(await opts.knownModel(id))) throw invalid(`allowed_models.${i}`, `Invalid value for 'allowed_models': the model '${id}' does not exist.`, 'model_not_found');
    }
    out.allowedModels = models.length === 0 ? null : models.sort();
  }
  return out;
}

function spendLimit(raw: string | number): Micro {
  let micro: Micro;
  try {
    micro = parseCoins(String(raw));
  } catch (err) {
    if (err instanceof InvalidAmountError) throw invalid('spend_limit_coins', "Invalid value for 'spend_limit_coins': a number of coins such as 50 or 12.5, or empty for no limit.");
    throw err;
  }
  if (micro <= 0n) throw invalid('spend_limit_coins', "Invalid value for 'spend_limit_coins': more than 0 coins, or empty for no limit.");
  if (micro > MAX_SPEND_LIMIT_COINS * 1_000_000n) throw invalid('spend_limit_coins', `Invalid value for 'spend_limit_coins': at most ${MAX_SPEND_LIMIT_COINS} coins.`);
  return micro;
}

/** An ISO 8601 date (`2027-01-31`, the end of that day in UTC) or date and time with a zone, in the future. */
function expiry(raw: string, now: Date): Date {
  const dateOnly = /^\d{4}-\d{2}-\d{2}$/.test(raw);
  const withZone = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}:\d{2})$/.test(raw);
  const at = dateOnly ? new Date(`${raw}T23:59:59.999Z`) : withZone ? new Date(raw) : new Date(Number.NaN);
  if (Number.isNaN(at.getTime()) || (dateOnly && at.toISOString().slice(0, 10) !== raw)) {
    throw invalid('expires_at', "Invalid value for 'expires_at': a date such as 2027-01-31, or a date and time with its zone such as 2027-01-31T12:00:00Z.");
  }
  if (at.getTime() <= now.getTime()) throw invalid('expires_at', "Invalid value for 'expires_at': it must be in the future.");
  if (at.getUTCFullYear() > 9999) throw invalid('expires_at', "Invalid value for 'expires_at': too far in the future.");
  return at;
}
