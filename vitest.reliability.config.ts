import { defineConfig } from 'vitest/config';
import { nodeConditions } from './vitest.node-conditions.ts';

/**
 * `npm run test:reliability` (scripts/reliability.ts runs this, then the schema fuzzer): real
 * processes under real faults. Same real PostgreSQL and Temporal dev server as `npm test`
 * (test/support/global-setup.ts); files run one at a time, so that the faults one injects
 * (killed processes, stopped servers) and the figures it measures are its own.
 */
export default defineConfig({
  ...nodeConditions,
  test: {
    globalSetup: ['test/support/global-setup.ts'],
    include: ['test/reliability/**/*.test.ts'],
    reporters: ['default', './test/support/summary-reporter.ts'],
    pool: 'forks',
    fileParallelism: false,
    testTimeout: 600_000,
    hookTimeout: 180_000,
    teardownTimeout: 60_000,
  },
});
