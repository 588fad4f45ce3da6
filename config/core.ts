import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import type { MikroORM } from '@mikro-orm/postgresql';
import type { Logger } from 'pino';
import { statementPool } from '../adapters/db/statement-pool.ts';
import { createRateLimiter } from '../adapters/limits/rate-limiter.ts';
import { createUrlGuard } from '../adapters/net/url-guard.ts';
import { createMediaProviderRegistry, createProviderRegistry } from '../adapters/providers/registry.ts';
import { localDiskStorage } from '../adapters/storage/local-disk.ts';
import { s3Storage } from '../adapters/storage/s3.ts';
import type { ValidatedCatalog } from '../core/catalog/catalog.ts';
import { createCoreDeps, type CoreDeps } from '../core/context.ts';
import type { GenerationStarter } from '../core/generations/ports.ts';
import { createUrlSigner } from '../core/generations/signed-url.ts';
import type { Env } from './env.ts';

/** Wires core's dependencies from the configuration: the one place the API server, the worker and the CLI share. */
export async function buildCoreDeps(
  env: Env,
  orm: MikroORM,
  logger: Logger,
  catalog: ValidatedCatalog,
  generations?: GenerationStarter,
): Promise<CoreDeps & { close(): Promise<void> }> {
  const rateLimiter = createRateLimiter({ perMinute: env.RATE_LIMIT_PER_MINUTE, redisUrl: env.REDIS_URL });
  const urlGuard = createUrlGuard({ allowlist: env.INPUT_URL_ALLOWLIST });
  const statements = statementPool(orm, { logger });
  const deps = createCoreDeps({
    orm,
    execute: statements.execute,
    logger,
    providers: createProviderRegistry(catalog.parsed.providers),
    media: createMediaProviderRegistry(catalog.parsed.providers, { download: (url) => urlGuard.fetch(url) }),
    storage:
      env.STORAGE_DRIVER === 's3'
        ? s3Storage({
            bucket: env.S3_BUCKET!,
            region: env.S3_REGION,
            endpoint: env.S3_ENDPOINT,
            forcePathStyle: env.S3_FORCE_PATH_STYLE,
            accessKeyId: env.S3_ACCESS_KEY_ID,
            secretAccessKey: env.S3_SECRET_ACCESS_KEY,
          })
        : localDiskStorage(path.join(env.DATA_DIR, 'storage')),
    urlGuard,
    webhooks: { post: (url, body, headers) => urlGuard.post(url, body, headers) },
    signer: createUrlSigner(env.SIGNING_SECRET ?? (await persistedSecret(env.DATA_DIR)), env.PUBLIC_BASE_URL),
    rateLimiter,
    ...(generations ? { generations } : {}),
    config: {
      holdTtlSeconds: env.HOLD_TTL_SECONDS,
      demoCoins: env.DEMO_COINS,
      apiPricePercent: BigInt(env.API_PRICE_PERCENT),
    },
  });
  return { ...deps, close: async () => void (await Promise.all([rateLimiter.close(), statements.close()])) };
}

/**
 * Without SIGNING_SECRET, one random secret is kept in DATA_DIR (fine for one machine; several
 * instances must set the same SIGNING_SECRET).
 */
async function persistedSecret(dataDir: string): Promise<string> {
  const file = path.join(dataDir, 'signing-secret');
  await fs.mkdir(dataDir, { recursive: true });
  try {
    await fs.writeFile(file, randomBytes(32).toString('base64url'), { mode: 0o600, flag: 'wx' });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
  }
  return (await fs.readFile(file, 'utf8')).trim();
}
