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

  it('media: (base + per unit) x factor x count, at the API percentage', () => {
    // (10 + 4*5) * 1 * 1 = 30 in-app -> 15 coins
    expect(mediaPrice(video, { duration: 5, resolution: '720p', count: 1 }, 50n)).toBe(15_000_000n);
    // (10 + 4*10) * 2 * 3 = 300 -> 150
    expect(mediaPrice(video, { duration: 10, resolution: '1080p', count: 3 }, 50n)).toBe(150_000_000n);
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
