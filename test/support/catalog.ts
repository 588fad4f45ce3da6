import type { MikroORM } from '@mikro-orm/postgresql';
import { createProviderRegistry } from '../../adapters/providers/registry.ts';
import { seedModels, validateCatalog } from '../../core/catalog/catalog.ts';
import type { ProviderRegistry } from '../../core/ports.ts';

/**
 * The test catalog. In-app prices of 2 and 4 coins per million tokens make the API prices 1
 * and 2 micro-coins per token, so expected charges are easy to write down.
 */
const text = (id: string, upstream: string, extra: Record<string, unknown> = {}) => ({
  id,
  name: id,
  type: 'text',
  generation_types: ['chat'],
  provider: { name: 'fake', model: upstream },
  pricing: { input_per_million: 2, output_per_million: 4 },
  context_window: 4096,
  max_output_tokens: 1000,
  default_max_tokens: 100,
  supported_parameters: ALL_PARAMETERS,
  ...extra,
});

const ALL_PARAMETERS = ['max_tokens', 'temperature', 'top_p', 'stop', 'seed', 'presence_penalty', 'frequency_penalty', 'tools', 'tool_choice', 'parallel_tool_calls', 'response_format', 'structured_outputs'];

export const TEST_CATALOG = {
  providers: {
    fake: { kind: 'openai-compatible', base_url: 'http://placeholder/v1', api_key_env: 'FAKE_UPSTREAM_KEY', timeout_seconds: 1 },
    local: { kind: 'local' },
    'replicate-fake': { kind: 'replicate', base_url: 'http://placeholder/v1', api_key_env: 'FAKE_REPLICATE_KEY', timeout_seconds: 5 },
  },
  models: [
    ...['ok', 'no-usage', 'over-limit', 'error', 'hang', 'stall', 'fail-mid', 'slow', 'echo-body'].map((m) => text(`test/${m}`, m)),
    text('test/premium', 'ok', { paid_only: true }),
    text('test/vendor/deep/model', 'ok'),
    // Tool calls from the fake upstream, and a model that declares no tools or structured outputs.
    text('test/tools', 'tools'),
    text('test/plain', 'ok', { supported_parameters: undefined }),
    { ...text('test/local', 'echo'), provider: { name: 'local', model: 'echo' } },
    {
      id: 'test/image',
      name: 'Test image',
      type: 'image',
      generation_types: ['text-to-image'],
      provider: { name: 'local', model: 'image' },
      settings: {
        size: { type: 'enum', options: ['512', '1024'], default: '512' },
        num_images: { type: 'integer', min: 1, max: 4, default: 1 },
      },
      pricing: { base: 10, factors: { size: { '512': 1, '1024': 2.5 } }, multiply_by: ['num_images'] },
    },
    {
      id: 'test/deadline-image',
      name: 'Image with a 2-second deadline',
      type: 'image',
      generation_types: ['text-to-image'],
      provider: { name: 'local', model: 'image' },
      // delay_ms is not declared `job_time` here: it stands for an upstream slower than the model's
      // deadline, which the catalog cannot know in advance (the deadline is what ends such a job).
      settings: { size: { type: 'enum', options: [64], default: 64 }, delay_ms: { type: 'integer', min: 0, max: 60000, default: 0 } },
      pricing: { base: 4 },
      deadline_seconds: 2,
    },
    {
      // A model whose jobs usually take 12 s (`expected_seconds`): MCP progress reports against it.
      id: 'test/timed-image',
      name: 'Image with an expected duration',
      type: 'image',
      generation_types: ['text-to-image'],
      provider: { name: 'local', model: 'image' },
      settings: { size: { type: 'enum', options: [64], default: 64 }, delay_ms: { type: 'integer', min: 0, max: 60000, default: 0, job_time: 'ms' } },
      pricing: { base: 4 },
      deadline_seconds: 120,
      expected_seconds: 12,
    },
    ...['ok', 'fail', 'slow'].map((behaviour) => ({
      id: `test/replicate-${behaviour}`,
      name: `Replicate-style upstream (${behaviour})`,
      type: 'image',
      generation_types: ['text-to-image'],
      provider: { name: 'replicate-fake', model: behaviour },
      settings: { steps: { type: 'integer', min: 1, max: 50, default: 20 } },
      inputs: { image: { accepts: ['image'] } },
      pricing: { base: 6 },
      deadline_seconds: 60,
    })),
  ],
};

/** Seeds the test models (identical in every test file) and returns providers aimed at the fake upstream. */
export async function useTestCatalog(orm: MikroORM, upstreamUrl: string): Promise<ProviderRegistry> {
  const catalog = validateCatalog(TEST_CATALOG, 50n);
  await seedModels(orm.em.fork(), catalog);
  const providers = { ...catalog.parsed.providers, fake: { ...catalog.parsed.providers.fake!, base_url: upstreamUrl } } as typeof catalog.parsed.providers;
  return createProviderRegistry(providers, { FAKE_UPSTREAM_KEY: 'upstream-secret' });
}
