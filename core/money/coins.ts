/**
 * Money is held as integer micro-coins (1 coin = 1,000,000 micro-coins; 1 USD = 1000 coins).
 * Nothing in a money path uses floating point: amounts are bigint, and decimal strings are
 * parsed and printed digit by digit.
 */
export type Micro = bigint;

export const MICRO_PER_COIN = 1_000_000n;

const DECIMAL = /^(\d+)(?:\.(\d+))?$/;

export class InvalidAmountError extends Error {}

/**
 * Parses a non-negative decimal amount of coins ("12", "0.5", "3.000001") to micro-coins.
 * More than six decimals is refused rather than rounded: the caller meant an exact amount.
 */
export function parseCoins(input: string): Micro {
  const text = input.trim();
  const match = DECIMAL.exec(text);
  if (!match) throw new InvalidAmountError(`"${text}" is not a non-negative decimal number of coins`);
  const whole = match[1]!;
  const fraction = match[2] ?? '';
  if (fraction.length > 6 && /[1-9]/.test(fraction.slice(6))) {
    throw new InvalidAmountError(`"${text}" has more than 6 decimals; the smallest unit is 0.000001 coin`);
  }
  return BigInt(whole) * MICRO_PER_COIN + BigInt(fraction.slice(0, 6).padEnd(6, '0'));
}

/** Prints micro-coins as a plain decimal string with at most six decimals and no trailing zeros. */
export function formatCoins(micro: Micro): string {
  const negative = micro < 0n;
  const abs = negative ? -micro : micro;
  const whole = abs / MICRO_PER_COIN;
  const fraction = (abs % MICRO_PER_COIN).toString().padStart(6, '0').replace(/0+$/, '');
  return `${negative ? '-' : ''}${whole}${fraction ? `.${fraction}` : ''}`;
}

/**
 * The JSON number the API shows for an amount. JSON.stringify prints the shortest text that
 * round-trips, so a number made from an exact decimal string with at most 6 decimals and
 * at most 15 significant digits prints back as that same string.
 */
export function coinsToJson(micro: Micro): number {
  return Number(formatCoins(micro));
}

/** Integer division rounding up: a charge is never rounded in the payer's favour by more than one micro-coin. */
export function divCeil(numerator: bigint, denominator: bigint): bigint {
  if (denominator <= 0n) throw new RangeError('denominator must be positive');
  if (numerator <= 0n) return -(-numerator / denominator);
  return (numerator + denominator - 1n) / denominator;
}
