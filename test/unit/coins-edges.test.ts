import { describe, expect, it } from 'vitest';
import { divCeil, InvalidAmountError, parseCoins } from '../../core/money/coins.ts';

/**
 * The edges of the amount helpers that the mutation run (`npm run test:mutation`) found
 * unchecked: what divCeil does with a zero or negative denominator and a negative numerator,
 * and that a malformed amount is refused as an InvalidAmountError (the callers turn exactly
 * that error into a 400 naming the field), not some other error.
 */
describe('divCeil at its edges', () => {
  it('refuses a denominator that is zero or negative', () => {
    expect(() => divCeil(1n, 0n)).toThrow(RangeError);
    expect(() => divCeil(1n, -1n)).toThrow(RangeError);
    expect(divCeil(5n, 1n)).toBe(5n);
  });

  it('rounds a negative numerator up too, toward zero', () => {
    expect(divCeil(-3n, 3n)).toBe(-1n);
    expect(divCeil(-7n, 2n)).toBe(-3n);
    expect(divCeil(-1n, 3n)).toBe(0n);
  });
});

describe('parseCoins refusals', () => {
  it('refuses a malformed amount with an InvalidAmountError that quotes it', () => {
    for (const bad of ['', 'abc', '-1', '1e3', '.5']) {
      expect(() => parseCoins(bad)).toThrow(InvalidAmountError);
    }
    expect(() => parseCoins('abc')).toThrow(/"abc"/);
  });

  it('refuses a seventh decimal that is not zero, and accepts trailing zeros past the sixth', () => {
    expect(() => parseCoins('0.0000001')).toThrow(InvalidAmountError);
    expect(() => parseCoins('1.1234567')).toThrow(/more than 6 decimals/);
    expect(parseCoins('1.1234560')).toBe(1_123_456n);
    expect(parseCoins('0.000001')).toBe(1n);
  });
});
