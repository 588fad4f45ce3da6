import { entryProblem, type EntryProblem } from '../../catalog/price-schedule.ts';
import { jobTimeProblem, modelSchema, type ModelDefinition } from '../../catalog/schema.ts';
import { invalid } from '../../errors.ts';
import type { MediaProviderRegistry, ProviderRegistry } from '../../ports.ts';

/**
 * Operators' entries are checked exactly as the catalog file's are (core/catalog/schema.ts and
 * the exact-API-price rule); a problem is refused naming the input field it is in, phrased as
 * input errors are.
 */
export function refuse(param: string, problem: EntryProblem): never {
  const at = [param, ...problem.path.map(String)].join('.');
  const message = problem.message.replace(/^Invalid input: /, '');
  if (/received undefined$/.test(problem.message)) throw invalid(at, `Missing required parameter: '${at}'.`, 'missing_field');
  throw invalid(at, `Invalid value for '${at}': ${message}.`);
}

/** The entry as a model, or refused under `param`. */
export function checkEntry(entry: unknown, param: string, apiPricePercent: bigint): ModelDefinition {
  const problem = entryProblem(entry, apiPricePercent);
  if (problem) refuse(param, problem);
  const model = modelSchema.parse(entry);
  // A setting bound the deadline can never meet, refused as the catalog file's is.
  const late = jobTimeProblem(model);
  if (late) refuse(param, late);
  return model;
}

/**
 * Providers are the catalog file's, wired at start: a model created at run time names, in each
 * of its routes, one of them, of the kind its type needs (a chat provider for text, a media
 * provider otherwise). `entry` is the model as written: a route given as `provider:` is refused
 * under `provider.name`, one of a `routes` list under its index.
 */
export function requireProvider(deps: { providers: ProviderRegistry; media: MediaProviderRegistry }, model: ModelDefinition, param: string, entry?: unknown): void {
  const listed = typeof entry === 'object' && entry !== null && Array.isArray((entry as { routes?: unknown }).routes);
  const routes: readonly { provider: string }[] = model.routes;
  routes.forEach((route, i) => {
    const found = model.type === 'text' ? deps.providers.get(route.provider) : deps.media.get(route.provider);
    if (found) return;
    const at = listed ? `${param}.routes.${i}.provider` : `${param}.provider.name`;
    throw invalid(
      at,
      `Invalid value for '${at}': no ${model.type === 'text' ? 'chat' : 'media'} provider '${route.provider}' is configured on this server (the catalog file's providers).`,
      'unknown_provider',
    );
  });
}
