// @ts-check
import { readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import process from 'node:process';

/**
 * Stryker's incremental file (every mutant's last result, with the sources it ran on: 3 MB that a
 * run rewrites by the hundred thousand lines) lives in the machine's cache, beside the Temporal CLI,
 * not in git: ~/.cache/mas/mutation/ (XDG_CACHE_HOME respected). What git keeps of a mutation run
 * is test/mutation/RESULTS.md and its few-line record in test/long-runs.json
 * (scripts/support/long-runs.ts).
 */
export const INCREMENTAL_FILE = path.join(process.env.XDG_CACHE_HOME || path.join(os.homedir(), '.cache'), 'mas', 'mutation', 'stryker-incremental.json');

/**
 * StrykerJS over the modules where money and limits live (`npm run test:mutation`, which
 * scripts/mutation.ts runs; it writes test/mutation/RESULTS.md). The SQL money functions
 * (core/money/money.sql) are mutated by scripts/sql-mutation.ts instead.
 */

/**
 * One function of a file, as a Stryker mutation range (`file:first-last`): from the line that
 * declares it to the first line after it that closes a top-level block. Found by name, so that
 * the range follows the function when the file is edited.
 * @param {string} file
 * @param {string} declaration
 */
function only(file, declaration) {
  const lines = readFileSync(path.join(import.meta.dirname, file), 'utf8').split('\n');
  const first = lines.findIndex((l) => l.includes(declaration));
  if (first < 0) throw new Error(`stryker.config.mjs: "${declaration}" is not in ${file}`);
  const last = lines.findIndex((l, i) => i > first && /^(\}| {2}\}\);)$/.test(l));
  return `${file}:${first + 1}-${last + 1}`;
}

/** @type {import('@stryker-mutator/api/core').PartialStrykerOptions} */
export default {
  testRunner: 'vitest',
  // Forks: vitest's own default; the runner's default (threads) crashes with SIGSEGV here.
  vitest: { configFile: 'vitest.mutation.config.ts', related: false, pool: 'forks' },
  plugins: ['@stryker-mutator/vitest-runner', './test/mutation/stryker-ignorers.js'],
  // The words of error messages and log lines (test/mutation/stryker-ignorers.js).
  ignorers: ['MessageText'],
  coverageAnalysis: 'perTest',
  mutate: [
    // Money: amounts, holds, the wallet, the ledger and history views, the batcher, the sweep.
    'core/money/*.ts',
    // Prices: what is reserved and charged.
    'core/catalog/pricing.ts',
    // Chat billing: reserve, settle on the (clamped) usage, release; the charges written behind the answer.
    'core/chat/chat.ts',
    'core/chat/charge-writer.ts',
    // Media jobs: the price, the hold, the per-key concurrency limit, each ending exactly once.
    'core/generations/create-generation.ts',
    'core/generations/end-job.ts',
    'core/generations/job-steps.ts',
    // Sign-in attempt limits.
    'core/accounts/attempts.ts',
    // Keys, sessions, admin tokens, login links.
    'core/auth/*.ts',
    // OAuth apps: the spend cap a person sets, and the limit of connected apps.
    only('core/oauth/authorize.ts', 'function parseCap('),
    only('core/oauth/authorize.ts', 'function checkConnectionRoom('),
    // The per-key request rate limit, and the active-keys limit.
    only('core/trpc.ts', 'function consumeRateLimit('),
    'adapters/limits/rate-limiter.ts',
    only('core/keys/keys.ts', 'function createKey('),
    // Organizations (issue 49): who may act on an organization (404 outside, 403 below the role).
    'core/organizations/roles.ts',
  ],
  ignorePatterns: ['dist', 'dist.*', '.data', 'coverage', 'test/artifacts', 'test/reliability/.results', 'bench/*.csv', 'bench/*.svg'],
  tempDirName: 'test/artifacts/stryker-tmp',
  // Static mutants (module-level code) need every test run again in a fresh process each.
  ignoreStatic: true,
  concurrency: 2,
  // The first run of every test (coverage per test): about 4 minutes alone on 2 cores; the default 5-minute limit broke on a loaded machine.
  dryRunTimeoutMinutes: 30,
  timeoutMS: 20_000,
  timeoutFactor: 2,
  thresholds: { high: 95, low: 90, break: 90 },
  incremental: true,
  incrementalFile: INCREMENTAL_FILE,
  reporters: ['progress', 'clear-text', 'json'],
  jsonReporter: { fileName: 'test/artifacts/mutation/mutation.json' },
  clearTextReporter: { reportMutants: false, reportTests: false, reportScoreTable: true },
  checkers: [],
  cleanTempDir: 'always',
};
