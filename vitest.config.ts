import { defineConfig } from 'vitest/config';
import { nodeConditions } from './vitest.node-conditions.ts';

export default defineConfig({
  ...nodeConditions,
  test: {
    // One real PostgreSQL (embedded, in a fresh temporary DATA_DIR) for the whole run.
    globalSetup: ['test/support/global-setup.ts'],
    include: ['test/**/*.test.ts'],
    // The fault and hostile-input suite and the cluster suite run on their own: `npm run test:reliability`, `npm run test:scale`.
    exclude: ['test/reliability/**', 'test/scale/**', 'node_modules/**', 'test/artifacts/**'],
    reporters: ['default', './test/support/summary-reporter.ts'],
    pool: 'forks',
    testTimeout: 60_000,
    hookTimeout: 120_000,
    teardownTimeout: 60_000,
  },
});
