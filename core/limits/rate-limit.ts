/**
 * SPEC part 8: 120 requests per minute per API key, on every endpoint. The counting itself is
 * a port: adapters/limits implements it with rate-limiter-flexible, in memory for one instance
 * or in Redis when instances must share the count.
 */
export interface RateLimitState {
  allowed: boolean;
  limit: number;
  remaining: number;
  /** Seconds until the window frees a request. */
  resetSeconds: number;
}

export interface RateLimiter {
  consume(key: string): Promise<RateLimitState>;
}
