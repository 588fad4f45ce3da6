import { describe, expect, it } from 'vitest';
import { modelSchema, type MediaModel } from '../../core/catalog/schema.ts';
import { CoreError } from '../../core/errors.ts';
import { described, validateSettings } from '../../core/generations/validate.ts';

/**
 * A setting of the wrong type says what came in (core/generations/validate.ts), for REST and
 * MCP alike: `settings: {"size": "256"}` used to get "must be one of 128, 256, 512." and no
 * word of the string. Each branch of the message, for the mutation run.
 */
const model = modelSchema.parse({
  id: 'm',
  name: 'm',
  type: 'image',
  generation_types: ['text-to-image'],
  provider: { name: 'p', model: 'm' },
  settings: {
    size: { type: 'enum', options: [128, 256, 512], default: 256 },
    style: { type: 'enum', options: ['vivid', 'natural'], default: 'vivid' },
    mixed: { type: 'enum', options: ['auto', 1], default: 'auto' },
    steps: { type: 'integer', min: 1, max: 50, default: 20 },
    strength: { type: 'number', min: 0, max: 1, default: 0.5 },
    hd: { type: 'boolean', default: false },
    negative: { type: 'string', max_length: 5 },
  },
  pricing: { base: 1 },
}) as MediaModel;

function refusal(settings: Record<string, unknown>): { param: string | undefined; message: string } {
  try {
    validateSettings(model, settings);
  } catch (err) {
    expect(err).toBeInstanceOf(CoreError);
    return { param: (err as CoreError).param, message: (err as CoreError).message };
  }
  throw new Error('accepted');
}

describe('a setting of the wrong type says what it got', () => {
  it.each<[string, Record<string, unknown>, string, string]>([
    ['a string for a number option', { size: '256' }, 'settings.size', `Invalid value for 'settings.size': must be one of the numbers 128, 256, 512, got the string "256".`],
    ['a number for a string option', { style: 1 }, 'settings.style', `Invalid value for 'settings.style': must be one of the strings "vivid", "natural", got the number 1.`],
    ['a value of the right type, not an option', { size: 300 }, 'settings.size', `Invalid value for 'settings.size': must be one of 128, 256, 512, got the number 300.`],
    ['a string of the right type, not an option', { style: 'dark' }, 'settings.style', `Invalid value for 'settings.style': must be one of "vivid", "natural", got the string "dark".`],
    ['options of two types', { mixed: true }, 'settings.mixed', `Invalid value for 'settings.mixed': must be one of "auto", 1, got the boolean true.`],
    ['a string for an integer', { steps: '20' }, 'settings.steps', `Invalid value for 'settings.steps': must be a number, got the string "20".`],
    ['a fraction for an integer', { steps: 2.5 }, 'settings.steps', `Invalid value for 'settings.steps': must be a whole number, got the number 2.5.`],
    ['an integer out of bounds', { steps: 51 }, 'settings.steps', `Invalid value for 'settings.steps': must be between 1 and 50, got the number 51.`],
    ['a number below its bounds', { strength: -0.5 }, 'settings.strength', `Invalid value for 'settings.strength': must be between 0 and 1, got the number -0.5.`],
    ['null for a number', { strength: null }, 'settings.strength', `Invalid value for 'settings.strength': must be a number, got null.`],
    ['too many decimals', { strength: 0.1234567 }, 'settings.strength', `Invalid value for 'settings.strength': has more than 6 decimals.`],
    ['a string for a boolean', { hd: 'true' }, 'settings.hd', `Invalid value for 'settings.hd': must be true or false, got the string "true".`],
    ['a number for a boolean', { hd: 1 }, 'settings.hd', `Invalid value for 'settings.hd': must be true or false, got the number 1.`],
    ['a list for a string', { negative: ['x'] }, 'settings.negative', `Invalid value for 'settings.negative': must be a string, got a list.`],
    ['an object for a string', { negative: { x: 1 } }, 'settings.negative', `Invalid value for 'settings.negative': must be a string, got an object.`],
    ['a string too long', { negative: 'abcdef' }, 'settings.negative', `Invalid value for 'settings.negative': must be at most 5 characters, got 6.`],
  ])('%s', (_name, settings, param, message) => {
    expect(refusal(settings)).toEqual({ param, message });
  });

  it('accepts every value of the right type within its options or bounds', () => {
    expect(validateSettings(model, { size: 512, style: 'natural', mixed: 1, steps: 50, strength: 1, hd: true, negative: 'abcde' })).toEqual({
      size: 512,
      style: 'natural',
      mixed: 1,
      steps: 50,
      strength: 1,
      hd: true,
      negative: 'abcde',
    });
  });

  it('refuses a string setting holding U+0000 (kept in JSONB, which cannot hold it), naming the setting', () => {
    expect(refusal({ negative: 'a\u0000b' })).toEqual({ param: 'settings.negative', message: expect.stringContaining('NUL character') });
  });

    it('names a long string by its first 40 characters', () => {
    expect(described('x'.repeat(41))).toBe(`the string "${'x'.repeat(40)}…"`);
    expect(described('x'.repeat(40))).toBe(`the string "${'x'.repeat(40)}"`);
    expect(described(false)).toBe('the boolean false');
  });
});
