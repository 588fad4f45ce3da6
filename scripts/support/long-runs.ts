import { createHash } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { ROOT } from './process.ts';

/**
 * The long variants of three suites (the ×5 repeat of the once-flaky tests, the 1,200-run wallet
 * model, mutation testing) cost CI more than half an hour together; what they guard changes in
 * few commits. Each has a record in test/long-runs.json: a digest of the files it guards (their
 * paths and contents, as git tracks them), written by the long run when it passes. CI (`.ci/run`)
 * runs the long variant only when the digest of today's files differs from the record, that
 * is when the guarded code changed since a long run passed; otherwise the short form.
 *
 * A record is a few lines and changes only when its long run is run again: commit it with the
 * change it was run on (`npm run test:mutation`, `npm run test:repeat`, `npm run
 * test:reliability` write it on success).
 */
export type LongRun = 'repeat' | 'wallet-model' | 'mutation';

/**
 * The tests that once flaked on a loaded 2-core machine (issue 30: wall-clock bounds, sleeps
 * followed by "nothing happened" checks), which `npm run test:repeat` runs again and again.
 */
export const ONCE_FLAKY = [
  'test/unit/tokens.test.ts',
  'test/integration/temporal-operators.test.ts',
  'test/integration/graphql-admin.test.ts',
  'test/integration/passwords.test.ts',
  'test/integration/change-feed.test.ts',
  'test/integration/mcp.test.ts',
  'test/integration/generations.test.ts',
  'test/integration/upload-hostile.test.ts',
  'test/integration/storage.test.ts',
  'test/e2e/chat-stall.test.ts',
];

/** What each guards: git pathspecs (globs), relative to the root. */
export async function guards(run: LongRun): Promise<string[]> {
  if (run === 'repeat') {
    // The once-flaky files themselves and the harness they run on: flakiness is a test's timing.
    return ['scripts/repeat-tests.ts', 'test/support/**', 'vitest.config.ts', ...ONCE_FLAKY];
  }
  if (run === 'wallet-model') {
    // The money functions (SQL and TypeScript) and the model that checks them.
    return ['core/money/**', 'core/db/migrations/**', 'test/support/wallet-model*.ts', 'test/support/db.ts', 'test/reliability/wallet-model.test.ts', 'test/integration/wallet-model.test.ts'];
  }
  // Every mutated file (stryker.config.js), every test of the mutation set (vitest.mutation.config.ts), the SQL and the tools.
  const strykerConfig = path.join(ROOT, 'stryker.config.js');
  const { default: stryker } = (await import(strykerConfig)) as { default: { mutate: string[] } };
  const { MUTATION_TESTS } = await import('../../vitest.mutation.config.ts');
  return [
    ...new Set([
      ...stryker.mutate.map((m) => m.replace(/:\d+-\d+$/, '')),
      ...MUTATION_TESTS,
      'core/money/money.sql',
      'core/db/migrations/**',
      'stryker.config.js',
      'vitest.mutation.config.ts',
      'scripts/mutation.ts',
      'scripts/sql-mutation.ts',
      'test/mutation/*.ts',
      'test/mutation/*.js',
      'test/support/**',
    ]),
  ];
}

const RECORD_FILE = path.join(ROOT, 'test', 'long-runs.json');

interface Record {
  /** sha256 over the guarded files' paths and contents. */
  guards: string;
  /** When the long run passed (UTC date). */
  passed: string;
  /** What it found, in a few words. */
  result: string;
}

/** The digest of the files `run` guards, as they are in the work tree now. */
export async function guardsDigest(run: LongRun): Promise<string> {
  const files = execFileSync('git', ['ls-files', '-z', '--', ...(await guards(run))], { cwd: ROOT, encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 })
    .split('\0')
    .filter(Boolean)
    .sort();
  const hash = createHash('sha256');
  for (const file of files) {
    let content: Buffer;
    try {
      content = readFileSync(path.join(ROOT, file));
    } catch {
      continue; // deleted in the work tree, not yet in git
    }
    hash.update(file).update('\0').update(content).update('\0');
  }
  return hash.digest('hex');
}

function readRecords(): Partial<{ [K in LongRun]: Record }> {
  try {
    return JSON.parse(readFileSync(RECORD_FILE, 'utf8')) as Partial<{ [K in LongRun]: Record }>;
  } catch {
    return {};
  }
}

/**
 * Whether the long variant must run: its guarded files differ from the record's (or there is no
 * record). `LONG_RUNS=all` forces every long variant, `LONG_RUNS=none` none.
 */
export async function longRunDue(run: LongRun): Promise<{ due: boolean; why: string }> {
  if (process.env.LONG_RUNS === 'all') return { due: true, why: 'LONG_RUNS=all' };
  if (process.env.LONG_RUNS === 'none') return { due: false, why: 'LONG_RUNS=none' };
  const record = readRecords()[run];
  if (!record) return { due: true, why: `no record of a long ${run} run in test/long-runs.json` };
  if (record.guards !== (await guardsDigest(run))) return { due: true, why: `the files it guards changed since the long run of ${record.passed}` };
  return { due: false, why: `the files it guards are as they were at the long run of ${record.passed} (${record.result})` };
}

/** Writes the record of a long run that passed on the files as they are now. */
export async function recordLongRun(run: LongRun, result: string): Promise<void> {
  const records = readRecords();
  records[run] = { guards: await guardsDigest(run), passed: new Date().toISOString().slice(0, 10), result };
  const ordered = Object.fromEntries((['repeat', 'wallet-model', 'mutation'] as const).filter((k) => records[k]).map((k) => [k, records[k]]));
  writeFileSync(RECORD_FILE, `${JSON.stringify(ordered, null, 2)}\n`);
}
