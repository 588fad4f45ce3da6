import type { RequestHandler } from 'express';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { RouteCounts } from '../providers/breakers.ts';
import type { RouteHealth } from '../../core/ports.ts';

export interface HttpMetrics {
  registry: Registry;
  middleware: RequestHandler;
}

/** What /metrics reads of the routes' breakers (adapters/providers/breakers.ts). */
export interface RouteFigures {
  health(): Promise<RouteHealth[]>;
  counts?(): RouteCounts[];
}

/**
 * Prometheus metrics, per process: requests by route and status, and latency histograms; with
 * `routes`, each model route's breaker (docs/providers.md, "Routes, fallback and breakers"),
 * labelled by the route's `provider/model` only.
 */
export function createHttpMetrics(opts: { routes?: RouteFigures | undefined } = {}): HttpMetrics {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  if (opts.routes) routeMetrics(registry, opts.routes);
  const requests = new Counter({
    name: 'http_requests_total',
    help: 'HTTP requests by method, route and status',
    labelNames: ['method', 'route', 'status'],
    registers: [registry],
  });
  const duration = new Histogram({
    name: 'http_request_duration_seconds',
    help: 'HTTP request latency by method and route',
    labelNames: ['method', 'route'],
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
    registers: [registry],
  });
  const middleware: RequestHandler = (req, res, next) => {
    const end = duration.startTimer();
    res.once('finish', () => {
      // The route pattern, never the raw path: ids in paths would make one series per request.
      const route = typeof res.locals.route === 'string' ? res.locals.route : 'unmatched';
      requests.inc({ method: req.method, route, status: String(res.statusCode) });
      end({ method: req.method, route });
    });
    next();
  };
  return { registry, middleware };
}

const STATE_VALUE = { closed: 0, half_open: 1, open: 2 } as const;

/** Read at each scrape: gauges from the breakers' health, counters from their counts. */
function routeMetrics(registry: Registry, routes: RouteFigures): void {
  const health = async () => routes.health();
  const gauge = (name: string, help: string, value: (h: RouteHealth) => number | null) =>
    new Gauge({
      name,
      help,
      labelNames: ['route'],
      registers: [registry],
      async collect() {
        this.reset();
        for (const h of await health()) {
          const v = value(h);
          if (v !== null) this.set({ route: h.route }, v);
        }
      },
    });
  gauge('mas_route_breaker_state', "A route's circuit breaker: 0 closed, 1 half open (a probe is out), 2 open (skipped)", (h) => STATE_VALUE[h.state]);
  gauge('mas_route_recent_failures', "A route's failed calls within the breaker's window", (h) => h.recentFailures);
  gauge('mas_route_latency_p50_seconds', "Median latency of a route's recent calls", (h) => (h.latencyP50Ms === null ? null : h.latencyP50Ms / 1000));
  gauge('mas_route_latency_p99_seconds', "99th percentile latency of a route's recent calls", (h) => (h.latencyP99Ms === null ? null : h.latencyP99Ms / 1000));
  const counts = routes.counts?.bind(routes);
  if (!counts) return;
  new Counter({
    name: 'mas_route_failures_total',
    help: 'Failed calls to a route, by reason (timeout, unreachable, http_<status>, error)',
    labelNames: ['route', 'reason'],
    registers: [registry],
    collect() {
      this.reset();
      for (const c of counts()) for (const [reason, n] of c.failures) this.inc({ route: c.route, reason }, n);
    },
  });
  new Counter({
    name: 'mas_route_fallbacks_total',
    help: 'Requests that moved on from a route to their next one after it failed before any output',
    labelNames: ['route'],
    registers: [registry],
    collect() {
      this.reset();
      for (const c of counts()) if (c.fallbacks > 0) this.inc({ route: c.route }, c.fallbacks);
    },
  });
  new Counter({
    name: 'mas_route_skipped_total',
    help: 'Calls not made to a route because it was open (its breaker, or an upstream Retry-After)',
    labelNames: ['route'],
    registers: [registry],
    collect() {
      this.reset();
      for (const c of counts()) if (c.skipped > 0) this.inc({ route: c.route }, c.skipped);
    },
  });
}
