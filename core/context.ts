import type { MikroORM, EntityManager } from '@mikro-orm/postgresql';
import type { Logger } from 'pino';
import { ModelCatalog } from './catalog/catalog.ts';
import type { ProviderRegistry } from './chat/provider.ts';
import type { Execute } from './db/batch.ts';
import { KeyLookup, LastUsedRecorder } from './keys/authenticate.ts';
import { HoldBatcher } from './money/hold-batcher.ts';
import type { RateLimiter, RateLimitState } from './limits/rate-limit.ts';
import type { GenerationStarter, MediaProviderRegistry, ResultStorage, UrlGuard } from './generations/ports.ts';
import type { UrlSigner } from './generations/signed-url.ts';
import type { WebhookTransport } from './webhooks/webhooks.ts';
import { CoreError } from './errors.ts';
import type { Micro } from './money/coins.ts';

/** Settings core needs, taken from the environment by the composition root. */
export interface CoreConfig {
  /** How long a reservation may stay open before the sweep releases it. */
  holdTtlSeconds: number;
  /** Coins given to the demo account created on the first start. */
  demoCoins: Micro;
  /** The API price as a percentage of the catalog's in-app price (SPEC: 50). */
  apiPricePercent: bigint;
}

/** Everything core needs from outside, wired once per process. */
export interface CoreDeps {
  orm: MikroORM;
  config: CoreConfig;
  logger: Logger;
  clock: () => Date;
  lastUsed: LastUsedRecorder;
  /** Key look-ups, batched across concurrent requests. */
  keys: KeyLookup;
  /** Reserve and settle outside a transaction (chat), batched across concurrent requests. */
  holds: HoldBatcher;
  catalog: ModelCatalog;
  providers: ProviderRegistry;
  rateLimiter: RateLimiter;
  media: MediaProviderRegistry;
  storage: ResultStorage;
  urlGuard: UrlGuard;
  signer: UrlSigner;
  webhooks: WebhookTransport;
  /** Starts a job's workflow; the API server wires Temporal here. */
  generations: GenerationStarter;
}

/** For processes that run no jobs (the CLI): starting one is refused, cleanly. */
const noJobRunner: GenerationStarter = {
  start: () => Promise.reject(new CoreError('unavailable', 'This process cannot start jobs.', { reason: 'job_runner_unavailable' })),
  cancel: () => Promise.reject(new CoreError('unavailable', 'This process cannot cancel jobs.', { reason: 'job_runner_unavailable' })),
};

export function createCoreDeps(
  args: Omit<CoreDeps, 'clock' | 'lastUsed' | 'keys' | 'holds' | 'catalog' | 'generations'> & {
    /** Runs the hot path's batched statements (adapters/db/statement-pool.ts). */
    execute: Execute;
    generations?: GenerationStarter;
    clock?: () => Date;
    catalogTtlMs?: number;
  },
): CoreDeps {
  const { execute } = args;
  return {
    orm: args.orm,
    config: args.config,
    logger: args.logger,
    providers: args.providers,
    rateLimiter: args.rateLimiter,
    media: args.media,
    storage: args.storage,
    urlGuard: args.urlGuard,
    signer: args.signer,
    webhooks: args.webhooks,
    generations: args.generations ?? noJobRunner,
    clock: args.clock ?? (() => new Date()),
    lastUsed: new LastUsedRecorder(execute, args.logger),
    keys: new KeyLookup(execute),
    holds: new HoldBatcher(execute),
    catalog: new ModelCatalog(args.logger, args.catalogTtlMs),
  };
}

/** Who is calling: an API key's bearer token, or the operator (CLI, admin API). */
export type Caller = { kind: 'api'; bearer: string | null } | { kind: 'operator' } | { kind: 'public' };

/** What a call tells its adapter besides its result (REST turns it into headers). */
export interface CallMeta {
  rateLimit?: RateLimitState;
}

export interface CoreContext {
  deps: CoreDeps;
  /** A fork of the EntityManager for this one request: never the global one. */
  em: EntityManager;
  caller: Caller;
  requestId: string | undefined;
  /** Aborted when the client goes away: long calls (chat) stop their upstream work. */
  signal: AbortSignal;
  meta: CallMeta;
}

export function createContext(
  deps: CoreDeps,
  caller: Caller,
  opts: { requestId?: string; signal?: AbortSignal; meta?: CallMeta } = {},
): CoreContext {
  return {
    deps,
    em: deps.orm.em.fork(),
    caller,
    requestId: opts.requestId,
    signal: opts.signal ?? new AbortController().signal,
    meta: opts.meta ?? {},
  };
}
