import { spawn, type ChildProcess } from 'node:child_process';
import * as nodeFs from 'node:fs';
import fs from 'node:fs/promises';
import { createRequire } from 'node:module';
import path from 'node:path';
import { root, type Say } from './server.ts';

/**
 * What the scripts that run the official MCP conformance suite (@modelcontextprotocol/conformance)
 * share: mcp-conformance.ts (`npm run test:mcp`, the MCP server, suite 0.1.16) and
 * mcp-auth-conformance.ts (`npm run test:mcp-auth`, the OAuth authorization server, the 0.2.0
 * alpha installed as @modelcontextprotocol/conformance-next). The suite runs from node_modules,
 * never downloaded; each scenario leaves a checks.json, compared with a committed baseline.
 *
 * A scenario fails when one of its checks is FAILURE or WARNING (the suite's own rule for its
 * expected-failures baselines), and is missing when it ended without a result (the runner threw).
 * A baseline lists each scenario that does not apply or is known to fail, with the reason and
 * what its failure must say (`expect`). A run fails when a scenario fails (or is missing) and the
 * baseline does not list it, or fails another way than the baseline expects; a listed scenario
 * that now passes is reported (remove it from the baseline) without failing the run.
 */

export type Kind = 'not-applicable' | 'expected-failure' | 'bug';
const KINDS: readonly Kind[] = ['not-applicable', 'expected-failure', 'bug'];

export interface BaselineEntry {
  kind: Kind;
  reason: string;
  /**
   * Strings that must all appear in the scenario's failing checks (id, error message, details),
   * so that it fails the way the reason says: an unknown method answered with a 500 instead of
   * -32601 is a new failure, not the baselined one.
   */
  expect: string[];
}

export interface Baseline {
  conformance: string;
  scenarios: Map<string, BaselineEntry>;
}

export interface Check {
  id: string;
  name?: string;
  description?: string;
  status: 'SUCCESS' | 'FAILURE' | 'WARNING' | 'SKIPPED' | 'INFO';
  errorMessage?: string;
  details?: unknown;
}

export interface ScenarioResult {
  scenario: string;
  /** undefined: the scenario was started but left no result. */
  checks: Check[] | undefined;
}

export async function loadBaseline(file: string): Promise<Baseline> {
  let raw: unknown;
  try {
    raw = JSON.parse(await fs.readFile(file, 'utf8'));
  } catch (err) {
    throw new Error(`cannot read the baseline ${file}: ${(err as Error).message}`);
  }
  const problems: string[] = [];
  const doc = raw as { conformance?: unknown; scenarios?: unknown };
  if (typeof doc !== 'object' || doc === null) throw new Error(`the baseline ${file} is not a JSON object`);
  if (typeof doc.conformance !== 'string') problems.push('"conformance" (the suite version it was made with) must be a string');
  if (typeof doc.scenarios !== 'object' || doc.scenarios === null || Array.isArray(doc.scenarios)) problems.push('"scenarios" must be an object');
  const scenarios = new Map<string, BaselineEntry>();
  for (const [name, value] of Object.entries((doc.scenarios as Record<string, unknown>) ?? {})) {
    const entry = value as Partial<BaselineEntry> | null;
    if (typeof entry !== 'object' || entry === null) problems.push(`${name}: must be an object {kind, reason}`);
    else if (!KINDS.includes(entry.kind as Kind)) problems.push(`${name}: "kind" must be one of ${KINDS.join(', ')}`);
    else if (typeof entry.reason !== 'string' || entry.reason.trim().length < 10) problems.push(`${name}: needs a "reason"`);
    else if (entry.kind === 'bug' && !entry.reason.startsWith('BUG:')) problems.push(`${name}: the reason of a "bug" entry starts with "BUG:"`);
    else if (entry.expect !== undefined && !(Array.isArray(entry.expect) && entry.expect.every((e) => typeof e === 'string' && e.length > 0))) {
      problems.push(`${name}: "expect" must be a list of non-empty strings`);
    } else scenarios.set(name, { kind: entry.kind as Kind, reason: entry.reason, expect: entry.expect ?? [] });
  }
  if (problems.length > 0) throw new Error(`the baseline ${file} is invalid:\n${problems.map((p) => `  - ${p}`).join('\n')}`);
  return { conformance: doc.conformance as string, scenarios };
}

/** A suite's entry point and version, from its package (or npm alias) in node_modules. */
export async function findSuite(name: string): Promise<{ bin: string; version: string }> {
  const require = createRequire(path.join(root, 'package.json'));
  let pkgFile: string;
  try {
    pkgFile = require.resolve(`${name}/package.json`);
  } catch {
    throw new Error(`${name} is not installed (npm ci installs it: it is a devDependency)`);
  }
  const pkg = JSON.parse(await fs.readFile(pkgFile, 'utf8')) as { version: string; bin: Record<string, string> | string };
  const bin = typeof pkg.bin === 'string' ? pkg.bin : pkg.bin.conformance!;
  return { bin: path.join(path.dirname(pkgFile), bin), version: pkg.version };
}

/** Every scenario of one kind the installed suite knows (`conformance list --server`), to catch a misspelt baseline entry. */
export async function knownScenarios(bin: string, cwd: string, kind: 'server' | 'authorization'): Promise<Set<string> | undefined> {
  const child = spawn(process.execPath, [bin, 'list', `--${kind}`], { cwd, stdio: ['ignore', 'pipe', 'ignore'] });
  let out = '';
  child.stdout.setEncoding('utf8');
  child.stdout.on('data', (c: string) => (out += c));
  const code = await new Promise<number | null>((resolve) => {
    child.on('error', () => resolve(null));
    child.on('close', (c) => resolve(c));
  });
  if (code !== 0) return undefined;
  return new Set([...out.matchAll(/^\s+- (\S+)/gm)].map((m) => m[1]!));
}

/**
 * The scenarios' results under `dir`: the suite writes each scenario's checks.json into
 * `<prefix>-<scenario>-<ISO time with : and . as ->` (prefix `server` for the server command,
 * `authorization-server` for the authorization command). `started`: the scenarios the run began,
 * missing when they left no result.
 */
export async function readResults(dir: string, started: string[], prefix: 'server' | 'authorization-server'): Promise<ScenarioResult[]> {
  const resultDir = new RegExp(`^${prefix}-(.+)-\\d{4}-\\d{2}-\\d{2}T\\d{2}-\\d{2}-\\d{2}-\\d{3}Z$`);
  const byScenario = new Map<string, Check[] | undefined>(started.map((s) => [s, undefined]));
  const entries = (await fs.readdir(dir).catch(() => [] as string[])).sort();
  for (const entry of entries) {
    const m = resultDir.exec(entry);
    if (!m) continue;
    try {
      byScenario.set(m[1]!, JSON.parse(await fs.readFile(path.join(dir, entry, 'checks.json'), 'utf8')) as Check[]);
    } catch {
      if (!byScenario.has(m[1]!)) byScenario.set(m[1]!, undefined);
    }
  }
  return [...byScenario].map(([scenario, checks]) => ({ scenario, checks }));
}

type Outcome = 'pass' | 'fail' | 'warn' | 'missing';

/** What the scenario's FAILURE and WARNING checks say, for a baseline entry's `expect`. */
function failureText(r: ScenarioResult): string {
  return (r.checks ?? [])
    .filter((c) => c.status === 'FAILURE' || c.status === 'WARNING')
    .map((c) => `${c.id}: ${c.errorMessage ?? c.description ?? ''} ${JSON.stringify(c.details ?? null)}`)
    .join('\n');
}

function outcome(r: ScenarioResult): Outcome {
  if (!r.checks) return 'missing';
  if (r.checks.some((c) => c.status === 'FAILURE')) return 'fail';
  if (r.checks.some((c) => c.status === 'WARNING')) return 'warn';
  return 'pass';
}

/** The lines that show why a scenario failed: its FAILURE and WARNING checks, with their details. */
function describeFailure(r: ScenarioResult, redact: (s: string) => string): string[] {
  if (!r.checks) return ['    no result: the suite could not run this scenario (its output is below)'];
  const lines: string[] = [];
  for (const c of r.checks.filter((c) => c.status === 'FAILURE' || c.status === 'WARNING')) {
    lines.push(`    ${c.status} ${c.id}: ${redact(c.errorMessage ?? c.description ?? '')}`);
    if (c.details !== undefined) {
      const details = redact(JSON.stringify(c.details));
      lines.push(`      details: ${details.length > 1500 ? `${details.slice(0, 1500)}…` : details}`);
    }
  }
  return lines;
}

/**
 * Prints each scenario's outcome against the baseline, a summary, the listed scenarios that pass
 * now, and why each unexpected one failed (with the end of the suite's output in `suiteLog` when
 * a scenario left no result). Returns how many failed unexpectedly.
 */
export async function compareWithBaseline(o: {
  title: string;
  results: ScenarioResult[];
  baseline: Baseline;
  /** The baseline file as shown to the reader. */
  shownBaseline: string;
  suiteLog: string;
  redact: (s: string) => string;
}): Promise<number> {
  const { baseline, shownBaseline, redact } = o;
  const unexpected: ScenarioResult[] = [];
  const expected: { r: ScenarioResult; entry: BaselineEntry }[] = [];
  const nowPassing: { r: ScenarioResult; entry: BaselineEntry }[] = [];
  const passed: ScenarioResult[] = [];
  process.stdout.write(`\n${o.title}:\n`);
  for (const r of o.results) {
    const out = outcome(r);
    const entry = baseline.scenarios.get(r.scenario);
    const counts = r.checks ? ` (${r.checks.filter((c) => c.status === 'SUCCESS').length} ok, ${r.checks.filter((c) => c.status === 'FAILURE').length} failed, ${r.checks.filter((c) => c.status === 'WARNING').length} warnings)` : '';
    let label: string;
    if (out === 'pass' && !entry) {
      passed.push(r);
      label = 'pass';
    } else if (out === 'pass' && entry) {
      nowPassing.push({ r, entry });
      label = `PASSES NOW (baselined as ${entry.kind}: remove it from the baseline)`;
    } else if (entry && out !== 'missing' && entry.expect.every((e) => failureText(r).includes(e))) {
      expected.push({ r, entry });
      label = `${out}, expected: ${entry.kind}`;
    } else if (entry) {
      unexpected.push(r);
      label = `${out.toUpperCase()}, BUT NOT AS THE BASELINE EXPECTS (${out === 'missing' ? 'no result' : `without ${entry.expect.filter((e) => !failureText(r).includes(e)).map((e) => JSON.stringify(e)).join(', ')}`})`;
    } else {
      unexpected.push(r);
      label = `${out.toUpperCase()}, NOT IN THE BASELINE`;
    }
    process.stdout.write(`  ${r.scenario.padEnd(38)} ${label}${counts}\n`);
  }

  const kinds = (k: Kind) => expected.filter((e) => e.entry.kind === k).length;
  process.stdout.write(
    // Worded so that CI's reading of test-runner summaries ("N passed, N failed") never takes it for one.
    `\nscenarios: ${passed.length} pass; ${expected.length} fail as the baseline expects (${kinds('not-applicable')} not applicable, ` +
      `${kinds('expected-failure')} expected failures, ${kinds('bug')} known bugs), ${unexpected.length} unexpected failure(s), ` +
      `${nowPassing.length} baselined scenario(s) passing now\n`,
  );
  if (nowPassing.length > 0) {
    process.stdout.write(`\nThese scenarios pass now: remove them from ${shownBaseline}:\n`);
    for (const { r, entry } of nowPassing) process.stdout.write(`  ${r.scenario} (was ${entry.kind}: ${entry.reason})\n`);
  }
  if (unexpected.length > 0) {
    process.stdout.write(`\nUnexpected failures (not in ${shownBaseline}, or not as it expects):\n`);
    for (const r of unexpected) {
      const entry = baseline.scenarios.get(r.scenario);
      process.stdout.write(`  ${r.scenario}: ${outcome(r)}${entry ? ` (baselined as ${entry.kind}, expecting ${JSON.stringify(entry.expect)})` : ''}\n`);
      for (const line of describeFailure(r, redact)) process.stdout.write(`${line}\n`);
    }
    if (unexpected.some((r) => !r.checks)) {
      const tail = (await fs.readFile(o.suiteLog, 'utf8').catch(() => '')).trimEnd().split('\n').slice(-40);
      process.stdout.write(`\nThe suite's output, last lines:\n${tail.map((l) => `  ${l}`).join('\n')}\n`);
    }
  }
  return unexpected.length;
}

/** Runs the suite (`node <bin> <args>`) from `cwd`; its output, redacted, goes to `logFile`. */
export interface SuiteRun {
  child: ChildProcess;
  /** The scenarios the suite announced (`=== Running scenario: … ===`), in order. */
  started: string[];
  done: Promise<{ code: number; timedOut: boolean; seconds: number }>;
}

export function runSuite(
  say: Say,
  o: {
    args: string[];
    cwd: string;
    logFile: string;
    redact: (s: string) => string;
    /** Echo the suite's output (redacted) as it runs. */
    verbose: boolean;
    timeoutSeconds: number;
    /** Each whole line of the suite's stdout and stderr, NOT redacted: the caller must not print it as is. */
    onLine?: (line: string) => void;
  },
): SuiteRun {
  const startedAt = Date.now();
  const child = spawn(process.execPath, o.args, { cwd: o.cwd, stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, NO_COLOR: '1', FORCE_COLOR: '0' } });
  const output = nodeFs.createWriteStream(o.logFile);
  output.on('error', () => undefined);
  const started: string[] = [];
  // Whole lines only, so that no secret is cut in two by a chunk boundary and slips past the redaction.
  const onLine = (raw: string) => {
    const line = o.redact(raw);
    output.write(`${line}\n`);
    if (o.verbose) process.stdout.write(`${line}\n`);
    const m = /^=== Running scenario: (\S+) ===/.exec(line);
    if (m) started.push(m[1]!);
    o.onLine?.(raw);
  };
  const lines = (stream: NodeJS.ReadableStream) => {
    let pending = '';
    stream.setEncoding('utf8');
    stream.on('data', (chunk: string) => {
      const parts = (pending + chunk).split('\n');
      pending = parts.pop()!;
      parts.forEach(onLine);
    });
    stream.on('end', () => {
      if (pending) onLine(pending);
      pending = '';
    });
  };
  lines(child.stdout!);
  lines(child.stderr!);
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    say(`the suite did not finish within ${o.timeoutSeconds} s; stopping it`);
    child.kill('SIGKILL');
  }, o.timeoutSeconds * 1000);
  const done = (async () => {
    const code = await new Promise<number>((resolve) => {
      child.on('error', (err) => {
        say(`the suite could not run: ${err.message}`);
        resolve(1);
      });
      child.on('close', (c, signal) => resolve(c ?? (signal ? 128 : 1)));
    });
    clearTimeout(timer);
    await new Promise<void>((resolve) => output.end(resolve));
    return { code, timedOut, seconds: (Date.now() - startedAt) / 1000 };
  })();
  return { child, started, done };
}

/** Replaces secrets in every file under `dir` (results kept on request). */
export async function redactFiles(dir: string, redact: (s: string) => string): Promise<void> {
  for (const entry of await fs.readdir(dir, { withFileTypes: true, recursive: true }).catch(() => [])) {
    if (!entry.isFile() || !/\.(json|txt|log)$/.test(entry.name)) continue;
    const file = path.join(entry.parentPath, entry.name);
    const text = await fs.readFile(file, 'utf8');
    const clean = redact(text);
    if (clean !== text) await fs.writeFile(file, clean);
  }
}
