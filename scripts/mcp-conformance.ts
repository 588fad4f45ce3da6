import { type ChildProcess } from 'node:child_process';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { compareWithBaseline, findSuite, knownScenarios, loadBaseline, readResults, redactFiles, runSuite } from './support/conformance.ts';
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
 * The baseline's rules and the comparison are in scripts/support/conformance.ts, shared with
 * mcp-auth-conformance.ts (`npm run test:mcp-auth`).
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
  const suite = await findSuite('@modelcontextprotocol/conformance');
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

    const known = await knownScenarios(suite.bin, work, 'server');
    const unknown = known ? [...baseline.scenarios.keys()].filter((s) => !known.has(s)) : [];
    if (unknown.length > 0) say(`the baseline lists scenarios the suite does not have (misspelt, or renamed?): ${unknown.join(', ')}`);
    const args = [
      suite.bin,
      'server',
      '--url', url,
      '--output-dir', resultsDir,
      ...(only ? ['--scenario', only] : ['--suite', suiteName]),
    ];
    // From the temporary folder: the suite writes nothing into the clone.
    const suiteLog = path.join(work, 'conformance.log');
    const run = runSuite(say, { args, cwd: work, logFile: suiteLog, redact, verbose, timeoutSeconds });
    runner = run.child;
    if (only) run.started.push(only);
    const { code, timedOut, seconds } = await run.done;
    if (interrupted) return 130;

    const results = await readResults(resultsDir, run.started, 'server');
    if (results.length === 0) {
      say(`the suite ran no scenario (exit ${code}); its output:`);
      process.stderr.write(await fs.readFile(suiteLog, 'utf8').catch(() => ''));
      return 1;
    }

    const unexpected = await compareWithBaseline({
      title: `MCP conformance ${suite.version}, ${results.length} scenario(s), ${seconds.toFixed(1)} s`,
      results,
      baseline,
      shownBaseline,
      suiteLog,
      redact,
    });
    if (unexpected > 0) await printServerErrors(say, logFile, redact);
    if (server.hasExited()) {
      say('the server died during the run');
      await printServerErrors(say, logFile, redact);
      return 1;
    }
    if (timedOut) return 1;
    say(`${unexpected === 0 ? 'no unexpected failure' : `${unexpected} unexpected failure(s)`}; ${((Date.now() - startedAt) / 1000).toFixed(1)} s in all`);
    return unexpected === 0 ? 0 : 1;
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
