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

describe('the fal catalog examples', () => {
  const raw = { providers: { fal: { kind: 'fal', api_key_env: 'FAL_KEY' } }, models: parse(uncommented('fal models')) };
  const catalog = validateCatalog(raw, 100n);
  const model = (id: string) => catalog.parsed.models.find((m) => m.id === id) as MediaModel;

  it('load as a catalog: one image, one video, one audio and one 3D model', () => {
    expect(catalog.parsed.models.map((m) => [m.id, m.type])).toEqual([
      ['fal/flux-schnell', 'image'],
      ['fal/kling-v3-standard', 'video'],
      ['fal/stable-audio-2.5', 'audio'],
      ['fal/trellis', '3d'],
    ]);
  });

  it('price at fal list prices (1 USD = 1000 coins, at 100%)', () => {
    // $0.003 per megapixel, rounded up: a 1024x1024 image is 2 MP.
    expect(mediaPrice(model('fal/flux-schnell'), { image_size: 'landscape_4_3', num_images: 1 }, 100n)).toBe(3_000_000n);
    expect(mediaPrice(model('fal/flux-schnell'), { image_size: 'square_hd', num_images: 4 }, 100n)).toBe(24_000_000n);
    // $0.084 per second without audio, $0.126 with: 10 s with audio is $1.26.
    expect(mediaPrice(model('fal/kling-v3-standard'), { duration: '5', generate_audio: false }, 100n)).toBe(420_000_000n);
    expect(mediaPrice(model('fal/kling-v3-standard'), { duration: '10', generate_audio: true }, 100n)).toBe(1_260_000_000n);
    expect(mediaPrice(model('fal/stable-audio-2.5'), {}, 100n)).toBe(200_000_000n);
  });
});

describe('the OpenAI-compatible examples of docs/providers.md', () => {
  const doc = fs.readFileSync('docs/providers.md', 'utf8');
  const section = doc.slice(doc.indexOf('## OpenAI-compatible chat upstreams'));
  const yaml = section.slice(section.indexOf('```yaml\n') + 8, section.indexOf('```', section.indexOf('```yaml\n') + 8));
  const catalog = validateCatalog(parse(yaml), 100n);

  it('load as a catalog: Gemini, Groq, Together, Mistral, DeepSeek, vLLM and Ollama on the OpenAI-compatible adapter', () => {
    expect(Object.keys(catalog.parsed.providers)).toEqual(['gemini', 'groq', 'together', 'mistral', 'deepseek', 'vllm', 'ollama']);
    expect(new Set(Object.values(catalog.parsed.providers).map((p) => p.kind))).toEqual(new Set(['openai-compatible']));
    expect(catalog.parsed.models).toHaveLength(6);
  });

  it('carry the vendor prices named in their comments (1 USD = 1000 coins)', () => {
    const price = (id: string) => {
      const m = catalog.parsed.models.find((x) => x.id === id)!;
      return m.type === 'text' ? [m.pricing.input_per_million, m.pricing.output_per_million] : [];
    };
    expect(price('google/gemini-2.5-flash')).toEqual([300_000_000n, 2_500_000_000n]);
    expect(price('deepseek/deepseek-chat')).toEqual([270_000_000n, 1_100_000_000n]);
  });
});
