import { spawnSync } from 'node:child_process';
import { longRunDue, ONCE_FLAKY, recordLongRun } from './support/long-runs.ts';
import { root, positiveInt, sayer } from './support/server.ts';

/**
 * `npm run test:repeat`: the tests that once flaked on a loaded 2-core machine (ONCE_FLAKY in
 * scripts/support/long-runs.ts), run again and again, each run a fresh `vitest run` of these
 * files with its own PostgreSQL and Temporal, so that one that still depends on timing shows up
 * as a red CI rather than as a rare failure later. `REPEAT` (5 by default) sets how many runs; the
 * first failing run ends it (exit 1). Five runs in a row passing write the record of the long run
 * (test/long-runs.json).
 *
 * `-- --if-changed` (CI): the five runs only when these files or their harness changed since the
 * record; otherwise one run, the short form.
 */
const say = sayer('repeat');
let runs = positiveInt(say, 'REPEAT', 5)!;
if (process.argv.includes('--if-changed') && process.env.REPEAT === undefined) {
  const { due, why } = await longRunDue('repeat');
  if (!due) runs = 1;
  say(`${due ? `the long form (${runs} runs)` : 'the short form (1 run)'}: ${why}`);
}
const files = ONCE_FLAKY;
const vitest = `${root}/node_modules/vitest/vitest.mjs`;
const started = Date.now();
for (let i = 1; i <= runs; i++) {
  say(`run ${i} of ${runs}: ${files.length} files`);
  const t = Date.now();
  const result = spawnSync(process.execPath, [vitest, 'run', ...files], { cwd: root, stdio: 'inherit' });
  if (result.status !== 0) {
    say(`run ${i} of ${runs} failed (exit ${result.status ?? result.signal}) after ${((Date.now() - t) / 1000).toFixed(0)} s`);
    process.exit(1);
  }
  say(`run ${i} of ${runs} passed in ${((Date.now() - t) / 1000).toFixed(0)} s`);
}
say(`${runs} runs in a row passed in ${((Date.now() - started) / 60_000).toFixed(1)} min`);
if (runs >= 5) await recordLongRun('repeat', `${runs} runs in a row passed`);
