import { defineConfig, type TestProjectInlineConfiguration } from 'vitest/config';
import { nodeConditions } from './vitest.node-conditions.ts';
import LongFirstSequencer from './test/support/sequencer.ts';

/**
 * `npm test`: four tiers, each a vitest project with its own worker count (test/README.md says
 * which tier a test belongs in). Vitest runs projects with different worker counts one after
 * the other (`sequence.groupOrder`), cheapest first, so that a broken unit test fails the run in
 * seconds. One global setup for all of them (test/support/global-setup.ts): one embedded
 * PostgreSQL with a migrated template database, one Temporal dev server, the built dist/.
 *
 * The counts were measured on the 2-core machine this project runs on (test/README.md). Most
 * of an integration or e2e file's time is spent waiting on PostgreSQL, Temporal, a child process
 * or a browser, so those tiers run more files at once than there are cores.
 * `MAS_TEST_WORKERS=tier:n,tier:n` overrides them for a run (`integration:2` on a smaller machine).
 */
const DEFAULT_WORKERS = { unit: 2, integration: 5, browser: 2, e2e: 3 } as const;
type Tier = keyof typeof DEFAULT_WORKERS;

function workers(tier: Tier): number {
  for (const pair of (process.env.MAS_TEST_WORKERS ?? '').split(',')) {
    const [name, n] = pair.split(':');
    if (name === tier && Number(n) >= 1) return Math.floor(Number(n));
  }
  return DEFAULT_WORKERS[tier];
}

const shared = {
  reporters: ['default', './test/support/summary-reporter.ts'],
  testTimeout: 60_000,
  hookTimeout: 120_000,
  teardownTimeout: 60_000,
};

function tier(name: Tier, order: number, test: TestProjectInlineConfiguration['test']): TestProjectInlineConfiguration {
  return {
    ...nodeConditions,
    test: { name, maxWorkers: workers(name), sequence: { groupOrder: order }, ...shared, ...test },
  };
}

export default defineConfig({
  ...nodeConditions,
  test: {
    // Once for every tier: PostgreSQL, Temporal, dist/ (test/support/global-setup.ts).
    globalSetup: ['test/support/global-setup.ts'],
    // The longest files first in each tier, on a fresh clone too (test/support/sequencer.ts).
    sequence: { sequencer: LongFirstSequencer },
    ...shared,
    projects: [
      // Small: no database, no network but loopback, no child process but a fake's; milliseconds each.
      tier('unit', 0, { include: ['test/unit/**/*.test.ts'], pool: 'threads' }),
      // Medium: the real PostgreSQL (a database of each file's own, cloned from the template) and
      // Temporal, core and the HTTP app in the test's process, fakes of third parties as servers.
      tier('integration', 1, { include: ['test/integration/**/*.test.ts'], pool: 'forks', isolate: false, setupFiles: ['test/support/file-database.ts'] }),
      // The pages in a real Chromium (one per worker, a fresh context per test).
      tier('browser', 2, { include: ['test/browser/**/*.test.ts'], pool: 'forks', isolate: false, setupFiles: ['test/support/file-database.ts'] }),
      // Large: the service as real processes (dist/), over real HTTP, with official clients.
      tier('e2e', 3, { include: ['test/e2e/**/*.test.ts'], pool: 'forks', isolate: false, setupFiles: ['test/support/file-database.ts'] }),
    ],
  },
});
