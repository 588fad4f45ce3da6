import type { Reporter, TestModule } from 'vitest/node';

/**
 * Ends the run with one plain line, `N passed, N failed, N skipped`, that any CI can read.
 *
 * In CI (`CI` set) a skipped test fails the run: the suite skips nothing on purpose, so a skip
 * there means a component a test needs (Redis, Chromium, nginx, the Temporal CLI) was not
 * installed, and a green run would hide it. The skipped tests are named.
 */
export default class SummaryReporter implements Reporter {
  onTestRunEnd(modules: ReadonlyArray<TestModule>): void {
    const count = { passed: 0, failed: 0, skipped: 0 };
    const skipped: string[] = [];
    for (const mod of modules) {
      for (const test of mod.children.allTests()) {
        const state = test.result().state;
        if (state === 'passed') count.passed++;
        else if (state === 'failed') count.failed++;
        else {
          count.skipped++;
          skipped.push(`${mod.moduleId.replace(`${process.cwd()}/`, '')} > ${test.fullName}`);
        }
      }
    }
    if (process.env.CI && skipped.length > 0) {
      process.stdout.write(`\nIn CI no test may be skipped (a component it needs is missing?); skipped:\n${skipped.map((s) => `  - ${s}`).join('\n')}\n`);
      process.exitCode = 1;
    }
    process.stdout.write(`\n${count.passed} passed, ${count.failed} failed, ${count.skipped} skipped\n`);
  }
}
