import { createRequire } from 'node:module';
import type { Redis as RedisClient } from 'ioredis';
import { RateLimiterMemory, RateLimiterRedis, RateLimiterRes, type RateLimiterAbstract } from 'rate-limiter-flexible';
import type { FailureCounter, RateLimiter, RateLimitState } from '../../core/ports.ts';

const require = createRequire(import.meta.url);

/** A window: `points` per `durationSeconds` per key, in fixed windows, its keys under `prefix`. */
export interface WindowOptions {
  points: number;
  durationSeconds: number;
  prefix: string;
}

/** Makes the process's limiters; they share one Redis connection when there is one. */
export interface Limiters {
  window(opts: WindowOptions): RateLimiter;
  /** Failures per key, forgotten `forgetSeconds` after the first of the run (or at `reset`), and blocks on keys. */
  failures(opts: { prefix: string; forgetSeconds: number }): FailureCounter;
  close(): Promise<void>;
}

/**
 * Limits counted by rate-limiter-flexible in fixed windows: in this process's memory by
 * default; in Redis when REDIS_URL is set, so that every instance shares one count. Redis
 * counts atomically (one INCR-and-expire script per request): no check-then-set race across
 * instances. While Redis is unreachable each process counts on its own (the insurance limiter)
 * rather than refuse every request.
 */
export function createLimiters(opts: { redisUrl?: string | undefined }): Limiters {
  // ioredis is loaded only when there is a Redis to talk to.
  const redis: RedisClient | undefined = opts.redisUrl
    ? new (require('ioredis') as typeof import('ioredis')).Redis(opts.redisUrl, { enableOfflineQueue: false, maxRetriesPerRequest: 1 })
    : undefined;
  // A refused connection is retried by ioredis; the insurance limiter answers meanwhile.
  redis?.on('error', () => undefined);
  return {
    window(w) {
      const window = { keyPrefix: w.prefix, points: w.points, duration: w.durationSeconds };
      const limiter: RateLimiterAbstract = redis
        ? new RateLimiterRedis({ storeClient: redis, ...window, insuranceLimiter: new RateLimiterMemory(window) })
        : new RateLimiterMemory(window);
      const state = (res: RateLimiterRes, allowed: boolean): RateLimitState => ({
        allowed,
        limit: w.points,
        remaining: Math.max(0, res.remainingPoints),
        resetSeconds: Math.max(1, Math.ceil(res.msBeforeNext / 1000)),
      });
      return {
        async consume(key) {
          try {
            return state(await limiter.consume(key), true);
          } catch (err) {
            if (err instanceof RateLimiterRes) return state(err, false);
            throw err;
          }
        },
      };
    },
    failures(f) {
      const make = (o: { keyPrefix: string; points: number; duration: number }): RateLimiterAbstract =>
        redis ? new RateLimiterRedis({ storeClient: redis, ...o, insuranceLimiter: new RateLimiterMemory(o) }) : new RateLimiterMemory(o);
      // Counts: never refuses by itself (core reads the count and decides).
      const counts = make({ keyPrefix: `${f.prefix}:n`, points: Number.MAX_SAFE_INTEGER, duration: f.forgetSeconds });
      // Blocks: `block` consumes past its one point for the given time.
      const blocks = make({ keyPrefix: `${f.prefix}:b`, points: 1, duration: 1 });
      return {
        async blockedFor(key) {
          const res = await blocks.get(key);
          return res && res.consumedPoints > 1 && res.msBeforeNext > 0 ? Math.max(1, Math.ceil(res.msBeforeNext / 1000)) : 0;
        },
        async fail(key) {
          const res = await counts.penalty(key, 1);
          return res.consumedPoints;
        },
        async block(key, seconds) {
          await blocks.block(key, seconds);
        },
        async reset(key) {
          await Promise.all([counts.delete(key), blocks.delete(key)]);
        },
      };
    },
    async close() {
      redis?.disconnect();
    },
  };
}

