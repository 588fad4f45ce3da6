import { divCeil, parseCoins, type Micro } from '../money/coins.ts';
import type { MediaModel, SettingSpec, TextModel } from './schema.ts';

/**
 * The one place prices are computed. The catalog holds in-app prices; the API price is
 * `apiPricePercent` of them (SPEC: 50%). The same functions give the price the API shows,
 * the amount reserved and the amount charged. All arithmetic is on bigint; a charge is
 * rounded up to a whole micro-coin once, at the end.
 */
const MILLION = 1_000_000n;
/** Factors and setting values are decimals with 6 places, held as integers scaled by 1e6. */
const SCALE = 1_000_000n;

export interface TextPrices {
  /** API price in micro-coins per million input tokens. */
  inputPerMillion: Micro;
  /** API price in micro-coins per million output tokens. */
  outputPerMillion: Micro;
}

/** Exact API prices of a text model. A catalog whose API price is not a whole micro-coin per million is refused at load. */
export function textPrices(model: TextModel, apiPricePercent: bigint): TextPrices {
  return {
    inputPerMillion: applyPercent(model.pricing.input_per_million, apiPricePercent),
    outputPerMillion: applyPercent(model.pricing.output_per_million, apiPricePercent),
  };
}

export function textCost(prices: TextPrices, inputTokens: number, outputTokens: number): Micro {
  return divCeil(BigInt(inputTokens) * prices.inputPerMillion + BigInt(outputTokens) * prices.outputPerMillion, MILLION);
}

export function applyPercent(inAppMicro: Micro, percent: bigint): Micro {
  return divCeil(inAppMicro * percent, 100n);
}

/** Why an in-app price cannot be shown exactly at the API percentage, or undefined when it can. */
export function inexactApiPrice(inAppMicro: Micro, percent: bigint): string | undefined {
  return (inAppMicro * percent) % 100n === 0n ? undefined : 'its API price is not a whole micro-coin (use fewer decimals)';
}

/** The API price of one media job with these (validated, defaults filled) settings. */
export function mediaPrice(model: MediaModel, settings: Record<string, unknown>, apiPricePercent: bigint): Micro {
  const p = model.pricing;
  let numerator = p.base * SCALE;
  let denominator = SCALE;
  for (const [key, perUnit] of Object.entries(p.per_unit)) numerator += perUnit * scaled(settings[key]);
  for (const [key, table] of Object.entries(p.factors)) {
    numerator *= table[String(settings[key])] ?? SCALE;
    denominator *= SCALE;
  }
  for (const key of p.multiply_by) {
    numerator *= scaled(settings[key]);
    denominator *= SCALE;
  }
  return divCeil(numerator * apiPricePercent, denominator * 100n);
}

/** The cheapest setting combination's API price: the `from` price of a media model. */
export function mediaFromPrice(model: MediaModel, apiPricePercent: bigint): Micro {
  const keys = [...new Set([...Object.keys(model.pricing.per_unit), ...model.pricing.multiply_by, ...Object.keys(model.pricing.factors)])];
  let combos: Record<string, unknown>[] = [defaults(model)];
  for (const key of keys) {
    const candidates = candidateValues(model.settings[key]);
    combos = combos.flatMap((c) => candidates.map((v) => ({ ...c, [key]: v })));
    if (combos.length > 100_000) break;
  }
  return combos.reduce<Micro | undefined>((min, c) => {
    const price = mediaPrice(model, c, apiPricePercent);
    return min === undefined || price < min ? price : min;
  }, undefined) ?? 0n;
}

export function defaults(model: MediaModel | TextModel): Record<string, unknown> {
  return Object.fromEntries(
    Object.entries(model.settings)
      .filter(([, s]) => s.default !== undefined)
      .map(([k, s]) => [k, s.default]),
  );
}

/** Prices only ever grow with a numeric setting's value, so its minimum is the only candidate. */
function candidateValues(s: SettingSpec | undefined): unknown[] {
  if (!s) return [undefined];
  switch (s.type) {
    case 'enum':
      return s.options;
    case 'boolean':
      return [true, false];
    case 'integer':
    case 'number':
      return [s.min];
    default:
      return [s.default];
  }
}

function scaled(value: unknown): bigint {
  if (typeof value === 'number' && Number.isFinite(value) && value >= 0) return parseCoins(String(value));
  if (typeof value === 'boolean') return value ? SCALE : 0n;
  return 0n;
}
