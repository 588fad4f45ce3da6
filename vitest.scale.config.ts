import { defineConfig } from 'vitest/config';
import { nodeConditions } from './vitest.node-conditions.ts';

/**
 * `npm run test:scale`: the production layout on one machine (scripts/support/cluster.ts:
 * PostgreSQL, Temporal, Redis, nginx, two API instances, two workers), one cluster per file,
 * files one at a time: each measures shared limits, revocation, idempotency and shutdown across
 * real processes behind a real balancer.
 */
export default defineConfig({
  ...nodeConditions,
  test: {
    include: ['test/scale/**/*.test.ts'],
    reporters: ['default', './test/support/summary-reporter.ts'],
    pool: 'forks',
    fileParallelism: false,
    testTimeout: 300_000,
    hookTimeout: 300_000,
    teardownTimeout: 90_000,
  },
});
