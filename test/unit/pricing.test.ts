import { describe, expect, it } from 'vitest';
import { mediaFromPrice, mediaPrice, textCost, textPrices } from '../../core/catalog/pricing.ts';
import { modelSchema, type MediaModel, type TextModel } from '../../core/catalog/schema.ts';

const text = modelSchema.parse({
  id: 'a/b', name: 'x', type: 'text', generation_types: ['chat'], provider: { name: 'p', model: 'm' },
  pricing: { input_per_million: '0.3', output_per_million: 1.2 }, context_window: 100, max_output_tokens: 10, default_max_tokens: 5,
}) as TextModel;

const video = modelSchema.parse({
  id: 'v', name: 'v', type: 'video', generation_types: ['text-to-video'], provider: { name: 'p', model: 'm' },
  settings: {
    duration: { type: 'integer', min: 2, max: 10, default: 5 },
    resolution: { type: 'enum', options: ['480p', '720p', '1080p'], default: '720p' },
    count: { type: 'integer', min: 1, max: 4, default: 1 },
  },
  pricing: { base: 10, per_unit: { duration: 4 }, factors: { resolution: { '480p': 0.5, '720p': 1, '1080p': 2 } }, multiply_by: ['count'] },
}) as MediaModel;

describe('pricing', () => {
  it('text: API prices are the percentage of in-app prices, per million tokens, exact', () => {
    expect(textPrices(text, 50n)).toEqual({ inputPerMillion: 150_000n, outputPerMillion: 600_000n });
  });

  it('text: a charge is rounded up to a whole micro-coin once', () => {
    const p = textPrices(text, 50n);
    // 3 input tokens at 0.15 coins/M = 0.45 micro; 1 output token at 0.6 coins/M = 0.6 micro -> 1.05 -> 2
    expect(textCost(p, 3, 1)).toBe(2n);
    expect(textCost(p, 0, 0)).toBe(0n);
    expect(textCost(p, 1_000_000, 1_000_000)).toBe(750_000n);
  });

  it('text: a charge with a fraction of a micro-coin is rounded up, never down or to the nearest', () => {
    // Written out: 0.3 coins/M in-app = 300_000 micro per million tokens, 50% -> 150_000;
    // 1.2 -> 1_200_000 -> 600_000. 7 input + 4 output tokens: 7 * 150_000 + 4 * 600_000 =
    // 3_450_000 millionths of a micro-coin = 3.45 micro-coins -> 4.
    expect(textCost(textPrices(text, 50n), 7, 4)).toBe(4n);
    // 1_000_001 input tokens * 150_000 = 150_000_150_000 millionths -> 150_000.15 -> 150_001.
    expect(textCost(textPrices(text, 50n), 1_000_001, 0)).toBe(150_001n);
    // Exactly whole: no rounding. 20 input tokens * 150_000 = 3_000_000 millionths = 3.
    expect(textCost(textPrices(text, 50n), 20, 0)).toBe(3n);
  });

  it('media: (base + per unit) x factor x count, at the API percentage', () => {
    // (10 + 4*5) * 1 * 1 = 30 in-app -> 15 coins
    expect(mediaPrice(video, { duration: 5, resolution: '720p', count: 1 }, 50n)).toBe(15_000_000n);
    // (10 + 4*10) * 2 * 3 = 300 -> 150
    expect(mediaPrice(video, { duration: 10, resolution: '1080p', count: 3 }, 50n)).toBe(150_000_000n);
  });

  it('media: a price that is not a whole micro-coin is rounded up to the next one', () => {
    // Every number here is a decimal the catalog allows (6 places), chosen so that the exact
    // API price has a fraction of a micro-coin. Written out in integer micro-coins:
    //   (base 0.000001 + per second 0.000002 * 3 s) = 7 micro in-app; x 50% = 3.5 -> 4.
    const audio = modelSchema.parse({
      id: 'a', name: 'a', type: 'audio', generation_types: ['text-to-audio'], provider: { name: 'p', model: 'm' },
      settings: { duration: { type: 'integer', min: 1, max: 30, default: 3 } },
      pricing: { base: '0.000001', per_unit: { duration: '0.000002' } },
    }) as MediaModel;
    expect(mediaPrice(audio, { duration: 3 }, 50n)).toBe(4n);
    //   (base 0.000001 + 0.000002 * 2 s) = 5 micro in-app; x 50% = 2.5 -> 3; at 100%, exactly 5.
    expect(mediaPrice(audio, { duration: 2 }, 50n)).toBe(3n);
    expect(mediaPrice(audio, { duration: 2 }, 100n)).toBe(5n);
    //   With a factor: 1 coin x 0.333333 = 333_333 micro in-app; x 50% = 166_666.5 -> 166_667.
    const thirds = modelSchema.parse({
      id: 't', name: 't', type: 'image', generation_types: ['text-to-image'], provider: { name: 'p', model: 'm' },
      settings: { quality: { type: 'enum', options: ['third', 'full'], default: 'full' } },
      pricing: { base: 1, factors: { quality: { third: 0.333333, full: 1 } } },
    }) as MediaModel;
    expect(mediaPrice(thirds, { quality: 'third' }, 50n)).toBe(166_667n);
    //   A factor of 0.000001 on 1 coin: 1 micro in-app; x 50% = 0.5 -> 1, never 0.
    const tiny = modelSchema.parse({
      id: 'x', name: 'x', type: 'image', generation_types: ['text-to-image'], provider: { name: 'p', model: 'm' },
      settings: { quality: { type: 'enum', options: ['tiny'], default: 'tiny' } },
      pricing: { base: 1, factors: { quality: { tiny: 0.000001 } } },
    }) as MediaModel;
    expect(mediaPrice(tiny, { quality: 'tiny' }, 50n)).toBe(1n);
  });

  it('refuses a catalog that prices by a setting which can go below zero', () => {
    const bad = modelSchema.safeParse({
      id: 'v', name: 'v', type: 'audio', generation_types: ['x'], provider: { name: 'p', model: 'm' },
      settings: { pitch: { type: 'integer', min: -5, max: 5, default: 0 } },
      pricing: { base: 1, per_unit: { pitch: 1 } },
    });
    expect(bad.success).toBe(false);
    expect(bad.error?.issues[0]?.message).toMatch(/cannot go below 0/);
  });

  it('media: the from price is the cheapest combination', () => {
    // (10 + 4*2) * 0.5 * 1 = 9 -> 4.5
    expect(mediaFromPrice(video, 50n)).toBe(4_500_000n);
  });
});
