import type { z } from 'zod';
import type { routeHealthSchema } from '../../../core/admin/routes.ts';
import { builder } from '../builder.ts';

/** The model routes' circuit breakers (core: admin.routes.health, docs/providers.md "Routes, fallback and breakers"), for any admin role. */
type Route = z.infer<typeof routeHealthSchema>['data'][number];

const RouteHealth = builder.objectRef<Route>('RouteHealth').implement({
  description: "A model route (a provider and the model's name there) and its circuit breaker.",
  fields: (t) => ({
    route: t.exposeString('route', { description: '`provider/model`.' }),
    provider: t.exposeString('provider'),
    model: t.exposeString('model', { description: "The model's name at the provider." }),
    state: t.exposeString('state', { description: '`closed` (called), `open` (skipped until its cool-down or Retry-After ends) or `half_open` (one probe is out).' }),
    recentFailures: t.exposeInt('recent_failures', { description: "Failed calls within the breaker's window, on this instance." }),
    latencyP50Ms: t.exposeFloat('latency_p50_ms', { nullable: true, description: "Median latency of this instance's recent calls; null before any." }),
    latencyP99Ms: t.exposeFloat('latency_p99_ms', { nullable: true }),
  }),
});

builder.queryFields((t) => ({
  routes: t.field({
    type: [RouteHealth],
    description: 'Every model route called since this instance started, by name.',
    resolve: async (_root, _args, ctx) => (await ctx.core.admin.routes.health()).data,
  }),
}));
