import { createHmac, randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import type { MikroORM } from '@mikro-orm/postgresql';
import type { Logger } from 'pino';
import { statementPool } from '../adapters/db/statement-pool.ts';
import { createLimiters, type Limiters } from '../adapters/limits/rate-limiter.ts';
import { createUrlGuard } from '../adapters/net/url-guard.ts';
import { createRouteBreakers, createSharedRouteBreakers } from '../adapters/providers/breakers.ts';
import { createMediaProviderRegistry, createProviderRegistry } from '../adapters/providers/registry.ts';
import { mcpResourceUrl } from '../adapters/mcp/resource.ts';
import { stripeOnFirstUse } from '../adapters/payments/provider.ts';
import { restLinks } from '../adapters/rest/links.ts';
import { accountLinks, paymentReturnUrls } from '../adapters/web/links.ts';
import { createMailer } from '../adapters/mail/mailer.ts';
import { FAILURE_WINDOW_SECONDS } from '../core/accounts/attempts.ts';
import { deviceCookies } from '../core/auth/device-cookies.ts';
import { localDiskStorage } from '../adapters/storage/local-disk.ts';
import { s3Storage } from '../adapters/storage/s3.ts';
import type { ValidatedCatalog } from '../core/catalog/catalog.ts';
import type { ProviderConfig } from '../core/catalog/schema.ts';
import { listenForChanges } from '../adapters/db/change-feed.ts';
import { applyChange } from '../core/changes.ts';
import { createCoreDeps, type CoreDeps } from '../core/context.ts';
import { createUrlSigner } from '../core/links.ts';
import type { Plan } from '../core/payments/plans.ts';
import type { AutoTopUpStarter, Clock, GenerationStarter, Mailer, PaymentProvider, ProviderRegistry, ResultStorage } from '../core/ports.ts';
import { loadCatalogFile } from './catalog.ts';
import { loadPlansFile } from './plans.ts';
import { openDatabase, type MigrationPolicy } from './database.ts';
import type { Env } from './env.ts';
import { openTemporal, temporalAutoTopUps, temporalGenerationStarter, type TemporalHandle } from './temporal.ts';

/**
 * The composition root: the one place where core's ports get their adapters. The API server,
 * the worker, the CLI and the tests all wire core through `wireCore`; the processes open their
 * database and Temporal through `openRuntime`.
 */
export interface WireParts {
  orm: MikroORM;
  logger: Logger;
  /** The catalog file's providers: each becomes a chat or media provider. */
  providers: Record<string, ProviderConfig>;
  signingSecret: string;
  /** Starts job workflows (Temporal); absent in processes that run no jobs (the CLI). */
  generations?: GenerationStarter | undefined;
  /** Starts auto top-up workflows (Temporal); absent in processes that run no jobs (the CLI). */
  autoTopUps?: AutoTopUpStarter | undefined;
  /** The subscription plans (PLANS_FILE); none by default. */
  plans?: Plan[] | undefined;
  /** Where upstream keys are read (`api_key_env`); the process environment by default. */
  providerEnv?: NodeJS.ProcessEnv | undefined;
  /** Tests only: fake text upstreams, their own storage, a clock, no catalog cache. */
  chatProviders?: ProviderRegistry | undefined;
  storage?: ResultStorage | undefined;
  clock?: Clock | undefined;
  catalogTtlMs?: number | undefined;
  /** Tests only: a payment provider instead of the one STRIPE_SECRET_KEY configures. */
  payments?: PaymentProvider | undefined;
  /** Tests only: a mailer instead of the one SMTP_URL configures. */
  mailer?: Mailer | undefined;
  /** Tests only: the first wait before a media job's provider step is tried again (1 s by default; CoreConfig). */
  jobStepRetryInitialMs?: number | undefined;
}

export type WiredCore = CoreDeps & {
  /** Makes more limiters on the same store (the OAuth endpoints' per-address limits): shared by every instance through Redis. */
  limiters: Limiters;
  close(): Promise<void>;
};

export function wireCore(env: Env, parts: WireParts): WiredCore {
  const limiters = createLimiters({ redisUrl: env.REDIS_URL });
  const rateLimiter = limiters.window({ points: env.RATE_LIMIT_PER_MINUTE, durationSeconds: 60, prefix: 'mas:rl' });
  // Guessing passwords: 10 attempts per email and 30 per client address in 15 minutes.
  const attempts = {
    perEmail: limiters.window({ points: 10, durationSeconds: 900, prefix: 'mas:attempts:email' }),
    perIp: limiters.window({ points: 30, durationSeconds: 900, prefix: 'mas:attempts:ip' }),
  };
  // Sign-in failures (core/accounts/attempts.ts decides the blocks): a pair's failures are forgotten a day after the first of them (or at its next success).
  const signInLimits = {
    pair: limiters.failures({ prefix: 'mas:signin:pair', forgetSeconds: 24 * 3600 }),
    perIp: limiters.failures({ prefix: 'mas:signin:ip', forgetSeconds: FAILURE_WINDOW_SECONDS }),
    perEmail: limiters.failures({ prefix: 'mas:signin:email', forgetSeconds: FAILURE_WINDOW_SECONDS }),
  };
  const urlGuard = createUrlGuard({ allowlist: env.INPUT_URL_ALLOWLIST });
  const statements = statementPool(parts.orm, { logger: parts.logger });
  // One breaker per model route; shared by every instance through Redis when there is one (docs/providers.md).
  const breakerOptions = { failures: env.BREAKER_FAILURES, windowMs: env.BREAKER_WINDOW_SECONDS * 1000, coolDownMs: env.BREAKER_COOL_DOWN_SECONDS * 1000 };
  const routeBreakers = env.REDIS_URL ? createSharedRouteBreakers({ ...breakerOptions, redisUrl: env.REDIS_URL }) : createRouteBreakers(breakerOptions);
  const deps = createCoreDeps({
    orm: parts.orm,
    execute: statements.execute,
    logger: parts.logger,
    providers: parts.chatProviders ?? createProviderRegistry(parts.providers, parts.providerEnv, parts.logger),
    media: createMediaProviderRegistry(parts.providers, { download: (url) => urlGuard.fetch(url), env: parts.providerEnv, log: parts.logger }),
    storage:
      parts.storage ??
      (env.STORAGE_DRIVER === 's3'
        ? s3Storage({
            bucket: env.S3_BUCKET!,
            region: env.S3_REGION,
            endpoint: env.S3_ENDPOINT,
            forcePathStyle: env.S3_FORCE_PATH_STYLE,
            accessKeyId: env.S3_ACCESS_KEY_ID,
            secretAccessKey: env.S3_SECRET_ACCESS_KEY,
          })
        : localDiskStorage(path.join(env.DATA_DIR, 'storage'))),
    routeBreakers,
    urlGuard,
    webhooks: { post: (url, body, headers) => urlGuard.post(url, body, headers) },
    // Signed links point where the REST adapter serves their bytes.
    signer: createUrlSigner(parts.signingSecret, restLinks(env.PUBLIC_BASE_URL)),
    rateLimiter,
    attempts,
    signInLimits,
    devices: deviceCookies(createHmac('sha256', parts.signingSecret).update('device-cookies').digest('base64url')),
    mailer: parts.mailer ?? createMailer({ smtpUrl: env.SMTP_URL, from: env.MAIL_FROM, dataDir: env.DATA_DIR, logger: parts.logger }),
    generations: parts.generations,
    autoTopUps: parts.autoTopUps,
    // Payments are on only with a secret key; env.ts requires the webhook secret with it.
    payments:
      parts.payments ??
      (env.STRIPE_SECRET_KEY ? stripeOnFirstUse({ secretKey: env.STRIPE_SECRET_KEY, webhookSecret: env.STRIPE_WEBHOOK_SECRET!, apiUrl: env.STRIPE_API_URL }) : undefined),
    clock: parts.clock,
    catalogTtlMs: parts.catalogTtlMs,
    config: {
      holdTtlSeconds: env.HOLD_TTL_SECONDS,
      usageFlushMs: env.USAGE_FLUSH_MS,
      resultRetentionSeconds: env.RESULT_RETENTION_SECONDS,
      jobStepRetryInitialMs: parts.jobStepRetryInitialMs,
      demoCoins: env.DEMO_COINS,
      starterCreditCoins: env.STARTER_CREDIT_COINS,
      apiPricePercent: BigInt(env.API_PRICE_PERCENT),
      signupOpen: env.SIGNUP === 'open',
      // The issuer is the service; its tokens are for the MCP server, where the MCP adapter is mounted.
      oauth: {
        issuer: env.PUBLIC_BASE_URL,
        resource: mcpResourceUrl(env.PUBLIC_BASE_URL),
        // At the default address, the service is on this computer, reached as localhost, 127.0.0.1 or [::1].
        loopbackAliases: env.PUBLIC_BASE_URL_IS_DEFAULT,
        httpClientIdHosts: env.INPUT_URL_ALLOWLIST,
      },
      payments: {
        currency: env.STRIPE_CURRENCY,
        topUpMinCents: env.TOPUP_MIN_USD,
        topUpMaxCents: env.TOPUP_MAX_USD,
        plans: parts.plans ?? [],
        webhookToleranceSeconds: 300,
        // The payment page sends the customer back to the account pages.
        returnUrls: paymentReturnUrls(env.PUBLIC_BASE_URL),
        autoTopUpMaxPerDay: env.AUTO_TOPUP_MAX_PER_DAY,
      },
      // The links of the service's mails lead to the account pages.
      links: accountLinks(env.PUBLIC_BASE_URL),
    },
  });
  return {
    ...deps,
    limiters,
    close: async () => {
      // The charges of answered chats are written before the connections close.
      await deps.charges.close();
      await Promise.all([limiters.close(), statements.close(), routeBreakers.close()]);
    },
  };
}

/** A process's connections and its wired core: what main.ts, worker.ts and the CLI start from. */
export interface Runtime {
  env: Env;
  logger: Logger;
  /** The catalog file, validated: start-up seeds its models. */
  catalog: ValidatedCatalog;
  deps: WiredCore;
  /** Absent for the CLI, which starts no jobs. */
  temporal: TemporalHandle | undefined;
  /** True when this process uses the embedded PostgreSQL. */
  embeddedDatabase: boolean;
  /** The database's connection URL (it holds the password: never log it). */
  databaseUrl: string;
  /** Keys the browser pages' CSRF tokens: derived from the signing secret, so every instance shares it. */
  csrfSecret: string;
  close(): Promise<void>;
}

export async function openRuntime(
  env: Env,
  logger: Logger,
  opts: {
    temporal: boolean;
    migrations?: MigrationPolicy;
    /** Long-running processes (API, worker) listen for changes made elsewhere, so that their caches drop what went stale. */
    changes?: boolean;
  },
): Promise<Runtime> {
  const catalog = await loadCatalogFile(env.CATALOG_FILE, BigInt(env.API_PRICE_PERCENT));
  const plans = await loadPlansFile(env.PLANS_FILE);
  const db = await openDatabase(env, logger, opts.migrations ?? 'apply');
  const temporal = opts.temporal ? await openTemporal(env, logger) : undefined;
  const generations = temporal
    ? temporalGenerationStarter(temporal.client, { taskQueue: env.TEMPORAL_TASK_QUEUE })
    : undefined;
  const autoTopUps = temporal ? temporalAutoTopUps(temporal.client, { taskQueue: env.TEMPORAL_TASK_QUEUE }) : undefined;
  const signingSecret = env.SIGNING_SECRET ?? (await persistedSecret(env.DATA_DIR));
  const deps = wireCore(env, { orm: db.orm, logger, providers: catalog.parsed.providers, signingSecret, generations, autoTopUps, plans });
  const feed = opts.changes ? await listenForChanges(db.url, logger, (change) => applyChange(deps, change)) : undefined;
  return {
    env,
    logger,
    catalog,
    deps,
    temporal,
    embeddedDatabase: db.embedded,
    databaseUrl: db.url,
    csrfSecret: createHmac('sha256', signingSecret).update('csrf').digest('base64url'),
    async close() {
      await feed?.close();
      await temporal?.close();
      await deps.close();
      await db.close();
    },
  };
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
