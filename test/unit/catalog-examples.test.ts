import fs from 'node:fs';
import { parse } from 'yaml';
import { describe, expect, it } from 'vitest';
import { validateCatalog } from '../../core/catalog/catalog.ts';
import { mediaPrice } from '../../core/catalog/pricing.ts';
import type { MediaModel } from '../../core/catalog/schema.ts';

/**
 * The commented OpenAI and ElevenLabs examples of config/models.yaml stay loadable: the blocks
 * between `# example: …` and `# end` are uncommented and validated as a catalog of their own.
 */
function uncommented(name: string): string {
  const lines = fs.readFileSync('config/models.yaml', 'utf8').split('\n');
  const start = lines.findIndex((l) => l.trim() === `# example: ${name}`);
  const end = lines.findIndex((l, i) => i > start && l.trim() === '# end');
  expect(start).toBeGreaterThan(-1);
  return lines
    .slice(start + 1, end)
    .map((l) => l.replace(/^(\s*)# ?/, '$1'))
    .join('\n');
}

describe('the OpenAI and ElevenLabs catalog examples', () => {
  const raw = { providers: parse(uncommented('openai-media providers')), models: parse(uncommented('openai-media models')) };
  const catalog = validateCatalog(raw, 100n);
  const model = (id: string) => catalog.parsed.models.find((m) => m.id === id) as MediaModel;

  it('load as a catalog: both provider kinds, five models', () => {
    expect(Object.values(catalog.parsed.providers).map((p) => p.kind)).toEqual(['openai', 'elevenlabs']);
    expect(catalog.parsed.models.map((m) => m.id)).toEqual(['openai/gpt-image-1', 'openai/gpt-image-1-edit', 'openai/tts-1', 'openai/sora-2', 'elevenlabs/multilingual-v2']);
  });

  it('price gpt-image-1 at OpenAI list prices (1 USD = 1000 coins, at 100%)', () => {
    const image = model('openai/gpt-image-1');
    expect(mediaPrice(image, { size: '1024x1024', quality: 'low' }, 100n)).toBe(11_000_000n);
    expect(mediaPrice(image, { size: '1024x1536', quality: 'medium' }, 100n)).toBe(63_000_000n);
    expect(mediaPrice(image, { size: '1536x1024', quality: 'high' }, 100n)).toBe(250_500_000n);
  });

  it('price sora-2 per second', () => {
    expect(mediaPrice(model('openai/sora-2'), { seconds: 12, size: '720x1280' }, 100n)).toBe(1_200_000_000n);
  });

  it('the edit requires its image input', () => {
    expect(model('openai/gpt-image-1-edit').inputs.image).toMatchObject({ required: true, accepts: ['image'] });
  });
});
