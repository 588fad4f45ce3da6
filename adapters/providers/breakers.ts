import { circuitBreaker, CircuitState, handleAll, type CircuitBreakerPolicy, type IBreaker } from 'cockatiel';
import type { RouteBreakers, RouteHealth, RouteOutcome, RoutePass } from '../../core/ports.ts';

/**
 * One cockatiel circuit breaker per route, held in this process. A breaker opens after
 * `failures` failed calls within `windowMs`, refuses calls for `coolDownMs`, then lets one
 * probe through: its success closes the breaker, its failure opens it for another cool-down.
 * Calls on a route keep their latencies (the last LATENCY_SAMPLES) for p50 and p99.
 */
export interface BreakerOptions {
  failures: number;
  windowMs: number;
  coolDownMs: number;
  now?: () => number;
}

const LATENCY_SAMPLES = 500;

/** Opens after `threshold` failures within `windowMs` (cockatiel's breakers count consecutive failures or ratios). */
export class WindowBreaker implements IBreaker {
  state: number[] = [];
  private readonly threshold: number;
  private readonly windowMs: number;
  private readonly now: () => number;
  constructor(threshold: number, windowMs: number, now: () => number) {
    this.threshold = threshold;
    this.windowMs = windowMs;
    this.now = now;
  }
  success(state: CircuitState): void {
    // A successful probe closes the breaker with a clean slate; while closed, a success does
    // not forgive failures within the window: N failures in it open the breaker.
    if (state === CircuitState.HalfOpen) this.state = [];
  }
  failure(): boolean {
    const now = this.now();
    this.state = this.state.filter((t) => now - t < this.windowMs);
    this.state.push(now);
    return this.state.length >= this.threshold;
  }
  recent(): number {
    const now = this.now();
    return this.state.filter((t) => now - t < this.windowMs).length;
  }
}

interface Route {
  policy: CircuitBreakerPolicy;
  breaker: WindowBreaker;
  latencies: number[];
  next: number;
}

export function createRouteBreakers(options: BreakerOptions): RouteBreakers & { route(name: string): Route } {
  const now = options.now ?? Date.now;
  const routes = new Map<string, Route>();
  const route = (name: string): Route => {
    let r = routes.get(name);
    if (!r) {
      const breaker = new WindowBreaker(options.failures, options.windowMs, now);
      r = { policy: circuitBreaker(handleAll, { halfOpenAfter: options.coolDownMs, breaker }), breaker, latencies: [], next: 0 };
      routes.set(name, r);
    }
    return r;
  };
  const sample = (r: Route, ms: number) => {
    if (r.latencies.length < LATENCY_SAMPLES) r.latencies.push(ms);
    else r.latencies[r.next] = ms;
    r.next = (r.next + 1) % LATENCY_SAMPLES;
  };

  return {
    route,
    async admit(name) {
      const r = route(name);
      // A probe is out: the others skip the route rather than wait for it (a probe may be a long stream).
      if (r.policy.state === CircuitState.HalfOpen || r.policy.state === CircuitState.Isolated) return undefined;
      return new Promise<RoutePass | undefined>((resolve) => {
        let admitted = false;
        r.policy
          .execute(
            () =>
              new Promise<void>((ok, fail) => {
                admitted = true;
                let settled = false;
                resolve({
                  done(outcome: RouteOutcome) {
                    if (settled) return;
                    settled = true;
                    sample(r, outcome.latencyMs);
                    if (outcome.ok) ok();
                    else fail(new Error('route call failed'));
                  },
                });
              }),
          )
          .catch(() => {
            // Refused by an open breaker (BrokenCircuitError), or the call's own failure, already counted.
            if (!admitted) resolve(undefined);
          });
      });
    },
    async health() {
      return [...routes.entries()].map(([name, r]): RouteHealth => {
        const sorted = [...r.latencies].sort((a, b) => a - b);
        return {
          route: name,
          state: stateName(r.policy.state),
          recentFailures: r.breaker.recent(),
          latencyP50Ms: percentile(sorted, 0.5),
          latencyP99Ms: percentile(sorted, 0.99),
        };
      });
    },
  };
}

function stateName(state: CircuitState): RouteHealth['state'] {
  if (state === CircuitState.Closed) return 'closed';
  if (state === CircuitState.HalfOpen) return 'half_open';
  return 'open';
}

function percentile(sorted: number[], q: number): number | null {
  if (sorted.length === 0) return null;
  return sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)]!;
}
