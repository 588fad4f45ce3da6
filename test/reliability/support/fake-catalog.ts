import fs from 'node:fs/promises';
import path from 'node:path';
import { parse, stringify } from 'yaml';
import { ROOT } from '../../support/process.ts';

/**
 * config/models.yaml with a `fake` provider (an OpenAI-compatible upstream at `upstreamUrl`,
 * key from FAKE_UPSTREAM_KEY) and one text model on it, written to `dir/models.yaml` for a
 * server process started with CATALOG_FILE: the API-process crash tests' catalog.
 */
export async function writeFakeCatalog(dir: string, upstreamUrl: string, model: { id: string; name: string; upstreamModel: string }): Promise<string> {
  const catalog = parse(await fs.readFile(path.join(ROOT, 'config/models.yaml'), 'utf8')) as { providers: Record<string, unknown>; models: Record<string, unknown>[] };
  catalog.providers.fake = { kind: 'openai-compatible', base_url: upstreamUrl, api_key_env: 'FAKE_UPSTREAM_KEY', timeout_seconds: 60 };
  catalog.models.push({
    id: model.id,
    name: model.name,
    type: 'text',
    generation_types: ['chat'],
    provider: { name: 'fake', model: model.upstreamModel },
    pricing: { input_per_million: 2, output_per_million: 4 },
    context_window: 4096,
    max_output_tokens: 1000,
    default_max_tokens: 100,
  });
  const file = path.join(dir, 'models.yaml');
  await fs.writeFile(file, stringify(catalog));
  return file;
}
