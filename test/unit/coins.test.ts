import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { coinsToJson, divCeil, formatCoins, parseCoins } from '../../core/money/coins.ts';

describe('coins', () => {
  it('parses decimal coins to micro-coins exactly', () => {
    expect(parseCoins('0')).toBe(0n);
    expect(parseCoins('12')).toBe(12_000_000n);
    expect(parseCoins('0.5')).toBe(500_000n);
    expect(parseCoins('3.000001')).toBe(3_000_001n);
    expect(parseCoins('1.1000000')).toBe(1_100_000n);
    expect(parseCoins(' 7 ')).toBe(7_000_000n);
  });

  it('refuses what is not an exact non-negative amount', () => {
    for (const bad of ['', '-1', '1e3', '0.0000001', 'abc', '1.', '.5', '1,5', 'NaN']) {
      expect(() => parseCoins(bad)).toThrow();
    }
  });

  it('prints at most six decimals without trailing zeros', () => {
    expect(formatCoins(0n)).toBe('0');
    expect(formatCoins(1n)).toBe('0.000001');
    expect(formatCoins(12_500_000n)).toBe('12.5');
    expect(formatCoins(-1_250_000n)).toBe('-1.25');
  });

  it('round-trips every amount through text and through the JSON number the API shows', () => {
    fc.assert(
      fc.property(fc.bigInt({ min: 0n, max: 999_999_999_999_999n }), (micro) => {
        expect(parseCoins(formatCoins(micro))).toBe(micro);
        expect(JSON.stringify(coinsToJson(micro))).toBe(formatCoins(micro));
      }),
    );
  });

  it('rounds charges up to a whole micro-coin', () => {
    expect(divCeil(10n, 3n)).toBe(4n);
    expect(divCeil(9n, 3n)).toBe(3n);
    expect(divCeil(0n, 7n)).toBe(0n);
    expect(divCeil(1n, 1_000_000n)).toBe(1n);
  });
});
