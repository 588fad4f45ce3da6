import path from 'node:path';
import { z } from 'zod';
import { parseCoins } from '../core/money/coins.ts';
import { CURRENCY, parseUsdCents } from '../core/payments/amounts.ts';

/**
 * Every setting of the service is an environment variable, parsed here once at boot.
 * The README's configuration table documents each one; keep the two in step.
 */
const port = z.coerce.number().int().min(0).max(65535);
const positiveInt = z.coerce.number().int().positive();
/** An optional string where empty means unset, as shells and .env files often leave it. */
const optional = z
  .string()
  .trim()
  .optional()
  .transform((v) => (v ? v : undefined));
/** Dollars ("5", "12.50") as integer cents, within what Stripe charges in USD ($0.50 to $999,999.99). */
const usdCents = (fallback: string) =>
  z
    .string()
    .default(fallback)
    .transform((v, ctx) => {
      const cents = parseUsdCents(v);
      if (cents !== null && cents >= 50 && cents <= 99_999_999) return cents;
      ctx.addIssue({ code: 'custom', message: 'must be an amount in USD from 0.50 to 999999.99, with at most 2 decimals' });
      return z.NEVER;
    });

const envSchema = z
  .object({
    PORT: port.default(8080),
    HOST: z.string().min(1).default('0.0.0.0'),
    PUBLIC_BASE_URL: optional.pipe(z.url({ protocol: /^https?$/, error: 'must be an http(s) URL' }).optional()),
    DATABASE_URL: optional.pipe(
        z
          .string()
          .regex(/^postgres(ql)?:\/\//, 'must be a postgres:// or postgresql:// URL')
          .optional(),
      ),
    DATABASE_POOL_MAX: positiveInt.max(1000).default(10),
    DATA_DIR: z.string().min(1).default('./.data'),
    LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
    /** `json` (one JSON object per line, for machines); `pretty`: coloured text for a person at a terminal (pino-pretty). */
    LOG_FORMAT: z.enum(['json', 'pretty']).default('json'),
    DEMO_COINS: z
      .string()
      .default('1000')
      .transform((v, ctx) => {
        try {
          return parseCoins(v);
        } catch (err) {
          ctx.addIssue({ code: 'custom', message: (err as Error).message });
          return z.NEVER;
        }
      }),
    /**
     * Coins granted once to each account whose e-mail address is confirmed (docs/accounts.md,
     * "Welcome credit"). Unset: 1000 with the embedded database (a machine trying the service),
     * 0 with DATABASE_URL (a deployment gives credit only when its operator says so).
     */
    STARTER_CREDIT_COINS: optional.transform((v, ctx) => {
      if (v === undefined) return undefined;
      try {
        return parseCoins(v);
      } catch (err) {
        ctx.addIssue({ code: 'custom', message: (err as Error).message });
        return z.NEVER;
      }
    }),
    HOLD_TTL_SECONDS: positiveInt.default(900),
    HOLD_SWEEP_INTERVAL_SECONDS: positiveInt.default(30),
    /** The longest an ended chat's charge waits to be written with others (docs/chat.md, "Charges are written behind the answer"): what a killed process can lose. */
    USAGE_FLUSH_MS: z.coerce.number().int().min(0).max(100).default(20),
    CATALOG_FILE: z.string().min(1).default('config/models.yaml'),
    API_PRICE_PERCENT: z.coerce.number().int().min(1).max(1000).default(50),
    RATE_LIMIT_PER_MINUTE: positiveInt.default(120),
    /** A route's circuit breaker opens after this many failures within BREAKER_WINDOW_SECONDS, and lets a probe through after BREAKER_COOL_DOWN_SECONDS (docs/providers.md). */
    BREAKER_FAILURES: positiveInt.default(5),
    BREAKER_WINDOW_SECONDS: positiveInt.default(60),
    BREAKER_COOL_DOWN_SECONDS: positiveInt.default(30),
    TEMPORAL_ADDRESS: optional.pipe(z.string().regex(/^[^\s/:]+:\d+$/, 'must be host:port').optional()),
    TEMPORAL_NAMESPACE: z.string().min(1).default('default'),
    /** The Temporal Web UI of an external cluster, for the admin API's job links (the embedded dev server's is known). */
    TEMPORAL_UI_URL: optional.pipe(z.url({ protocol: /^https?$/ }).optional()),
    TEMPORAL_TASK_QUEUE: z.string().regex(/^[\w.-]{1,100}$/).default('mas'),
    RUN_WORKER: z
      .enum(['true', 'false', ''])
      .default('true')
      .transform((v) => v !== 'false'),
    SIGNING_SECRET: optional.pipe(z.string().min(32, 'must be at least 32 characters').optional()),
    INPUT_URL_ALLOWLIST: z
      .string()
      .default('')
      .transform((v) => v.split(',').map((h) => h.trim()).filter(Boolean)),
    RESULT_RETENTION_SECONDS: positiveInt.default(3600),
    STORAGE_DRIVER: z.enum(['local', 's3']).default('local'),
    S3_BUCKET: optional,
    S3_REGION: z.string().min(1).default('us-east-1'),
    S3_ENDPOINT: optional.pipe(z.url({ protocol: /^https?$/ }).optional()),
    S3_FORCE_PATH_STYLE: z
      .enum(['true', 'false', ''])
      .default('false')
      .transform((v) => v === 'true'),
    S3_ACCESS_KEY_ID: optional,
    S3_SECRET_ACCESS_KEY: optional,
    REDIS_URL: optional.pipe(z.string().regex(/^rediss?:\/\//, 'must be a redis:// or rediss:// URL').optional()),
    SHUTDOWN_TIMEOUT_SECONDS: positiveInt.default(25),
    /** On SIGTERM, how long an API instance keeps serving with /readyz failing before it stops accepting (for balancers that probe readiness). */
    SHUTDOWN_READINESS_DELAY_SECONDS: z.coerce.number().int().min(0).max(300).default(0),
    METRICS_TOKEN: optional,
    /** The worker process (`npm run worker`, npm start's child) serves its own /metrics (its media upstream calls, its breakers) on this port. Unset: none. */
    WORKER_METRICS_PORT: optional.pipe(z.string().regex(/^\d+$/, 'must be a port number').transform(Number).pipe(z.number().int().min(1).max(65535)).optional()),
    /** false; true: one proxy (the balancer) in front; a number: that many proxies in front. */
    TRUST_PROXY: z
      .string()
      .trim()
      .default('false')
      .refine((v) => /^(true|false|[1-9]|)$/.test(v), 'must be true, false or a number of proxies from 1 to 9')
      .transform((v) => (v === 'true' ? 1 : /^[1-9]$/.test(v) ? Number(v) : false)),
    MCP_GENERATE_WAIT_SECONDS: z.coerce.number().int().min(0).max(600).default(100),
    /** How long `generate` waits when the call carries no progressToken: under the 60 s after which clients without progress give up. */
    MCP_GENERATE_QUIET_WAIT_SECONDS: z.coerce.number().int().min(0).max(600).default(50),
    SIGNUP: z
      .enum(['open', 'closed', ''])
      .default('open')
      .transform((v) => (v === 'closed' ? 'closed' : 'open')),
    /** Mail (docs/accounts.md): unset, each message is written to DATA_DIR/mail/*.eml and its link logged (dev only). */
    SMTP_URL: optional.pipe(z.string().regex(/^smtps?:\/\/\S+$/, 'must be an smtp:// or smtps:// URL, such as smtp://user:pass@host:587').optional()),
    /** Unset: `Model Access Service <no-reply@HOST>`, HOST being PUBLIC_BASE_URL's (mailFromDefault). */
    MAIL_FROM: optional.pipe(z.string().min(3).max(300).optional()),
    MCP_ALLOWED_HOSTS: z
      .string()
      .default('')
      .transform((v) => v.split(',').map((h) => h.trim().toLowerCase()).filter(Boolean)),
    /** Payments (docs/payments.md): unset, payments are off and coins enter only through operators. */
    STRIPE_SECRET_KEY: optional.pipe(z.string().regex(/^(sk|rk)_(test|live)_\S+$/, 'must be a Stripe secret key (sk_test_…, sk_live_…) or restricted key (rk_…)').optional()),
    STRIPE_WEBHOOK_SECRET: optional.pipe(z.string().regex(/^whsec_\S+$/, "must be the webhook endpoint's signing secret (whsec_…)").optional()),
    /** Tests: stripe-mock's address instead of Stripe's API. */
    STRIPE_API_URL: optional.pipe(
      z
        .url({ protocol: /^https?$/, error: 'must be an http(s)://host:port URL' })
        .refine((u) => /^https?:\/\/[^/]+\/?$/.test(u), 'must be http(s)://host:port, with no path')
        .optional(),
    ),
    /** Coins are defined in US dollars (1 USD = 1000 coins): no other currency is sold. */
    STRIPE_CURRENCY: z.enum([CURRENCY], { error: `must be ${CURRENCY}: coins are priced in US dollars` }).default(CURRENCY),
    TOPUP_MIN_USD: usdCents('5'),
    TOPUP_MAX_USD: usdCents('10000'),
    /** Auto top-up charges per account in any 24 hours (docs/payments.md); 0 turns auto top-up off on this server. */
    AUTO_TOPUP_MAX_PER_DAY: z.coerce.number().int().min(0).max(100).default(3),
    PLANS_FILE: z.string().min(1).default('config/plans.yaml'),
  })
  .refine((env) => env.STORAGE_DRIVER !== 's3' || env.S3_BUCKET, { path: ['S3_BUCKET'], message: 'is required when STORAGE_DRIVER=s3' })
  .refine((env) => !env.STRIPE_SECRET_KEY || env.STRIPE_WEBHOOK_SECRET, {
    path: ['STRIPE_WEBHOOK_SECRET'],
    message: 'is required when STRIPE_SECRET_KEY is set: only verified webhooks credit payments',
  })
  .refine((env) => env.TOPUP_MIN_USD <= env.TOPUP_MAX_USD, { path: ['TOPUP_MIN_USD'], message: 'must not be more than TOPUP_MAX_USD' })
  .transform((env) => ({
    ...env,
    DATA_DIR: path.resolve(env.DATA_DIR),
    CATALOG_FILE: path.resolve(env.CATALOG_FILE),
    PLANS_FILE: path.resolve(env.PLANS_FILE),
    PUBLIC_BASE_URL: publicBaseUrl(env),
    STARTER_CREDIT_COINS: env.STARTER_CREDIT_COINS ?? (env.DATABASE_URL ? 0n : EMBEDDED_STARTER_CREDIT),
    MAIL_FROM: env.MAIL_FROM ?? mailFromDefault(publicBaseUrl(env)),
    /** PUBLIC_BASE_URL was not set: the default http://localhost:$PORT (OAuth then takes any loopback host as this one). */
    PUBLIC_BASE_URL_IS_DEFAULT: env.PUBLIC_BASE_URL === undefined,
  }));

export type Env = z.output<typeof envSchema>;

/**
 * Where the pages and the API are reached from outside: PUBLIC_BASE_URL, else
 * http://localhost:$PORT. The one resolution of it: the server's links (the demo account's,
 * the API's) and the CLI's (`mas account login-link`, `mas admin create`) both come from here,
 * through loadEnv, so the CLI run with the server's environment prints the server's address.
 */
export function publicBaseUrl(env: { PUBLIC_BASE_URL?: string | undefined; PORT: number }): string {
  return (env.PUBLIC_BASE_URL ?? `http://localhost:${env.PORT}`).replace(/\/+$/, '');
}

/** The welcome credit of the embedded set-up (no DATABASE_URL): a new sign-up can try the models at once. */
export const EMBEDDED_STARTER_CREDIT = parseCoins('1000');

/**
 * The `From` of the service's mail when MAIL_FROM is unset: an address on the host people reach
 * the service at, so that mail does not come from `localhost` once PUBLIC_BASE_URL is set. An IP
 * address becomes an address literal (`no-reply@[192.0.2.1]`, RFC 5321).
 */
export function mailFromDefault(publicBaseUrl: string): string {
  const host = new URL(publicBaseUrl).hostname;
  const domain = /^\d{1,3}(\.\d{1,3}){3}$/.test(host) ? `[${host}]` : host.startsWith('[') ? `[IPv6:${host.slice(1, -1)}]` : host;
  return `Model Access Service <no-reply@${domain}>`;
}

export class ConfigError extends Error {}

/** Parses the environment; a bad value throws one line naming the variable. */
export function loadEnv(source: NodeJS.ProcessEnv = process.env): Env {
  const result = envSchema.safeParse(source);
  if (result.success) return result.data;
  const issue = result.error.issues[0]!;
  const name = issue.path.join('.') || 'environment';
  const got = typeof source[name] === 'string' ? ` (got ${JSON.stringify(redact(name, source[name]!))})` : '';
  throw new ConfigError(`Invalid configuration: ${name}: ${issue.message}${got}`);
}

function redact(name: string, value: string): string {
  if (/TOKEN|SECRET|PASSWORD|KEY/.test(name)) return '***';
  if (name === 'DATABASE_URL' || name === 'REDIS_URL' || name === 'SMTP_URL') return value.replace(/\/\/([^:@/]*):[^@]*@/, '//$1:***@');
  return value;
}

/** For the entry points (server, worker): a bad value prints one line and exits 1. */
export function loadEnvOrExit(): Env {
  try {
    return loadEnv();
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    process.stderr.write(`${err.message}\n`);
    process.exit(1);
  }
}
