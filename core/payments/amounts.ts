import { MICRO_PER_COIN, type Micro } from '../money/coins.ts';

/**
 * Dollars and coins: 1 USD = 1000 coins, so one cent buys exactly 10 coins. Amounts of money
 * are integer cents from the moment they are read: "12.34" is 1234 cents, never 12.34.
 */
export const COINS_PER_CENT = 10n;

/** The one currency the service sells coins in: the coin is defined in US dollars. */
export const CURRENCY = 'usd';

/**
 * The largest amount Stripe charges in one payment, in cents (99,999,999 cents, 999,999.99 USD,
 * for USD, docs.stripe.com/currencies). A paid amount
 * above it, or above the operator's TOPUP_MAX_USD, is refused at the credit (`refused_amount`).
 */
export const STRIPE_MAX_CENTS = 99_999_999;

/** The largest top-up the service credits: the operator's maximum, never more than Stripe's. */
export function largestTopUpCents(bounds: { topUpMaxCents: number }): number {
  return Math.min(STRIPE_MAX_CENTS, bounds.topUpMaxCents);
}

/** What `cents` buy, in micro-coins. */
export function centsToMicro(cents: number): Micro {
  return BigInt(cents) * COINS_PER_CENT * MICRO_PER_COIN;
}

const USD = /^(\d{1,9})(?:\.(\d{1,2}))?$/;

/**
 * A dollar amount as a person writes it ("5", "12.5", "12.34", or the JSON number 12.34) in
 * cents; null when it is not one (negative, more than two decimals, not a number). A JSON number
 * is read through its shortest decimal text, which is what the sender wrote.
 */
export function parseUsdCents(value: unknown): number | null {
  const text = typeof value === 'number' ? (Number.isFinite(value) ? String(value) : '') : typeof value === 'string' ? value.trim() : '';
  const match = USD.exec(text);
  if (!match) return null;
  return Number(match[1]) * 100 + Number((match[2] ?? '').padEnd(2, '0'));
}

/** Cents as dollars with two decimals: 1234 → "12.34". */
export function formatUsd(cents: number): string {
  return `${Math.floor(cents / 100)}.${String(cents % 100).padStart(2, '0')}`;
}
