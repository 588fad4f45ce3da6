import { randomBytes } from 'node:crypto';
import pg from 'pg';
import pino from 'pino';
import { inject } from 'vitest';
import type { MikroORM } from '@mikro-orm/postgresql';
import { createAccount } from '../../core/accounts/accounts.ts';
import os from 'node:os';
import path from 'node:path';
import { localDiskStorage } from '../../adapters/storage/local-disk.ts';
import type { AutoTopUpStarter, GenerationStarter, Mailer } from '../../core/ports.ts';
import { testMailbox } from './mail.ts';
import type { ProviderConfig } from '../../core/catalog/schema.ts';
import type { ProviderRegistry } from '../../core/ports.ts';
import type { CoreDeps } from '../../core/context.ts';
import { wireCore } from '../../config/compose.ts';
import { loadEnv } from '../../config/env.ts';
import { openOrm } from '../../core/orm.ts';
import { parseCoins } from '../../core/money/coins.ts';
import { credit, getBalance } from '../../core/money/wallet.ts';
import { createKey } from '../../core/keys/keys.ts';
import type { Plan } from '../../core/payments/plans.ts';

export const silentLogger = pino({ level: 'silent' });

/**
 * This test file's database: its own clone of the migrated template (test/support/file-database.ts,
 * the setup file of the tiers that use a database), or the template itself where no clone was made.
 */
export function testDatabaseUrl(): string {
  return process.env.MAS_TEST_DATABASE_URL ?? inject('databaseUrl');
}

/** An ORM on this test file's database (test/support/file-database.ts). */
export async function openTestOrm(poolMax = 10): Promise<MikroORM> {
  const orm = await openOrm({ url: testDatabaseUrl(), poolMax });
  waitForChargesBeforeReads(orm);
  return orm;
}

/**
 * A test reads the database after a chat as the service's own reads do (core/trpc.ts): after
 * the charges its servers queued are written (they are written behind the answer:
 * core/chat/charge-writer.ts). Every statement of this ORM outside a transaction waits for them
 * first; inside one it must not (a charge may wait for a row the transaction holds).
 */
function waitForChargesBeforeReads(orm: MikroORM): void {
  type Execute = (query: unknown, params?: unknown, method?: unknown, ctx?: unknown, loggerContext?: unknown) => Promise<unknown>;
  const connection = orm.em.getConnection() as unknown as { execute: Execute };
  const execute: Execute = connection.execute.bind(connection);
  connection.execute = async (query, params, method, ctx, loggerContext) => {
    const transacting = ctx != null || (typeof query === 'object' && query !== null && Boolean((query as { client?: { transacting?: boolean } }).client?.transacting));
    if (!transacting) await chargesWritten();
    return execute(query, params, method, ctx, loggerContext);
  };
}

/**
 * Core dependencies for tests, wired by the same composition root as the processes
 * (config/compose.ts), with the given providers and limits and in-memory counting.
 */
export function testDeps(
  orm: MikroORM,
  opts: {
    providers?: ProviderRegistry;
    perMinute?: number;
    holdTtlSeconds?: number;
    /** RESULT_RETENTION_SECONDS: how long a job's result is kept. */
    retentionSeconds?: number;
    catalogTtlMs?: number;
    generations?: GenerationStarter;
    autoTopUps?: AutoTopUpStarter;
    storageDir?: string;
    mediaProviders?: Record<string, ProviderConfig>;
    /** PUBLIC_BASE_URL: the OAuth issuer and the MCP resource derive from it. null: not set (the default http://localhost:$PORT, PORT from `env`). */
    publicBaseUrl?: string | null;
    /** More settings, as environment variables (STRIPE_SECRET_KEY, TOPUP_MIN_USD, …). */
    env?: Record<string, string>;
    /** The subscription plans (PLANS_FILE's). */
    plans?: Plan[];
    /** Where mail goes: the test process's mailbox (test/support/mail.ts) unless given; 'env': the real adapter, as SMTP_URL (env) sets it. */
    mailer?: Mailer | 'env';
    /** The first wait before a media job's provider step is tried again (1 s in production). */
    jobStepRetryInitialMs?: number;
  } = {},
): CoreDeps {
  const env = loadEnv({
    DATA_DIR: path.join(os.tmpdir(), 'mas-test-data'),
    ...(opts.publicBaseUrl === null ? {} : { PUBLIC_BASE_URL: opts.publicBaseUrl ?? 'http://localhost' }),
    // Test servers for input URLs listen on 127.0.0.1; everything else stays refused.
    INPUT_URL_ALLOWLIST: '127.0.0.1',
    RATE_LIMIT_PER_MINUTE: String(opts.perMinute ?? 100_000),
    HOLD_TTL_SECONDS: String(opts.holdTtlSeconds ?? 900),
    RESULT_RETENTION_SECONDS: String(opts.retentionSeconds ?? 3600),
    DEMO_COINS: '0',
    // No DATABASE_URL here (the ORM is given): say 0, not the embedded set-up's welcome credit.
    STARTER_CREDIT_COINS: '0',
    API_PRICE_PERCENT: '50',
    ...opts.env,
  });
  const deps = wireCore(env, {
    orm,
    logger: silentLogger,
    providers: { local: { kind: 'local' }, ...opts.mediaProviders },
    providerEnv: { FAKE_REPLICATE_KEY: 'replicate-secret', FAKE_FAL_KEY: 'fal-secret', FAKE_OPENAI_KEY: 'openai-secret', FAKE_ELEVENLABS_KEY: 'eleven-secret' },
    chatProviders: opts.providers ?? { get: () => undefined },
    storage: localDiskStorage(opts.storageDir ?? path.join(os.tmpdir(), 'mas-test-storage')),
    signingSecret: 'test-signing-secret-test-signing-secret',
    generations: opts.generations,
    autoTopUps: opts.autoTopUps,
    catalogTtlMs: opts.catalogTtlMs ?? 0,
    plans: opts.plans,
    mailer: opts.mailer === 'env' ? undefined : (opts.mailer ?? testMailbox),
    jobStepRetryInitialMs: opts.jobStepRetryInitialMs,
  });
  chargeWriters.add(deps.charges);
  return deps;
}

/** The charge writers of every core this test process wired: a test's own read of the database waits for them. */
const chargeWriters = new Set<CoreDeps['charges']>();

/**
 * Waits until the charges of chats answered by this process's servers are written (they are
 * written behind the answer: core/chat/charge-writer.ts), as the service's own reads do; for a
 * test that reads the database itself after a chat.
 */
export async function chargesWritten(): Promise<void> {
  await Promise.all([...chargeWriters].map((w) => w.settledAll()));
}

/** A brand-new empty database on the test server, for tests that need a first start. */
export function createFreshDatabase(): Promise<{ url: string; drop: () => Promise<void> }> {
  return createDatabase('mas_fresh');
}

/**
 * A database with every migration applied, in about a tenth of a second: a copy of the template
 * the global setup migrated (`CREATE DATABASE … TEMPLATE`), not a rerun of the migrations.
 */
export function cloneTestDatabase(): Promise<{ url: string; drop: () => Promise<void> }> {
  return createDatabase('mas_file', inject('templateDatabase'));
}

async function createDatabase(prefix: string, template?: string): Promise<{ url: string; drop: () => Promise<void> }> {
  const name = `${prefix}_${randomBytes(6).toString('hex')}`;
  const admin = new pg.Client(inject('adminDatabaseUrl'));
  await admin.connect();
  try {
    await admin.query(`create database ${name}${template ? ` template ${template}` : ''}`);
  } finally {
    await admin.end();
  }
  const url = inject('databaseUrl').replace(/\/[^/]+$/, `/${name}`);
  return {
    url,
    async drop() {
      const c = new pg.Client(inject('adminDatabaseUrl'));
      await c.connect();
      await c.query(`drop database if exists ${name} with (force)`);
      await c.end();
    },
  };
}

/** A fresh database with every migration applied (a clone of the migrated template). */
export function migratedFreshDatabase() {
  return cloneTestDatabase();
}

let counter = 0;
export function uniqueEmail(tag = 'user'): string {
  return `${tag}-${process.pid}-${Date.now()}-${++counter}-${randomBytes(3).toString('hex')}@test.example`;
}

/** Fixture builder: an account with the given coins (decimal strings) in each pocket. */
export async function makeAccount(orm: MikroORM, opts: { coins?: string; subscriptionCoins?: string } = {}) {
  const em = orm.em.fork();
  const account = await createAccount(em, { email: uniqueEmail() });
  if (opts.coins && parseCoins(opts.coins) > 0n) {
    await credit(em, { accountId: account.id, kind: 'topup', amount: parseCoins(opts.coins), reference: 'fixture', idempotencyKey: `fixture-topup:${account.id}`, description: 'Top-up' });
  }
  if (opts.subscriptionCoins && parseCoins(opts.subscriptionCoins) > 0n) {
    await credit(em, { accountId: account.id, kind: 'subscription_grant', amount: parseCoins(opts.subscriptionCoins), reference: 'fixture', idempotencyKey: `fixture-grant:${account.id}`, description: 'Subscription coins' });
  }
  return account;
}

export async function makeKey(orm: MikroORM, accountId: string, name?: string) {
  return createKey(orm.em.fork(), accountId, name ? { name } : {});
}

/** The invariants every wallet must satisfy at every moment. */
export async function walletInvariants(orm: MikroORM, accountId: string) {
  await chargesWritten();
  const em = orm.em.fork();
  const balance = await getBalance(em, accountId);
  const [sums] = await em.execute<{ total: string; sub: string; pur: string; held: string }[]>(
    `select coalesce(sum(amount_micro), 0)::text as total,
            coalesce(sum(amount_micro) filter (where pocket = 'subscription'), 0)::text as sub,
            coalesce(sum(amount_micro) filter (where pocket = 'purchased'), 0)::text as pur,
            coalesce(sum(amount_micro) filter (where pocket = 'held'), 0)::text as held
     from ledger_entries where account_id = ?`,
    [accountId],
  );
  const [holds] = await em.execute<{ open: string }[]>(
    `select coalesce(sum(amount_micro), 0)::text as open from holds where account_id = ? and status = 'open'`,
    [accountId],
  );
  return {
    balance,
    ledgerTotal: BigInt(sums!.total),
    ledgerByPocket: { subscription: BigInt(sums!.sub), purchased: BigInt(sums!.pur), held: BigInt(sums!.held) },
    openHolds: BigInt(holds!.open),
  };
}

/** A failed job and the hold it released, as the job path leaves one (for pages that list failed jobs). */
export async function makeFailedJob(orm: MikroORM, accountId: string, keyId: string, message = 'The provider failed.'): Promise<string> {
  const id = `gen_${randomBytes(12).toString('hex')}`;
  const hold = `hold_${randomBytes(12).toString('hex')}`;
  const em = orm.em.fork();
  await em.execute(
    `insert into holds (id, account_id, amount_micro, from_subscription_micro, from_purchased_micro, status, captured_micro, reference, expires_at, ended_at)
     values (?, ?, 2000000, 0, 2000000, 'released', 0, ?, now() + interval '1 hour', now())`,
    [hold, accountId, id],
  );
  await em.execute(
    `insert into generations (id, account_id, key_id, model_id, status, prompt, settings, inputs, price_micro, cost_micro, hold_id, error, completed_at)
     values (?, ?, ?, 'mas/image-demo', 'failed', 'a lighthouse', '{}', '{}', 2000000, 0, ?, ?::jsonb, now())`,
    [id, accountId, keyId, hold, JSON.stringify({ message, code: 'upstream_error' })],
  );
  return id;
}
