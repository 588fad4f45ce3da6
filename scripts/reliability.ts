import { spawn } from 'node:child_process';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { longRunDue, recordLongRun } from './support/long-runs.ts';
import { root, sayer } from './support/server.ts';

/**
 * `npm run test:reliability [-- --full]`: the fault and hostile-input suite (issue 20).
 *
 * 1. vitest with vitest.reliability.config.ts: test/reliability/*.test.ts, one file at a time,
 *    each against real processes and servers (worker and API crashes, dependency outages, the
 *    idempotency storm, the isolation matrix, the SSRF corpus, signals and leftovers). Each file
 *    writes what it measured as a section (test/reliability/support/results.ts).
 * 2. The schema fuzzer (scripts/schema-fuzz.ts: schemathesis, all checks, stateful links) on the
 *    real server, bounded in time: SCHEMA_MAX_TIME seconds (300; 900 with --full).
 * 3. test/reliability/RESULTS.md: the machine, the date, what ran, how long, and each section.
 *
 * `--full` runs the long versions (RELIABILITY_FULL=1: more jobs, kills and cases); `--if-changed`
 * (CI) runs the 1,200-run wallet model only when what it guards changed since its record
 * (scripts/support/long-runs.ts), 120 runs otherwise. The exit
 * code is non-zero when either part failed; RESULTS.md is written either way.
 */
const say = sayer('reliability');
const full = process.argv.includes('--full');
const resultsDir = path.join(root, 'test', 'reliability', '.results');
const resultsFile = path.join(root, 'test', 'reliability', 'RESULTS.md');

function run(command: string, args: string[], env: Record<string, string>): Promise<number> {
  return new Promise((resolve) => {
    const child = spawn(command, args, { cwd: root, stdio: 'inherit', env: { ...process.env, ...env } });
    const forward = (signal: NodeJS.Signals) => child.kill(signal);
    process.on('SIGINT', forward);
    process.on('SIGTERM', forward);
    child.on('error', (err) => {
      say(`${command} could not run: ${err.message}`);
      resolve(1);
    });
    child.on('exit', (code, signal) => {
      process.off('SIGINT', forward);
      process.off('SIGTERM', forward);
      resolve(code ?? (signal ? 128 : 1));
    });
  });
}

/** Counts from schemathesis's JUnit report: test cases (operations), failures and errors. */
async function junitCounts(dir: string): Promise<{ operations: number; failures: number; errors: number } | undefined> {
  const files = (await fs.readdir(dir).catch(() => [] as string[])).filter((f) => f.endsWith('.xml'));
  if (files.length === 0) return undefined;
  const xml = await fs.readFile(path.join(dir, files[0]!), 'utf8');
  const attr = (name: string) => Number(xml.match(new RegExp(`<testsuites?[^>]*\\s${name}="(\\d+)"`))?.[1] ?? NaN);
  return { operations: attr('tests'), failures: attr('failures'), errors: attr('errors') };
}

const minutes = (ms: number) => `${(ms / 60_000).toFixed(1)} min`;

async function main(): Promise<number> {
  await fs.rm(resultsDir, { recursive: true, force: true });
  await fs.mkdir(resultsDir, { recursive: true });
  // The 1,200-run wallet model is the long form; under --if-changed (CI) it runs only when the money
  // code or the model changed since its record (test/long-runs.json), else 120 runs.
  const walletModel = process.argv.includes('--if-changed') ? await longRunDue('wallet-model') : { due: true, why: 'always without --if-changed' };
  say(`the wallet model: ${walletModel.due ? 'the long form' : 'the short form (120 runs)'}: ${walletModel.why}`);
  const env = { RELIABILITY_FULL: full ? '1' : '0', WALLET_MODEL_SHORT: walletModel.due ? '0' : '1' };

  say(`the reliability suite${full ? ' (--full)' : ''}`);
  const suiteStart = Date.now();
  const suite = await run(process.execPath, [path.join(root, 'node_modules', 'vitest', 'vitest.mjs'), 'run', '--config', 'vitest.reliability.config.ts'], env);
  const suiteMs = Date.now() - suiteStart;
  if (suite === 0 && walletModel.due && !process.env.WALLET_MODEL_RUNS) await recordLongRun('wallet-model', `the long form passed${full ? ' (--full)' : ''}`);

  const fuzzTime = process.env.SCHEMA_MAX_TIME ?? (full ? '900' : '300');
  const reportDir = path.join(resultsDir, 'schemathesis');
  say(`the schema fuzzer, up to ${fuzzTime} s`);
  const fuzzStart = Date.now();
  const fuzz = await run(process.execPath, ['--import', 'tsx', path.join(root, 'scripts', 'schema-fuzz.ts')], {
    ...env,
    SCHEMA_MAX_TIME: fuzzTime,
    SCHEMA_MAX_EXAMPLES: process.env.SCHEMA_MAX_EXAMPLES ?? (full ? '200' : '50'),
    SCHEMA_REPORT_DIR: reportDir,
  });
  const fuzzMs = Date.now() - fuzzStart;
  const counts = await junitCounts(reportDir);

  const sections = (await fs.readdir(resultsDir)).filter((f) => f.endsWith('.md')).sort();
  // Each section's heading carries its part's number (its file name's prefix), as the issue numbers them.
  const body = await Promise.all(
    sections.map(async (f) => (await fs.readFile(path.join(resultsDir, f), 'utf8')).replace(/^## (?!\d+\. )/, `## ${Number(f.slice(0, 2))}. `)),
  );
  const cpu = os.cpus();
  const fuzzSection = [
    '## 1. Schema fuzzing (schemathesis)',
    '',
    `schemathesis 4.32.5 against \`/api/v1/openapi.json\` on the real server (\`main.ts\`, embedded PostgreSQL and Temporal), with the demo account's funded key, \`--checks all\`, every phase (examples, coverage, fuzzing, stateful through the document's links), up to ${fuzzTime} s.`,
    '',
    counts
      ? `JUnit test cases (schemathesis reports one per operation, and one for the stateful phase): ${counts.operations}. Failures: ${counts.failures}. Errors: ${counts.errors}. Exit code: ${fuzz}. Time: ${minutes(fuzzMs)}.`
      : `No JUnit report was written (exit code ${fuzz}, ${minutes(fuzzMs)}): see the run's output.`,
  ].join('\n');
  const doc = [
    '# Reliability and security results',
    '',
    `Written by \`npm run test:reliability${full ? ' -- --full' : ''}\` (scripts/reliability.ts) on ${new Date().toISOString().slice(0, 10)}. Every figure below was measured in that run.`,
    '',
    `Machine: ${cpu.length} × ${cpu[0]?.model ?? 'unknown CPU'}, ${(os.totalmem() / 2 ** 30).toFixed(1)} GiB RAM, ${os.type()} ${os.release()}, Node ${process.version}.`,
    '',
    table(
      ['Part', 'Result', 'Time'],
      [
        ['Fault and isolation suite (test/reliability/*.test.ts)', suite === 0 ? 'passed' : `FAILED (exit ${suite})`, minutes(suiteMs)],
        ['Schema fuzzing (scripts/schema-fuzz.ts)', fuzz === 0 ? 'no failure' : `FAILED (exit ${fuzz})`, minutes(fuzzMs)],
      ],
    ),
    '',
    fuzzSection,
    '',
    ...body.map((b) => `${b.trim()}\n`),
  ].join('\n');
  await fs.writeFile(resultsFile, doc);
  say(`wrote ${path.relative(root, resultsFile)}`);
  return suite !== 0 ? suite : fuzz;
}

function table(header: string[], rows: string[][]): string {
  return [header, header.map(() => '---'), ...rows].map((r) => `| ${r.join(' | ')} |`).join('\n');
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    say(`failed: ${(err as Error).message}`);
    process.exit(1);
  },
);
