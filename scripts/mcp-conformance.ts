import { spawn, type ChildProcess } from 'node:child_process';
import * as nodeFs from 'node:fs';
import fs from 'node:fs/promises';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import {
  killLeftoversOnExit,
  positiveInt as envInt,
  printServerErrors,
  root,
  sayer,
  startServer,
  stopServer,
  type Server,
} from './support/server.ts';

/**
 * `npm run test:mcp`: the official MCP conformance suite (@modelcontextprotocol/conformance, a
 * pinned devDependency, run from node_modules, never downloaded) against the real MCP endpoint.
 *
 * 1. The real server starts on a free port with a fresh temporary DATA_DIR (scripts/support/
 *    server.ts, as for `npm run test:schema`); its first start prints the demo key.
 * 2. `conformance server --url <base>/api/v1/mcp/<key> --output-dir <tmp>`: the suite's active
 *    scenarios against the personal connector link (the key is in the path, as a connector
 *    holds it). Each scenario leaves a checks.json; a scenario fails when one of its checks is
 *    FAILURE or WARNING (the suite's own rule for its expected-failures baselines), and is
 *    missing when it ended without a result (the runner threw).
 * 3. The results are compared with scripts/mcp-conformance-baseline.json: each scenario that
 *    does not apply to this server, or is known to fail, with the reason, and what its failure
 *    must say (`expect`: e.g. -32601 for a method the server does not offer). Exit 1 when a
 *    scenario fails (or is missing) and the baseline does not list it, or fails another way
 *    than the baseline expects; a listed scenario that now passes is reported (remove it from
 *    the baseline) without failing the run.
 * 4. The server and everything it started are stopped, whatever happened.
 *
 * The key never appears in this script's output: the URL is printed as …/mcp/<API_KEY>, and
 * the suite's output and results (which repeat the URL) are shown with the key replaced.
 *
 * The suite (0.1.16) imports `globSync` from 'fs', which Node.js has only from 22 on; it uses it
 * only in its `tier-check` command. On an older Node.js the suite is run with a module hook
 * (written into the temporary folder) that gives it an `fs` whose globSync throws.
 *
 * Settings (environment): MCP_CONFORMANCE_SCENARIO (run one scenario), MCP_CONFORMANCE_SUITE
 * ("active", the default, "all" or "pending"), MCP_CONFORMANCE_TIMEOUT (seconds for the whole
 * suite, default 600), MCP_CONFORMANCE_VERBOSE=1 (the suite's own output as it runs, key
 * redacted), MCP_CONFORMANCE_BASELINE (another baseline file), MCP_CONFORMANCE_KEEP_DATA=1 (keep
 * the temporary folder: DATA_DIR, server log, the suite's output and results, key redacted).
 */
const say = sayer('mcp-conformance');
const positiveInt = (name: string, fallback?: number) => envInt(say, name, fallback);
const REDACTED = '<API_KEY>';

type Kind = 'not-applicable' | 'expected-failure' | 'bug';
const KINDS: readonly Kind[] = ['not-applicable', 'expected-failure', 'bug'];

interface BaselineEntry {
  kind: Kind;
  reason: string;
  /**
   * Strings that must all appear in the scenario's failing checks (id, error message, details),
   * so that it fails the way the reason says: an unknown method answered with a 500 instead of
   * -32601 is a new failure, not the baselined one.
   */
  expect: string[];
}

interface Baseline {
  conformance: string;
  scenarios: Map<string, BaselineEntry>;
}

interface Check {
  id: string;
  name?: string;
  description?: string;
  status: 'SUCCESS' | 'FAILURE' | 'WARNING' | 'SKIPPED' | 'INFO';
  errorMessage?: string;
  details?: unknown;
}

interface ScenarioResult {
  scenario: string;
  /** undefined: the scenario was started but left no result. */
  checks: Check[] | undefined;
}

async function loadBaseline(file: string): Promise<Baseline> {
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

/** The suite's entry point and version, from its package in node_modules. */
async function findSuite(): Promise<{ bin: string; version: string }> {
  const require = createRequire(path.join(root, 'package.json'));
  let pkgFile: string;
  try {
    pkgFile = require.resolve('@modelcontextprotocol/conformance/package.json');
  } catch {
    throw new Error('@modelcontextprotocol/conformance is not installed (npm ci installs it: it is a devDependency)');
  }
  const pkg = JSON.parse(await fs.readFile(pkgFile, 'utf8')) as { version: string; bin: Record<string, string> | string };
  const bin = typeof pkg.bin === 'string' ? pkg.bin : pkg.bin.conformance!;
  return { bin: path.join(path.dirname(pkgFile), bin), version: pkg.version };
}

/**
 * Node.js before 22 has no fs.globSync, which the suite's bundle imports by name (for its
 * tier-check command only): a resolve hook gives the bundle an `fs` that has one (throwing).
 * Returns the node options that load the hook, none on a Node.js that has globSync.
 */
async function nodeCompatArgs(work: string): Promise<string[]> {
  if (typeof (nodeFs as Record<string, unknown>).globSync === 'function') return [];
  const shim = `import fs from 'node:fs'; export * from 'node:fs'; export default fs;
export function globSync() { throw new Error('fs.globSync needs Node.js 22 or later'); }`;
  const hooks = `const shim = 'data:text/javascript,' + encodeURIComponent(${JSON.stringify(shim)});
export async function resolve(specifier, context, next) {
  if ((specifier === 'fs' || specifier === 'node:fs') && context.parentURL?.includes('/@modelcontextprotocol/conformance/')) {
    return { url: shim, shortCircuit: true };
  }
  return next(specifier, context);
}
`;
  await fs.writeFile(path.join(work, 'node-compat-hooks.mjs'), hooks);
  const register = path.join(work, 'node-compat-register.mjs');
  await fs.writeFile(register, `import { register } from 'node:module';\nregister('./node-compat-hooks.mjs', import.meta.url);\n`);
  return ['--import', pathToFileURL(register).href];
}

/** Every server scenario the installed suite knows (`conformance list --server`), to catch a misspelt baseline entry. */
async function knownScenarios(compat: string[], bin: string, cwd: string): Promise<Set<string> | undefined> {
  const child = spawn(process.execPath, [...compat, bin, 'list', '--server'], { cwd, stdio: ['ignore', 'pipe', 'ignore'] });
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

/** `server-<scenario>-<ISO time with : and . as ->`: the folder the suite writes one scenario's checks.json into. */
const RESULT_DIR = /^server-(.+)-\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}-\d{3}Z$/;

async function readResults(dir: string, started: string[]): Promise<ScenarioResult[]> {
  const byScenario = new Map<string, Check[] | undefined>(started.map((s) => [s, undefined]));
  const entries = (await fs.readdir(dir).catch(() => [] as string[])).sort();
  for (const entry of entries) {
    const m = RESULT_DIR.exec(entry);
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

/** Replaces the key, and any other API key, in every file under `dir` (results kept on request). */
async function redactFiles(dir: string, redact: (s: string) => string): Promise<void> {
  for (const entry of await fs.readdir(dir, { withFileTypes: true, recursive: true }).catch(() => [])) {
    if (!entry.isFile() || !/\.(json|txt|log)$/.test(entry.name)) continue;
    const file = path.join(entry.parentPath, entry.name);
    const text = await fs.readFile(file, 'utf8');
    const clean = redact(text);
    if (clean !== text) await fs.writeFile(file, clean);
  }
}

async function main(): Promise<number> {
  const startedAt = Date.now();
  // A closed pipe (`| head`) must not end the run before it has stopped the server and cleaned up.
  process.stdout.on('error', () => undefined);
  process.stderr.on('error', () => undefined);
  const timeoutSeconds = positiveInt('MCP_CONFORMANCE_TIMEOUT', 600)!;
  const verbose = process.env.MCP_CONFORMANCE_VERBOSE === '1';
  const only = process.env.MCP_CONFORMANCE_SCENARIO || undefined;
  const suiteName = process.env.MCP_CONFORMANCE_SUITE || 'active';
  const baselineFile = path.resolve(process.env.MCP_CONFORMANCE_BASELINE || path.join(root, 'scripts', 'mcp-conformance-baseline.json'));
  const baseline = await loadBaseline(baselineFile);
  const shownBaseline = baselineFile.startsWith(root + path.sep) ? path.relative(root, baselineFile) : baselineFile;
  const suite = await findSuite();
  if (suite.version !== baseline.conformance) {
    say(`note: the baseline was made with conformance ${baseline.conformance}, the installed suite is ${suite.version}: its scenarios may differ`);
  }

  const work = await fs.mkdtemp(path.join(os.tmpdir(), 'mas-mcp-conformance-'));
  const dataDir = path.join(work, 'data');
  const logFile = path.join(work, 'server.log');
  const resultsDir = path.join(work, 'results');
  let server: Server | undefined;
  let runner: ChildProcess | undefined;
  let interrupted = false;
  const onSignal = (signal: NodeJS.Signals) => {
    if (interrupted) return;
    interrupted = true;
    say(`${signal}: stopping`);
    runner?.kill('SIGTERM');
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  killLeftoversOnExit(work, () => server);
  let redact = (s: string) => s.replace(/mas_[A-Za-z0-9_-]{8,}/g, REDACTED);

  try {
    say(`starting the server (DATA_DIR ${dataDir})`);
    server = await startServer(say, work, dataDir, logFile);
    if (interrupted) return 130;
    const key = server.key;
    redact = (s: string) => s.split(key).join(REDACTED).replace(/mas_[A-Za-z0-9_-]{8,}/g, REDACTED);
    const url = `${server.base}/api/v1/mcp/${key}`;
    say(`server up; running conformance ${suite.version} (${only ? `scenario ${only}` : `${suiteName} suite`}) against ${redact(url)}`);

    const compat = await nodeCompatArgs(work);
    const known = await knownScenarios(compat, suite.bin, work);
    const unknown = known ? [...baseline.scenarios.keys()].filter((s) => !known.has(s)) : [];
    if (unknown.length > 0) say(`the baseline lists scenarios the suite does not have (misspelt, or renamed?): ${unknown.join(', ')}`);
    const args = [
      ...compat,
      suite.bin,
      'server',
      '--url', url,
      '--output-dir', resultsDir,
      ...(only ? ['--scenario', only] : ['--suite', suiteName]),
    ];
    const suiteStartedAt = Date.now();
    // From the temporary folder: the suite writes nothing into the clone.
    runner = spawn(process.execPath, args, { cwd: work, stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, NO_COLOR: '1', FORCE_COLOR: '0' } });
    const output = nodeFs.createWriteStream(path.join(work, 'conformance.log'));
    output.on('error', () => undefined);
    const started: string[] = only ? [only] : [];
    // Whole lines only, so that no key is cut in two by a chunk boundary and slips past the redaction.
    const onLine = (raw: string) => {
      const line = redact(raw);
      output.write(`${line}\n`);
      if (verbose) process.stdout.write(`${line}\n`);
      const m = /^=== Running scenario: (\S+) ===/.exec(line);
      if (m) started.push(m[1]!);
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
    lines(runner.stdout!);
    lines(runner.stderr!);
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      say(`the suite did not finish within ${timeoutSeconds} s; stopping it`);
      runner?.kill('SIGKILL');
    }, timeoutSeconds * 1000);
    const code = await new Promise<number>((resolve) => {
      runner!.on('error', (err) => {
        say(`the suite could not run: ${err.message}`);
        resolve(1);
      });
      runner!.on('close', (c, signal) => resolve(c ?? (signal ? 128 : 1)));
    });
    clearTimeout(timer);
    await new Promise<void>((resolve) => output.end(resolve));
    const suiteSeconds = ((Date.now() - suiteStartedAt) / 1000).toFixed(1);
    if (interrupted) return 130;

    const results = await readResults(resultsDir, started);
    if (results.length === 0) {
      say(`the suite ran no scenario (exit ${code}); its output:`);
      process.stderr.write(await fs.readFile(path.join(work, 'conformance.log'), 'utf8').catch(() => ''));
      return 1;
    }

    // The comparison with the baseline.
    const unexpected: ScenarioResult[] = [];
    const expected: { r: ScenarioResult; entry: BaselineEntry }[] = [];
    const nowPassing: { r: ScenarioResult; entry: BaselineEntry }[] = [];
    const passed: ScenarioResult[] = [];
    process.stdout.write(`\nMCP conformance ${suite.version}, ${results.length} scenario(s), ${suiteSeconds} s:\n`);
    for (const r of results) {
      const o = outcome(r);
      const entry = baseline.scenarios.get(r.scenario);
      const counts = r.checks ? ` (${r.checks.filter((c) => c.status === 'SUCCESS').length} ok, ${r.checks.filter((c) => c.status === 'FAILURE').length} failed, ${r.checks.filter((c) => c.status === 'WARNING').length} warnings)` : '';
      let label: string;
      if (o === 'pass' && !entry) {
        passed.push(r);
        label = 'pass';
      } else if (o === 'pass' && entry) {
        nowPassing.push({ r, entry });
        label = `PASSES NOW (baselined as ${entry.kind}: remove it from the baseline)`;
      } else if (entry && o !== 'missing' && entry.expect.every((e) => failureText(r).includes(e))) {
        expected.push({ r, entry });
        label = `${o}, expected: ${entry.kind}`;
      } else if (entry) {
        unexpected.push(r);
        label = `${o.toUpperCase()}, BUT NOT AS THE BASELINE EXPECTS (${o === 'missing' ? 'no result' : `without ${entry.expect.filter((e) => !failureText(r).includes(e)).map((e) => JSON.stringify(e)).join(', ')}`})`;
      } else {
        unexpected.push(r);
        label = `${o.toUpperCase()}, NOT IN THE BASELINE`;
      }
      process.stdout.write(`  ${r.scenario.padEnd(34)} ${label}${counts}\n`);
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
        const tail = (await fs.readFile(path.join(work, 'conformance.log'), 'utf8').catch(() => '')).trimEnd().split('\n').slice(-40);
        process.stdout.write(`\nThe suite's output, last lines:\n${tail.map((l) => `  ${l}`).join('\n')}\n`);
      }
      await printServerErrors(say, logFile, redact);
    }
    if (server.hasExited()) {
      say('the server died during the run');
      await printServerErrors(say, logFile, redact);
      return 1;
    }
    if (timedOut) return 1;
    say(`${unexpected.length === 0 ? 'no unexpected failure' : `${unexpected.length} unexpected failure(s)`}; ${((Date.now() - startedAt) / 1000).toFixed(1)} s in all`);
    return unexpected.length === 0 ? 0 : 1;
  } finally {
    if (server) {
      say('stopping the server');
      await stopServer(say, server, work);
    }
    if (process.env.MCP_CONFORMANCE_KEEP_DATA === '1') {
      await redactFiles(resultsDir, redact);
      say(`kept ${work}`);
    } else await fs.rm(work, { recursive: true, force: true }).catch(() => undefined);
  }
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    say(`failed: ${(err as Error).message}`);
    process.exit(1);
  },
);
