import path from 'node:path';
import { BaseSequencer, type TestSpecification } from 'vitest/node';

/**
 * The order files start in, within a tier: the longest first, so that the tier does not end
 * waiting on one long file that started last. Vitest orders by the durations of the last run
 * on this machine (its cache in node_modules/.vite); a fresh clone has none, and vitest then
 * starts the largest files first, which puts some short ones before long ones. There, these
 * files, the long ones as measured on the 2-core machine (test/README.md), go first, longest
 * first; the rest follow in vitest's order.
 */
const KNOWN_LONG: Record<string, number> = {
  'test/integration/mcp.test.ts': 55,
  'test/integration/wallet-model.test.ts': 38,
  'test/integration/generations.test.ts': 38,
  'test/integration/media-failover.test.ts': 37,
  'test/integration/streaming-downloads.test.ts': 26,
  'test/integration/temporal-operators.test.ts': 20,
  'test/integration/hold-batch-equivalence.test.ts': 20,
  'test/integration/mcp-tasks.test.ts': 18,
  'test/integration/chat-failover.test.ts': 17,
  'test/integration/fal.test.ts': 16,
  'test/integration/openai-media.test.ts': 15,
  'test/integration/payments-auto-top-up.test.ts': 14,
  'test/browser/page-walk.test.ts': 80,
  'test/browser/public-pages.test.ts': 55,
  'test/browser/payments-pages.test.ts': 44,
  'test/browser/mcp-apps-browser.test.ts': 42,
  'test/browser/admin-actions-pages.test.ts': 25,
  'test/browser/account-pages.test.ts': 20,
  'test/e2e/signals.test.ts': 50,
  'test/e2e/signals-worker.test.ts': 40,
  'test/e2e/embedded.test.ts': 50,
  'test/e2e/server.test.ts': 47,
  'test/e2e/process-roles.test.ts': 24,
  'test/e2e/worker-crash.test.ts': 21,
  'test/e2e/cli-links.test.ts': 20,
};

export default class LongFirstSequencer extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const sorted = await super.sort(files);
    const known = (f: TestSpecification) => {
      const key = `${f.project.name}:${path.relative(this.ctx.config.root, f.moduleId)}`;
      return this.ctx.cache.getFileTestResults(key) !== undefined;
    };
    // Vitest knows this machine's durations for every file: its order stands.
    if (sorted.every(known)) return sorted;
    const weight = (f: TestSpecification) => KNOWN_LONG[path.relative(this.ctx.config.root, f.moduleId)] ?? 0;
    // Stable: tiers keep their order (groupOrder), and within one the known long files go first.
    const group = (f: TestSpecification) => f.project.config.sequence.groupOrder;
    return sorted
      .map((f, i) => ({ f, i }))
      .sort((a, b) => group(a.f) - group(b.f) || weight(b.f) - weight(a.f) || a.i - b.i)
      .map(({ f }) => f);
  }
}
