import { z } from 'zod';
import type { CoreDeps } from '../context.ts';

/**
 * The model routes' circuit breakers for operators (docs/providers.md, "Routes, fallback and
 * breakers"): each route called since this instance started, its breaker's state, recent
 * failures and latency. The state is shared between instances when Redis is configured; the
 * latencies and failure counts are this instance's own.
 */
export const routeHealthSchema = z.object({
  object: z.literal('list'),
  data: z.array(
    z.object({
      route: z.string().describe('`provider/model`'),
      provider: z.string(),
      model: z.string().describe("the model's name at the provider"),
      state: z.enum(['closed', 'open', 'half_open']),
      recent_failures: z.number().int(),
      latency_p50_ms: z.number().nullable(),
      latency_p99_ms: z.number().nullable(),
    }),
  ),
});

export async function routeHealth(deps: Pick<CoreDeps, 'routeBreakers'>): Promise<z.infer<typeof routeHealthSchema>> {
  const health = await deps.routeBreakers.health();
  const data = health
    .map((h) => {
      // routeKey is `provider/model`; a provider's name has no slash, a model's may.
      const slash = h.route.indexOf('/');
      return {
        route: h.route,
        provider: h.route.slice(0, slash),
        model: h.route.slice(slash + 1),
        state: h.state,
        recent_failures: h.recentFailures,
        latency_p50_ms: h.latencyP50Ms,
        latency_p99_ms: h.latencyP99Ms,
      };
    })
    .sort((a, b) => a.route.localeCompare(b.route));
  return { object: 'list', data };
}
