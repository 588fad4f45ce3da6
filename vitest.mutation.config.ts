import { defineConfig } from 'vitest/config';
import { nodeConditions } from './vitest.node-conditions.ts';

/**
 * The tests `npm run test:mutation` runs against each mutant (stryker.config.mjs): the unit
 * tests and the integration tests that exercise the modules where money and limits live.
 */
export const MUTATION_TESTS = [
  'test/unit/coins.test.ts',
  // The span names and attributes of the reservation and the settle (core/money/holds.ts, hold-batcher.ts) and the job's trace id.
  'test/integration/tracing.test.ts',
  'test/unit/coins-edges.test.ts',
  'test/unit/pricing.test.ts',
  'test/unit/pricing-edges.test.ts',
  'test/unit/tokens.test.ts',
  'test/unit/chat-billing.test.ts',
  // The charges written behind the answer (core/chat/charge-writer.ts): batching, reads that wait, losses logged; and counted.
  'test/unit/charge-writer.test.ts',
  'test/integration/chat-round-trips.test.ts',
  'test/integration/chat-records.test.ts',
  // runChat over several routes: fallback, refusals, breakers told once, the route that served.
  'test/unit/chat-failover.test.ts',
  'test/unit/key-secret.test.ts',
  'test/unit/auth-limits.test.ts',
  // Sign-in limits (pair, address, e-mail) and device cookies.
  'test/unit/sign-in-limits.test.ts',
  'test/integration/holds.test.ts',
  'test/integration/money-sql-rules.test.ts',
  'test/integration/money-edges.test.ts',
  'test/integration/wallet-model.test.ts',
  'test/integration/wallet-concurrency.test.ts',
  'test/integration/hold-batch-equivalence.test.ts',
  'test/integration/hold-batcher.test.ts',
  'test/integration/sweep.test.ts',
  'test/integration/wallet-history.test.ts',
  'test/integration/chat.test.ts',
  'test/integration/generations.test.ts',
  'test/integration/generation-billing.test.ts',
  'test/integration/keys.test.ts',
  'test/integration/oauth.test.ts',
  // Loopback OAuth: one resource for localhost, 127.0.0.1 and [::1] at the default base URL (core/oauth resourceFor).
  'test/unit/oauth-loopback.test.ts',
  'test/integration/oauth-loopback.test.ts',
  'test/integration/app-connections.test.ts',
  'test/integration/rate-limit.test.ts',
  'test/integration/rate-limit-redis.test.ts',
  'test/integration/sign-in-attempts.test.ts',
  'test/integration/password-reset.test.ts',
  'test/integration/principals.test.ts',
  'test/integration/auth-edges.test.ts',
  'test/integration/account-session.test.ts',
  'test/integration/admin-actions.test.ts',
  'test/integration/rest.test.ts',
  // Payments taken back: how the customer's history shows them (core/money/history.ts).
  'test/integration/payments-refunds.test.ts',
  // The history in words (core/money/history-details.ts) and the usage sums.
  'test/integration/account-usage.test.ts',
  'test/unit/history-details.test.ts',
  // A key's spend limit, expiry and allowed models (core/auth/api-keys.ts, core/money/holds.ts, core/keys/keys.ts).
  'test/integration/key-limits.test.ts',
  'test/unit/key-limits.test.ts',
  // Organizations (issue 49): the roles' 404 and 403 (core/organizations/roles.ts), and member limits over HTTP (core/money/holds.ts).
  'test/integration/organization-roles.test.ts',
  'test/integration/organization-limits.test.ts',
];

export default defineConfig({
  ...nodeConditions,
  test: {
    globalSetup: ['test/mutation/global-setup.ts'],
    setupFiles: ['test/mutation/no-shrink.ts'],
    include: MUTATION_TESTS,
    pool: 'forks',
    // One process runs every selected file of a mutant's run, importing the modules once: each
    // mutant runs the tests that cover it, and a fresh process per file would cost seconds each.
    isolate: false,
    testTimeout: 60_000,
    hookTimeout: 120_000,
    teardownTimeout: 60_000,
  },
});
