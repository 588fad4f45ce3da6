import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { ACCEPTED_SURVIVORS } from '../test/mutation/survivors.ts';
import { runSqlMutation, SQL_TESTS, type SqlMutantResult } from './sql-mutation.ts';
import { longRunDue, recordLongRun } from './support/long-runs.ts';
import { root, sayer } from './support/server.ts';

/**
 * `npm run test:mutation`: mutation testing of the modules where money and limits live (issue 30).
 *
 * 1. StrykerJS (stryker.config.js) mutates the TypeScript of those modules and runs, for each
 *    mutant, the tests that cover it (vitest.mutation.config.ts), in incremental mode: a mutant
 *    whose code and tests are unchanged since the machine's incremental file (stryker.config.js: ~/.cache/mas/mutation/) keeps its
 *    result there. Its JSON report goes to test/artifacts/mutation/mutation.json.
 * 2. scripts/sql-mutation.ts mutates the SQL money functions (core/money/money.sql) from a fixed
 *    list and runs the SQL-level money tests against each mutant.
 * 3. test/mutation/RESULTS.md: the score per module, the survivors and why each is acceptable
 *    (test/mutation/survivors.ts), the SQL mutants and what killed each, and how long it took.
 *
 * Exits non-zero when fewer than 90 % of the TypeScript mutants are killed (over the listed
 * modules: Stryker's `thresholds.break`) or when any SQL mutant survives. `-- --full` ignores
 * the incremental file (every mutant runs again) and rewrites it. A run that passes writes its
 * record in test/long-runs.json; `-- --if-changed` (CI) runs only when a file the record guards
 * (every mutated file, every test of the set, the SQL) changed since (scripts/support/long-runs.ts).
 */
const say = sayer('mutation');
const require = createRequire(import.meta.url);
const THRESHOLD = 90;
const resultsFile = path.join(root, 'test', 'mutation', 'RESULTS.md');
const reportFile = path.join(root, 'test', 'artifacts', 'mutation', 'mutation.json');

/** The modules the score is given for, in the order of the table; the first that matches a file wins. */
const MODULES: { name: string; matches: (file: string) => boolean }[] = [
  { name: 'core/money (TypeScript)', matches: (f) => f.startsWith('core/money/') },
  { name: 'core/catalog/pricing.ts', matches: (f) => f === 'core/catalog/pricing.ts' },
  { name: 'core/chat/chat.ts (billing)', matches: (f) => f === 'core/chat/chat.ts' },
  { name: 'core/generations (create, end-job, job steps)', matches: (f) => f.startsWith('core/generations/') },
  { name: 'core/accounts/attempts.ts', matches: (f) => f === 'core/accounts/attempts.ts' },
  { name: 'core/auth', matches: (f) => f.startsWith('core/auth/') },
  { name: 'core/oauth (spend cap, connected apps limit)', matches: (f) => f.startsWith('core/oauth/') },
  {
    name: 'rate and key limits (core/trpc.ts, adapters/limits, core/keys)',
    matches: (f) => f === 'core/trpc.ts' || f.startsWith('adapters/limits/') || f.startsWith('core/keys/'),
  },
];

interface Mutant {
  id: string;
  mutatorName: string;
  replacement?: string;
  location: { start: { line: number; column: number }; end: { line: number; column: number } };
  status: string;
  statusReason?: string;
  killedBy?: string[];
  coveredBy?: string[];
}
interface Report {
  files: Record<string, { source: string; mutants: Mutant[] }>;
}

interface Counts {
  killed: number;
  timeout: number;
  survived: number;
  noCoverage: number;
  errors: number;
  ignored: number;
}
const emptyCounts = (): Counts => ({ killed: 0, timeout: 0, survived: 0, noCoverage: 0, errors: 0, ignored: 0 });
const detected = (c: Counts) => c.killed + c.timeout;
const valid = (c: Counts) => detected(c) + c.survived + c.noCoverage;
/** Stryker's mutation score: killed and timed out over every valid mutant (ignored and errors left out). */
const score = (c: Counts) => (valid(c) === 0 ? 100 : (100 * detected(c)) / valid(c));

function count(c: Counts, status: string) {
  if (status === 'Killed') c.killed++;
  else if (status === 'Timeout') c.timeout++;
  else if (status === 'Survived') c.survived++;
  else if (status === 'NoCoverage') c.noCoverage++;
  else if (status === 'Ignored') c.ignored++;
  else c.errors++;
}

/** The original code a mutant replaces, from the report's copy of the source (1-based lines, 0-based columns). */
function originalCode(source: string, m: Mutant): string {
  const lines = source.split('\n');
  const { start, end } = m.location;
  if (start.line === end.line) return lines[start.line - 1]!.slice(start.column - 1, end.column - 1);
  return [lines[start.line - 1]!.slice(start.column - 1), ...lines.slice(start.line, end.line - 1), lines[end.line - 1]!.slice(0, end.column - 1)].join('\n');
}

function run(command: string, args: string[]): Promise<{ code: number; output: string }> {
  return new Promise((resolve) => {
    let output = '';
    const child = spawn(command, args, { cwd: root, stdio: ['ignore', 'pipe', 'pipe'] });
    const forward = (signal: NodeJS.Signals) => child.kill(signal);
    process.on('SIGINT', forward);
    process.on('SIGTERM', forward);
    const tee = (out: NodeJS.WriteStream) => (chunk: Buffer) => {
      output += chunk.toString();
      out.write(chunk);
    };
    child.stdout.on('data', tee(process.stdout));
    child.stderr.on('data', tee(process.stderr));
    child.on('error', (err) => resolve({ code: 1, output: `${output}\n${err.message}` }));
    child.on('exit', (code, signal) => {
      process.off('SIGINT', forward);
      process.off('SIGTERM', forward);
      resolve({ code: code ?? (signal ? 128 : 1), output });
    });
  });
}

const minutes = (ms: number) => `${(ms / 60_000).toFixed(1)} min`;
const cell = (text: string) => text.replace(/\|/g, '\\|').replace(/\n/g, ' ⏎ ');
const code = (text: string) => `\`${cell(text).replace(/`/g, 'ˋ')}\``;

async function main(): Promise<number> {
  const full = process.argv.includes('--full');
  if (process.argv.includes('--if-changed') && !full) {
    const { due, why } = await longRunDue('mutation');
    if (!due) {
      say(`not run: ${why}`);
      return 0;
    }
    say(`run: ${why}`);
  }
  const started = Date.now();

  say(`StrykerJS over the money and limits modules${full ? ' (--full: every mutant)' : ' (incremental)'}`);
  await fs.rm(reportFile, { force: true });
  const stryker = await run(process.execPath, [path.join(path.dirname(require.resolve('@stryker-mutator/core/package.json')), 'bin', 'stryker.js'), 'run', ...(full ? ['--force'] : [])]);
  const strykerMs = Date.now() - started;
  const reused = stryker.output.match(/Result:\s+(\d+) of (\d+) mutant result\(s\) are reused/);
  const report = JSON.parse(await fs.readFile(reportFile, 'utf8').catch(() => 'null')) as Report | null;

  say('the SQL money functions (scripts/sql-mutation.ts)');
  const sqlStarted = Date.now();
  const sql = await runSqlMutation({ say: sayer('sql-mutation') }).catch((err: unknown) => ({ baseline: `could not run: ${(err as Error).message}`, results: [] as SqlMutantResult[] }));
  const sqlMs = Date.now() - sqlStarted;

  // Scores per module.
  const perModule = new Map(MODULES.map((m) => [m.name, { files: [] as string[], counts: emptyCounts() }]));
  const total = emptyCounts();
  const survivors: { module: string; file: string; line: number; mutant: Mutant; original: string; reason: string | undefined }[] = [];
  const ignored = new Map<string, number>();
  for (const [file, { source, mutants }] of Object.entries(report?.files ?? {})) {
    const module = MODULES.find((m) => m.matches(file))?.name ?? file;
    if (!perModule.has(module)) perModule.set(module, { files: [], counts: emptyCounts() });
    const entry = perModule.get(module)!;
    entry.files.push(file);
    for (const m of mutants) {
      count(entry.counts, m.status);
      count(total, m.status);
      if (m.status === 'Ignored') ignored.set(m.statusReason ?? 'ignored', (ignored.get(m.statusReason ?? 'ignored') ?? 0) + 1);
      if (m.status === 'Survived' || m.status === 'NoCoverage') {
        const original = originalCode(source, m);
        const accepted = ACCEPTED_SURVIVORS.find((a) => a.file === file && a.mutator === m.mutatorName && a.code === original && a.replacement === (m.replacement ?? ''));
        survivors.push({ module, file, line: m.location.start.line, mutant: m, original, reason: accepted?.reason });
      }
    }
  }
  const tsScore = score(total);
  const sqlKilled = sql.results.filter((r) => r.status === 'killed').length;
  const sqlOk = !sql.baseline && sql.results.length > 0 && sqlKilled === sql.results.length;
  const tsOk = report !== null && stryker.code === 0 && tsScore >= THRESHOLD;
  const totalMs = Date.now() - started;

  const out: string[] = [];
  out.push('# Mutation testing: results');
  out.push('');
  out.push(
    'Written by `npm run test:mutation` (scripts/mutation.ts): StrykerJS over the TypeScript of the modules where money and limits live ' +
      '(stryker.config.js, the tests of vitest.mutation.config.ts), and scripts/sql-mutation.ts over the SQL money functions ' +
      `(core/money/money.sql). The run fails under ${THRESHOLD} % of the TypeScript mutants killed, or when any SQL mutant survives.`,
  );
  out.push('');
  out.push(`- Date: ${new Date().toISOString().slice(0, 16).replace('T', ' ')} UTC; machine: ${os.cpus().length} cores (${os.cpus()[0]?.model ?? 'unknown CPU'}), ${Math.round(os.totalmem() / 2 ** 30)} GiB, load average at the end ${os.loadavg()[0]!.toFixed(1)}`);
  out.push(
    `- Time: ${minutes(totalMs)} in all: StrykerJS ${minutes(strykerMs)}${full ? ' (--full, every mutant run)' : reused ? ` (incremental: ${reused[1]} of ${reused[2]} results reused from the machine's incremental file, stryker.config.js)` : ''}, SQL ${minutes(sqlMs)}`,
  );
  out.push(`- TypeScript: **${tsScore.toFixed(2)} %** killed (${detected(total)} of ${valid(total)}; threshold ${THRESHOLD} %): ${tsOk ? 'pass' : 'FAIL'}${report ? '' : ' (no Stryker report: see its output)'}`);
  out.push(`- SQL: **${sqlKilled} of ${sql.results.length}** mutants killed${sql.baseline ? ` (the tests fail without a mutant: ${sql.baseline})` : ''}: ${sqlOk ? 'pass' : 'FAIL'}`);
  out.push('');
  out.push('## TypeScript mutants per module');
  out.push('');
  out.push('| Module | Score | Killed | Timed out | Survived | No coverage | Errors | Ignored |');
  out.push('|---|---|---|---|---|---|---|---|');
  for (const [name, { files, counts }] of perModule) {
    if (files.length === 0) continue;
    out.push(`| ${name} | ${score(counts).toFixed(1)} % | ${counts.killed} | ${counts.timeout} | ${counts.survived} | ${counts.noCoverage} | ${counts.errors} | ${counts.ignored} |`);
  }
  out.push(`| **All** | **${tsScore.toFixed(1)} %** | ${total.killed} | ${total.timeout} | ${total.survived} | ${total.noCoverage} | ${total.errors} | ${total.ignored} |`);
  out.push('');
  out.push('Ignored mutants count neither way:');
  out.push('');
  for (const [reason, n] of [...ignored].sort((a, b) => b[1] - a[1])) out.push(`- ${n}: ${reason}`);
  out.push('');
  out.push('## Surviving TypeScript mutants');
  out.push('');
  if (survivors.length === 0) out.push('None.');
  else {
    out.push('Each with the reason it is acceptable (test/mutation/survivors.ts); one with no reason is a test still missing.');
    out.push('');
    out.push('| Where | Mutator | Code | Becomes | Why it is acceptable |');
    out.push('|---|---|---|---|---|');
    for (const s of survivors.sort((a, b) => a.file.localeCompare(b.file) || a.line - b.line)) {
      const status = s.mutant.status === 'NoCoverage' ? ' (no test reaches it)' : '';
      out.push(`| ${s.file}:${s.line} | ${s.mutant.mutatorName} | ${code(s.original)} | ${code(s.mutant.replacement ?? '')} | ${s.reason ? cell(s.reason) : `**no reason: a missing test**${status}`} |`);
    }
  }
  out.push('');
  out.push('## SQL mutants (core/money/money.sql)');
  out.push('');
  out.push(`Each applied with \`CREATE OR REPLACE\` in a database of its own, then the SQL-level tests run against it, in this order, until one fails: ${SQL_TESTS.map((t) => `\`${t}\``).join(', ')}.`);
  out.push('');
  out.push('| Mutant | Function | Mistake | Status | First failing test |');
  out.push('|---|---|---|---|---|');
  for (const r of sql.results) out.push(`| ${r.mutant.id} | ${r.mutant.fn} | ${cell(r.mutant.what)} | ${r.status} | ${cell(r.detail.slice(0, 160))} |`);
  out.push('');
  await fs.writeFile(resultsFile, out.join('\n'));
  say(`TypeScript ${report ? `${tsScore.toFixed(2)} % killed` : 'no Stryker report'} (${tsOk ? 'pass' : 'FAIL'}); SQL ${sqlKilled}/${sql.results.length} killed (${sqlOk ? 'pass' : 'FAIL'}); ${minutes(totalMs)}; ${path.relative(root, resultsFile)} written`);
  if (tsOk && sqlOk) await recordLongRun('mutation', `${tsScore.toFixed(2)} % of TypeScript mutants killed, SQL ${sqlKilled} of ${sql.results.length}`);
  return tsOk && sqlOk ? 0 : 1;
}

process.exit(await main());
