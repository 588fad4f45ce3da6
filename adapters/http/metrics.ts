import type { RequestHandler } from 'express';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { RouteCounts } from '../providers/breakers.ts';
import type { RouteHealth } from '../../core/ports.ts';
import { upstreamMetrics } from '../providers/telemetry.ts';

/** What /metrics reads of the database at each scrape (core health.figures). */
export interface OperationalFigures {
  /** Coins captured since the previous read (micro-coins), and the last ledger entry seen: the next read's `afterEntry`. */
  spentMicro: bigint;
  lastEntry: string;
  holdsOpen: number;
  heldMicro: bigint;
  jobsQueued: number;
  jobsRunning: number;
  /** The database's clock: the next call's `since`. */
  now: Date;
  /** Queue seconds of the jobs that started since `since`. */
  started: number[];
  /** Run seconds of the jobs that ended since `since`, with how they ended. */
  ended: { seconds: number; status: string }[];
}

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
export function createHttpMetrics(opts: { routes?: RouteFigures | undefined; figures?: ((since: Date | undefined, afterEntry: string | undefined) => Promise<OperationalFigures>) | undefined } = {}): HttpMetrics {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  if (opts.routes) routeMetrics(registry, opts.routes);
  // The GenAI metrics of the upstream calls made in this process (adapters/providers/telemetry.ts).
  for (const metric of upstreamMetrics) registry.registerMetric(metric);
  if (opts.figures) operationalMetrics(registry, opts.figures);
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

/**
 * A worker's own metrics (`npm run worker` with WORKER_METRICS_PORT): its process, the upstream
 * calls of the media jobs it runs in the GenAI conventions (adapters/providers/telemetry.ts), and
 * its routes' breakers. An API instance that runs the worker in its own process (RUN_WORKER)
 * shows the same series on its /metrics already.
 */
export function createWorkerMetrics(opts: { routes?: RouteFigures | undefined } = {}): Registry {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  if (opts.routes) routeMetrics(registry, opts.routes);
  for (const metric of upstreamMetrics) registry.registerMetric(metric);
  return registry;
}

/**
 * Holds open, jobs queued and running (gauges), and the queue and run time of jobs
 * (histograms), read from the database once per scrape: each scrape observes the jobs that
 * started or ended since the previous one (by the database's clock). Every API instance reads
 * the same jobs, so sum them over one instance, not over all (docs/observability.md).
 */
function operationalMetrics(registry: Registry, read: (since: Date | undefined, afterEntry: string | undefined) => Promise<OperationalFigures>): void {
  let since: Date | undefined;
  let afterEntry: string | undefined;
  let scrape: Promise<OperationalFigures | undefined> | undefined;
  const figures = () =>
    (scrape ??= read(since, afterEntry)
      .then((f) => {
        since = f.now;
        afterEntry = f.lastEntry;
        return f;
      })
      // A database away: these series are left out of this scrape, the others stay.
      .catch(() => undefined)
      .finally(() => setImmediate(() => (scrape = undefined))));
  const gauge = (name: string, help: string, value: (f: OperationalFigures) => number) =>
    new Gauge({
      name,
      help,
      registers: [registry],
      async collect() {
        const f = await figures();
        if (f) this.set(value(f));
      },
    });
  new Counter({
    name: 'mas_spent_coins_total',
    help: 'Coins captured from wallets (chat and media usage), counted from this process start; every instance counts the same ledger',
    registers: [registry],
    async collect() {
      const f = await figures();
      if (f && f.spentMicro > 0n) this.inc(Number(f.spentMicro) / 1_000_000);
    },
  });
  gauge('mas_holds_open', 'Reservations open now (chat requests and media jobs in flight)', (f) => f.holdsOpen);
  gauge('mas_holds_open_coins', 'Coins held by the open reservations', (f) => Number(f.heldMicro) / 1_000_000);
  gauge('mas_jobs_queued', 'Media jobs accepted and not started yet', (f) => f.jobsQueued);
  gauge('mas_jobs_running', 'Media jobs running now', (f) => f.jobsRunning);
  const buckets = [0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600];
  new Histogram({
    name: 'mas_job_queue_time_seconds',
    help: 'How long media jobs waited between acceptance and their start',
    buckets,
    registers: [registry],
    async collect() {
      const f = await figures();
      for (const s of f?.started ?? []) this.observe(s);
    },
  });
  new Histogram({
    name: 'mas_job_run_time_seconds',
    help: 'How long media jobs ran, from their start to their end, by how they ended',
    labelNames: ['status'],
    buckets,
    registers: [registry],
    async collect() {
      const f = await figures();
      for (const e of f?.ended ?? []) this.observe({ status: e.status }, e.seconds);
    },
  });
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
