import { Redis } from 'ioredis';
import { RateLimiterMemory, RateLimiterRedis, RateLimiterRes, type RateLimiterAbstract } from 'rate-limiter-flexible';
import type { RateLimiter, RateLimitState } from '../../core/ports.ts';

/**
 * Fixed one-minute windows per key, counted by rate-limiter-flexible: in this process's memory
 * by default, in Redis when REDIS_URL is set so that every instance shares one count.
 */
export function createRateLimiter(opts: { perMinute: number; redisUrl?: string | undefined }): RateLimiter & { close(): Promise<void> } {
  return createWindowLimiter({ points: opts.perMinute, durationSeconds: 60, prefix: 'mas:rl', redisUrl: opts.redisUrl });
}

/** `points` per `durationSeconds` per key, in fixed windows (sign-in attempts use longer ones). */
export function createWindowLimiter(opts: { points: number; durationSeconds: number; prefix: string; redisUrl?: string | undefined }): RateLimiter & { close(): Promise<void> } {
  let redis: Redis | undefined;
  let limiter: RateLimiterAbstract;
  const window = { keyPrefix: opts.prefix, points: opts.points, duration: opts.durationSeconds };
  if (opts.redisUrl) {
    redis = new Redis(opts.redisUrl, { enableOfflineQueue: false, maxRetriesPerRequest: 1 });
    // While Redis is unreachable, count per process rather than refuse every request.
    limiter = new RateLimiterRedis({ storeClient: redis, ...window, insuranceLimiter: new RateLimiterMemory(window) });
  } else {
    limiter = new RateLimiterMemory(window);
  }
  const state = (res: RateLimiterRes, allowed: boolean): RateLimitState => ({
    allowed,
    limit: opts.points,
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
    async close() {
      redis?.disconnect();
    },
  };
}
