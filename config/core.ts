import type { MikroORM } from '@mikro-orm/postgresql';
import type { Logger } from 'pino';
import { createRateLimiter } from '../adapters/limits/rate-limiter.ts';
import { createProviderRegistry } from '../adapters/providers/registry.ts';
import type { ValidatedCatalog } from '../core/catalog/catalog.ts';
import { createCoreDeps, type CoreDeps } from '../core/context.ts';
import type { Env } from './env.ts';

/** Wires core's dependencies from the configuration: the one place the API server and the CLI share. */
export function buildCoreDeps(env: Env, orm: MikroORM, logger: Logger, catalog: ValidatedCatalog): CoreDeps & { close(): Promise<void> } {
  const rateLimiter = createRateLimiter({ perMinute: env.RATE_LIMIT_PER_MINUTE, redisUrl: env.REDIS_URL });
  const deps = createCoreDeps({
    orm,
    logger,
    providers: createProviderRegistry(catalog.parsed.providers),
    rateLimiter,
    config: {
      holdTtlSeconds: env.HOLD_TTL_SECONDS,
      demoCoins: env.DEMO_COINS,
      apiPricePercent: BigInt(env.API_PRICE_PERCENT),
    },
  });
  return { ...deps, close: () => rateLimiter.close() };
}
