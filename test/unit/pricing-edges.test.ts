import { describe, expect, it } from 'vitest';
import { defaults, inexactApiPrice, mediaFromPrice, mediaPrice } from '../../core/catalog/pricing.ts';
import { modelSchema, type MediaModel } from '../../core/catalog/schema.ts';

/**
 * Media prices at their edges (core/catalog/pricing.ts), which the mutation run
 * (`npm run test:mutation`) found that test/unit/pricing.test.ts does not hold: the `from`
 * price when the cheapest option is not the first, boolean and decimal settings, what a value
 * that is not a non-negative number counts for, and the defaults of a model.
 */
const media = (settings: Record<string, unknown>, pricing: Record<string, unknown>) =>
  modelSchema.parse({ id: 'm', name: 'm', type: 'image', generation_types: ['text-to-image'], provider: { name: 'p', model: 'm' }, settings, pricing }) as MediaModel;

describe('the from price', () => {
  it('is the cheapest combination wherever it comes in the options', () => {
    const model = media(
      { resolution: { type: 'enum', options: ['1080p', '720p', '480p'], default: '1080p' } },
      { base: 8, factors: { resolution: { '1080p': 2, '720p': 1, '480p': 0.5 } } },
    );
    // 8 x 0.5 = 4 in-app coins, at 50 %: 2.
    expect(mediaFromPrice(model, 50n)).toBe(2_000_000n);
  });

  it('tries both values of a boolean setting', () => {
    const model = media({ hd: { type: 'boolean', default: true } }, { base: 10, factors: { hd: { true: 3, false: 1 } } });
    expect(mediaFromPrice(model, 50n)).toBe(5_000_000n);
    expect(mediaPrice(model, { hd: true }, 50n)).toBe(15_000_000n);
    const dearFalse = media({ hd: { type: 'boolean', default: false } }, { base: 10, factors: { hd: { true: 1, false: 3 } } });
    expect(mediaFromPrice(dearFalse, 50n)).toBe(5_000_000n);
    // Neither factor is 1: the from price is the cheaper of the two, 10 x 1.5 at 50 %.
    const both = media({ hd: { type: 'boolean', default: true } }, { base: 10, factors: { hd: { true: 2, false: 1.5 } } });
    expect(mediaFromPrice(both, 50n)).toBe(7_500_000n);
  });

  it('takes a decimal setting at its minimum', () => {
    const model = media({ seconds: { type: 'number', min: 0.5, max: 10, default: 4 } }, { base: 1, per_unit: { seconds: 2 } });
    // (1 + 2 x 0.5) = 2 in-app coins, at 50 %: 1.
    expect(mediaFromPrice(model, 50n)).toBe(1_000_000n);
  });
});

describe('a value priced by', () => {
  const model = media({ seconds: { type: 'integer', min: 0, max: 10, default: 2 } }, { base: 1, per_unit: { seconds: 2 } });

  it('counts as 0 unless it is a finite number of at least 0 (or true, which counts as 1)', () => {
    const base = mediaPrice(model, { seconds: 0 }, 100n);
    expect(base).toBe(1_000_000n);
    for (const odd of ['5', -1, Number.NaN, Number.POSITIVE_INFINITY, undefined, null, false]) {
      expect(mediaPrice(model, { seconds: odd }, 100n), String(odd)).toBe(base);
    }
    expect(mediaPrice(model, { seconds: 3 }, 100n)).toBe(7_000_000n);
    expect(mediaPrice(model, { seconds: true }, 100n)).toBe(3_000_000n);
  });
});

describe('inexact API prices', () => {
  it('an in-app price whose API percentage is not a whole micro-coin is named, with why', () => {
    expect(inexactApiPrice(3n, 50n)).toMatch(/not a whole micro-coin/);
    expect(inexactApiPrice(4n, 50n)).toBeUndefined();
  });
});

describe('defaults', () => {
  it('are the settings that have a default, with it', () => {
    const model = media(
      {
        size: { type: 'enum', options: ['s', 'l'], default: 'l' },
        seed: { type: 'string' },
        steps: { type: 'integer', min: 1, max: 50, default: 20 },
      },
      { base: 1 },
    );
    expect(defaults(model)).toStrictEqual({ size: 'l', steps: 20 });
  });
});
