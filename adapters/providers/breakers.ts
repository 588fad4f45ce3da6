import { createRequire } from 'node:module';
import { circuitBreaker, CircuitState, handleAll, type CircuitBreakerPolicy, type IBreaker } from 'cockatiel';
import type { RouteBreakers, RouteHealth, RouteOutcome, RoutePass } from '../../core/ports.ts';
import { noteChatCall } from './telemetry.ts';

/**
 * One cockatiel circuit breaker per route, held in this process. A breaker opens after
 * `failures` failed calls within `windowMs`, refuses calls for `coolDownMs`, then lets one
 * probe through: its success closes the breaker, its failure opens it for another cool-down.
 * Calls on a route keep their latencies (the last LATENCY_SAMPLES) for p50 and p99.
 *
 * A failure that names a delay (a 429's or 503's Retry-After) also closes the route to every
 * caller of this process until the delay has passed, whatever the breaker's state: it is
 * skipped as if open, and shown as open meanwhile. Counts of failures by reason, of fallbacks
 * and of skipped calls are kept per route for /metrics (adapters/http/metrics.ts).
 */
export interface BreakerOptions {
  failures: number;
  windowMs: number;
  coolDownMs: number;
  now?: () => number;
}

const LATENCY_SAMPLES = 500;
const require = createRequire(import.meta.url);

/** Opens after `threshold` failures within `windowMs` (cockatiel's breakers count consecutive failures or ratios). */
export class WindowBreaker implements IBreaker {
  state: number[] = [];
  /** When the failures cockatiel has yet to count happened (it counts them a few microtasks after the call reports). */
  readonly failedAt: number[] = [];
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
    this.state.push(this.failedAt.shift() ?? now);
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
  /** Skipped until then (epoch ms): the upstream's Retry-After. */
  waitUntil: number;
  /** Calls told how they went whose outcome cockatiel has not yet taken in (it does so a few microtasks later). */
  settling: Promise<unknown>;
  failures: Map<string, number>;
  fallbacks: number;
  skipped: number;
}

/** What /metrics counts per route since the process started. */
export interface RouteCounts {
  route: string;
  /** Failed calls by reason (`timeout`, `unreachable`, `http_<status>`, `error`). */
  failures: Map<string, number>;
  /** Requests that moved on from this route to their next one. */
  fallbacks: number;
  /** Calls not made because the route was open (its breaker, or a Retry-After). */
  skipped: number;
}

export type InProcessBreakers = RouteBreakers & {
  route(name: string): Route;
  counts(): RouteCounts[];
  /** Keeps a call's latency and, for a failure, its reason and fallback (not its breaker: that is the caller's). */
  note(name: string, outcome: RouteOutcome): void;
  close(): Promise<void>;
};

export function createRouteBreakers(options: BreakerOptions): InProcessBreakers {
  const now = options.now ?? Date.now;
  const routes = new Map<string, Route>();
  const route = (name: string): Route => {
    let r = routes.get(name);
    if (!r) {
      const breaker = new WindowBreaker(options.failures, options.windowMs, now);
      r = { policy: circuitBreaker(handleAll, { halfOpenAfter: options.coolDownMs, breaker }), breaker, latencies: [], next: 0, waitUntil: 0, settling: Promise.resolve(), failures: new Map(), fallbacks: 0, skipped: 0 };
      routes.set(name, r);
    }
    return r;
  };
  const note = (name: string, outcome: RouteOutcome) => {
    // The GenAI duration and the upstream errors on /metrics (adapters/providers/telemetry.ts).
    noteChatCall(name, outcome);
    const r = route(name);
    if (r.latencies.length < LATENCY_SAMPLES) r.latencies.push(outcome.latencyMs);
    else r.latencies[r.next] = outcome.latencyMs;
    r.next = (r.next + 1) % LATENCY_SAMPLES;
    if (outcome.ok) return;
    const reason = outcome.reason ?? 'error';
    r.failures.set(reason, (r.failures.get(reason) ?? 0) + 1);
    if (outcome.fallback) r.fallbacks++;
  };

  return {
    route,
    note,
    close: async () => undefined,
    async admit(name) {
      const r = route(name);
      // The state after every outcome already told: a failure just reported must be able to open the breaker for this call.
      await r.settling;
      // A probe is out: the others skip the route rather than wait for it (a probe may be a long stream).
      if (r.policy.state === CircuitState.HalfOpen || r.policy.state === CircuitState.Isolated || now() < r.waitUntil) {
        r.skipped++;
        return undefined;
      }
      const pass = await new Promise<RoutePass | undefined>((resolve) => {
        let admitted = false;
        const call = r.policy
          .execute(
            () =>
              new Promise<void>((ok, fail) => {
                admitted = true;
                let settled = false;
                resolve({
                  done(outcome: RouteOutcome) {
                    if (settled) return;
                    settled = true;
                    note(name, outcome);
                    r.settling = Promise.all([r.settling, call]);
                    if (outcome.ok) return ok();
                    if (outcome.retryAfterMs !== undefined) r.waitUntil = Math.max(r.waitUntil, now() + outcome.retryAfterMs);
                    r.breaker.failedAt.push(now());
                    fail(new Error('route call failed'));
                  },
                });
              }),
          )
          .catch(() => {
            // Refused by an open breaker (BrokenCircuitError), or the call's own failure, already counted.
            if (!admitted) resolve(undefined);
          });
      });
      if (!pass) r.skipped++;
      return pass;
    },
    counts() {
      return [...routes.entries()].map(([name, r]) => ({ route: name, failures: new Map(r.failures), fallbacks: r.fallbacks, skipped: r.skipped }));
    },
    async health() {
      await Promise.all([...routes.values()].map((r) => r.settling));
      return [...routes.entries()].map(([name, r]): RouteHealth => {
        const sorted = [...r.latencies].sort((a, b) => a - b);
        return {
          route: name,
          state: now() < r.waitUntil ? 'open' : stateName(r.policy.state),
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

/**
 * The breakers shared by every instance through Redis (REDIS_URL): per route, under
 * `mas:breaker:{provider/model}:…`,
 * - `failures`: a sorted set of failure times within the window, from every instance; the
 *   call that makes it reach `failures` opens the route;
 * - `open` (PX = cool-down): while it exists every instance skips the route;
 * - `tripped` (PX = cool-down + window): the route opened and has not yet passed a probe. Once
 *   `open` is gone, the first instance to take the `probe` lease (SET NX, PX = cool-down) calls
 *   the route; every other call skips it. The probe's success clears the route; its failure
 *   opens it for another cool-down;
 * - `wait` (PX = the upstream's Retry-After): skipped by every instance until then.
 * The state, and the failures within the window, are therefore the same on every instance;
 * latencies and the failure, fallback and skip counters are each instance's own. While Redis
 * cannot be reached, the in-process breakers (`local`) decide instead, and health() shows theirs.
 */
const ADMIT = `
if redis.call('exists', KEYS[1]) == 1 or redis.call('exists', KEYS[4]) == 1 then return 0 end
if redis.call('exists', KEYS[2]) == 1 then
  if redis.call('set', KEYS[3], '1', 'NX', 'PX', ARGV[1]) then return 2 end
  return 0
end
return 1`;
const FAILED = `
if tonumber(ARGV[6]) > 0 then redis.call('set', KEYS[5], '1', 'PX', ARGV[6]) end
redis.call('zadd', KEYS[1], ARGV[1], ARGV[7])
redis.call('zremrangebyscore', KEYS[1], '-inf', tonumber(ARGV[1]) - tonumber(ARGV[2]))
redis.call('pexpire', KEYS[1], ARGV[2])
local n = redis.call('zcard', KEYS[1])
if ARGV[5] == '1' or n >= tonumber(ARGV[3]) then
  redis.call('set', KEYS[2], '1', 'PX', ARGV[4])
  redis.call('set', KEYS[3], '1', 'PX', tonumber(ARGV[4]) + tonumber(ARGV[2]))
  redis.call('del', KEYS[4])
end
return n`;

export interface SharedBreakerOptions extends BreakerOptions {
  redisUrl: string;
}

export function createSharedRouteBreakers(options: SharedBreakerOptions): InProcessBreakers {
  const now = options.now ?? Date.now;
  const local = createRouteBreakers(options);
  // ioredis is loaded only when there is a Redis to talk to (as adapters/limits/rate-limiter.ts does).
  const redis = new (require('ioredis') as typeof import('ioredis')).Redis(options.redisUrl, { enableOfflineQueue: false, maxRetriesPerRequest: 1, commandTimeout: 500 });
  // Unreachable, or slower than half a second (a command times out): the in-process breakers answer meanwhile.
  redis.on('error', () => undefined);
  const keys = (name: string) => {
    const k = (part: string) => `mas:breaker:{${name}}:${part}`;
    return { failures: k('failures'), open: k('open'), tripped: k('tripped'), probe: k('probe'), wait: k('wait') };
  };
  let member = 0;

  const shared = (name: string, probe: boolean): RoutePass => {
    let settled = false;
    return {
      done(outcome) {
        if (settled) return;
        settled = true;
        local.note(name, outcome);
        const k = keys(name);
        const write = outcome.ok
          ? probe
            ? redis.del(k.failures, k.tripped, k.probe)
            : Promise.resolve(0)
          : redis.eval(
              FAILED,
              5,
              k.failures,
              k.open,
              k.tripped,
              k.probe,
              k.wait,
              now(),
              options.windowMs,
              options.failures,
              options.coolDownMs,
              probe ? '1' : '0',
              Math.ceil(outcome.retryAfterMs ?? 0),
              `${now()}:${process.pid}:${member++}:${Math.random()}`,
            );
        void Promise.resolve(write).catch(() => undefined);
      },
    };
  };

  return {
    ...local,
    async admit(name) {
      const k = keys(name);
      let verdict: number;
      try {
        verdict = Number(await redis.eval(ADMIT, 4, k.open, k.tripped, k.probe, k.wait, options.coolDownMs));
      } catch {
        return local.admit(name);
      }
      if (verdict === 0) {
        local.route(name).skipped++;
        return undefined;
      }
      return shared(name, verdict === 2);
    },
    async health() {
      const mine = await local.health();
      try {
        return await Promise.all(
          mine.map(async (h): Promise<RouteHealth> => {
            const k = keys(h.route);
            const answers = (await redis.multi().exists(k.open).exists(k.tripped).exists(k.wait).zcount(k.failures, now() - options.windowMs, '+inf').exec()) ?? [];
            const [open, tripped, wait, recent] = [0, 1, 2, 3].map((i) => {
              const [err, value] = answers[i] ?? [new Error('no answer'), 0];
              if (err) throw err;
              return Number(value);
            }) as [number, number, number, number];
            const state = open || wait ? 'open' : tripped ? 'half_open' : 'closed';
            return { ...h, state, recentFailures: Number(recent) };
          }),
        );
      } catch {
        return mine;
      }
    },
    async close() {
      redis.disconnect();
    },
  };
}
