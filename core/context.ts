import type { MikroORM, EntityManager } from '@mikro-orm/postgresql';
import type { Logger } from 'pino';
import type { SignInLimits } from './accounts/attempts.ts';
import type { AccountLinks } from './accounts/mails.ts';
import { KeyLookup, LastUsedRecorder } from './auth/api-keys.ts';
import type { DeviceCookies } from './auth/device-cookies.ts';
import { ChargeWriter } from './chat/charge-writer.ts';
import type { Credential } from './auth/principals.ts';
import { ModelCatalog } from './catalog/catalog.ts';
import type { Execute } from './db/batch.ts';
import { CoreError } from './errors.ts';
import type { Micro } from './money/coins.ts';
import { HoldBatcher } from './money/hold-batcher.ts';
import type { OAuthConfig } from './oauth/authorize.ts';
import { ClientDocuments } from './oauth/clients.ts';
import type { Plan } from './payments/plans.ts';
import type {
  AutoTopUpStarter,
  CheckoutReturn,
  Clock,
  GenerationStarter,
  Mailer,
  MediaProviderRegistry,
  PaymentProvider,
  ProviderRegistry,
  RateLimiter,
  RateLimitState,
  ResultStorage,
  UrlGuard,
  UrlSigner,
  WebhookTransport,
  RouteBreakers,
} from './ports.ts';

/** Settings core needs, taken from the environment by the composition root. */
export interface CoreConfig {
  /** How long a reservation may stay open before the sweep releases it. */
  holdTtlSeconds: number;
  /** USAGE_FLUSH_MS: the longest an ended chat's charge waits to share a statement with others (core/chat/charge-writer.ts). */
  usageFlushMs: number;
  /** How long a succeeded job's result is kept (and its link valid) before the retention schedule deletes it. */
  resultRetentionSeconds: number;
  /** Coins given to the demo account created on the first start. */
  demoCoins: Micro;
  /** STARTER_CREDIT_COINS: the welcome credit each account gets once, when its e-mail address is confirmed (core/accounts/welcome-credit.ts); 0: none. */
  starterCreditCoins: Micro;
  /** The API price as a percentage of the catalog's in-app price (SPEC: 50). */
  apiPricePercent: bigint;
  /** SIGNUP=open|closed: whether anyone may create an account on the account pages (`accounts.signUp`). */
  signupOpen: boolean;
  /** The OAuth authorization server for MCP clients: its issuer and the resource its tokens are for. */
  oauth: OAuthConfig;
  payments: PaymentsConfig;
  /** Where the links of the service's mails lead (the account pages). */
  links: AccountLinks;
  /**
   * The first wait before a media job's provider step is tried again (its backoff doubles from
   * there): 1 s; the tests shorten it, so that a job that fails over takes milliseconds.
   */
  jobStepRetryInitialMs?: number | undefined;
}

/** What customers may pay and how (docs/payments.md); used only while payments are on (`CoreDeps.payments`). */
export interface PaymentsConfig {
  /** Lower-case ISO code; coins are defined in US dollars, so `usd`. */
  currency: string;
  topUpMinCents: number;
  topUpMaxCents: number;
  plans: Plan[];
  /** How old a webhook's signature may be at arrival: Stripe's own default, 5 minutes. */
  webhookToleranceSeconds: number;
  /** Where the payment page sends the customer back: the account pages (a plan's Checkout and the customer portal may have their own). */
  returnUrls: CheckoutReturn & { subscriptionSuccessUrl?: string | undefined; portalReturnUrl?: string | undefined };
  /** At most this many auto top-up charges per account in any 24 hours (AUTO_TOPUP_MAX_PER_DAY). */
  autoTopUpMaxPerDay: number;
}

/**
 * Everything core needs, wired once per process by the composition root (config/compose.ts).
 * Use cases take only the members they use (`Pick<CoreDeps, …>`), so a test passes just those.
 */
export interface CoreDeps {
  orm: MikroORM;
  config: CoreConfig;
  logger: Logger;
  clock: Clock;
  lastUsed: LastUsedRecorder;
  /** Key look-ups, batched across concurrent requests. */
  keys: KeyLookup;
  /** Reserve and settle outside a transaction (chat), batched across concurrent requests. */
  holds: HoldBatcher;
  /** Chat holds' ends (charge, ledger entries, completion record), written behind the answer in batches (core/chat/charge-writer.ts). */
  charges: ChargeWriter;
  catalog: ModelCatalog;
  /** OAuth clients described by a metadata document at their client id URL, fetched and cached. */
  clientDocuments: ClientDocuments;
  providers: ProviderRegistry;
  rateLimiter: RateLimiter;
  /** Sign-in, sign-up and login-link attempts, counted per email and per client address. */
  attempts: { perEmail: RateLimiter; perIp: RateLimiter };
  /** Sign-in's failures, per (e-mail, address) pair, per address and per e-mail (core/accounts/attempts.ts). */
  signInLimits: SignInLimits;
  /** Signs and checks the device cookie a browser gets at each sign-in. */
  devices: DeviceCookies;
  /** Mail to people: sign-up confirmation, password reset, low-balance notice. */
  mailer: Mailer;
  media: MediaProviderRegistry;
  /** One circuit breaker per route of the catalog's models (chat and media alike). */
  routeBreakers: RouteBreakers;
  storage: ResultStorage;
  urlGuard: UrlGuard;
  signer: UrlSigner;
  webhooks: WebhookTransport;
  /** Starts a job's workflow; the API server and the worker wire Temporal here. */
  generations: GenerationStarter;
  /** Starts an account's auto top-up workflow; the API server and the worker wire Temporal here. */
  autoTopUps: AutoTopUpStarter;
  /** The payment provider (Stripe); undefined when payments are off (no STRIPE_SECRET_KEY). */
  payments: PaymentProvider | undefined;
}

/** For processes that run no jobs (the CLI): starting one is refused, cleanly. */
const noAutoTopUps: AutoTopUpStarter = {
  start: () => Promise.reject(new CoreError('unavailable', 'This process cannot start auto top-ups.', { reason: 'job_runner_unavailable' })),
};

const noJobRunner: GenerationStarter = {
  start: () => Promise.reject(new CoreError('unavailable', 'This process cannot start jobs.', { reason: 'job_runner_unavailable' })),
  cancel: () => Promise.reject(new CoreError('unavailable', 'This process cannot cancel jobs.', { reason: 'job_runner_unavailable' })),
  state: () => Promise.reject(new CoreError('unavailable', 'This process cannot see job workflows.', { reason: 'job_runner_unavailable' })),
  deliverWebhook: () => Promise.reject(new CoreError('unavailable', 'This process cannot deliver webhooks.', { reason: 'job_runner_unavailable' })),
};

export function createCoreDeps(
  args: Omit<CoreDeps, 'clock' | 'lastUsed' | 'keys' | 'holds' | 'charges' | 'catalog' | 'generations' | 'autoTopUps' | 'clientDocuments' | 'payments'> & {
    /** Runs the hot path's batched statements (adapters/db/statement-pool.ts). */
    execute: Execute;
    generations?: GenerationStarter | undefined;
    autoTopUps?: AutoTopUpStarter | undefined;
    payments?: PaymentProvider | undefined;
    clock?: Clock | undefined;
    catalogTtlMs?: number | undefined;
  },
): CoreDeps {
  const { execute } = args;
  return {
    orm: args.orm,
    config: args.config,
    logger: args.logger,
    providers: args.providers,
    rateLimiter: args.rateLimiter,
    attempts: args.attempts,
    signInLimits: args.signInLimits,
    devices: args.devices,
    mailer: args.mailer,
    media: args.media,
    routeBreakers: args.routeBreakers,
    storage: args.storage,
    urlGuard: args.urlGuard,
    signer: args.signer,
    webhooks: args.webhooks,
    generations: args.generations ?? noJobRunner,
    autoTopUps: args.autoTopUps ?? noAutoTopUps,
    payments: args.payments,
    clock: args.clock ?? (() => new Date()),
    lastUsed: new LastUsedRecorder(execute, args.logger),
    keys: new KeyLookup(execute),
    holds: new HoldBatcher(execute),
    charges: new ChargeWriter(execute, args.logger, { flushMs: args.config.usageFlushMs }),
    catalog: new ModelCatalog(args.logger, args.catalogTtlMs),
    clientDocuments: new ClientDocuments(args.urlGuard, args.config.oauth.httpClientIdHosts),
  };
}

/** What a call tells its adapter besides its result (REST turns it into headers). */
export interface CallMeta {
  rateLimit?: RateLimitState;
}

export interface CoreContext {
  deps: CoreDeps;
  /** A fork of the EntityManager for this one call: never the global one. */
  em: EntityManager;
  /** The caller's credential as the adapter received it; the base procedures check it. */
  credential: Credential;
  requestId: string | undefined;
  /** The client's address as the transport saw it (behind a proxy, with TRUST_PROXY): attempt limits count by it. */
  clientIp: string | undefined;
  /** The device cookie the browser sent, if any (sign-in: core/auth/device-cookies.ts). */
  device: string | undefined;
  /** Aborted when the client goes away: long calls (chat) stop their upstream work. */
  signal: AbortSignal;
  meta: CallMeta;
}

export function createContext(
  deps: CoreDeps,
  credential: Credential,
  opts: { requestId?: string | undefined; clientIp?: string | undefined; device?: string | undefined; signal?: AbortSignal | undefined; meta?: CallMeta | undefined } = {},
): CoreContext {
  return {
    deps,
    em: deps.orm.em.fork(),
    credential,
    requestId: opts.requestId,
    clientIp: opts.clientIp,
    device: opts.device,
    signal: opts.signal ?? new AbortController().signal,
    meta: opts.meta ?? {},
  };
}
