import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { ensureStripeMock, startStripeMock, type RunningStripeMock } from '../adapters/embedded/stripe-mock.ts';
import { createLogger } from '../config/logger.ts';
import { defaultVenvDir, ensurePythonVenv } from './support/python-venv.ts';
import { killLeftoversOnExit, positiveInt as envInt, printServerErrors, root, sayer, startServer, stopServer, type Server } from './support/server.ts';

/**
 * `npm run test:schema`: fuzzes the running service against its own OpenAPI document with
 * schemathesis, every check on, POST /files included.
 *
 * 1. schemathesis (pinned) lives in a Python venv outside the clone, made on first use:
 *    ~/.cache/mas/schemathesis-<version> (SCHEMATHESIS_VENV to put it elsewhere).
 * 2. The real server (`node --import tsx main.ts`) starts on a free port with a fresh
 *    temporary DATA_DIR, so the embedded PostgreSQL and Temporal dev server start too and the
 *    first start prints the demo key of a funded account, which the fuzzer then uses.
 * 3. `schemathesis run <base>/api/v1/openapi.json --checks all --max-examples N`.
 * 4. SIGTERM to the server and a wait for it (and everything it started) to exit; whatever is
 *    left of its process group after that is killed. The exit code is schemathesis's: non-zero
 *    when it found a failure (or the server died under it).
 *
 * Settings (environment): SCHEMA_MAX_EXAMPLES (default 50: cases per operation and phase),
 * SCHEMA_MAX_TIME (seconds, a time budget for the whole run), SCHEMA_SEED, SCHEMA_WORKERS
 * (default 1), SCHEMA_PHASES (e.g. "examples,coverage,fuzzing"), SCHEMA_REPORT_DIR (junit and
 * HAR reports there), SCHEMA_EXTRA_ARGS (more schemathesis options, split on spaces),
 * SCHEMA_CONFIG (another schemathesis.toml than scripts/schemathesis.toml), SCHEMA_KEEP_DATA=1
 * (keep the temporary DATA_DIR and the server log).
 */
const SCHEMATHESIS_VERSION = '4.32.5';
const venv = process.env.SCHEMATHESIS_VENV || defaultVenvDir('schemathesis', SCHEMATHESIS_VERSION);
const say = sayer('schema-fuzz');
const positiveInt = (name: string, fallback?: number) => envInt(say, name, fallback);

/** The venv's schemathesis, installed from PyPI on first use (scripts/support/python-venv.ts). */
async function ensureSchemathesis(): Promise<string> {
  const bin = (dir: string) => path.join(dir, 'bin', 'schemathesis');
  const dir = await ensurePythonVenv({
    dir: venv,
    name: 'schemathesis',
    version: SCHEMATHESIS_VERSION,
    why: 'the schema fuzz run (npm run test:schema, part of npm run test:reliability) needs it; SCHEMATHESIS_VENV names another venv',
    installs: [[`schemathesis==${SCHEMATHESIS_VERSION}`]],
    out: say,
    works: (d) => spawnSync(bin(d), ['--version'], { encoding: 'utf8' }).stdout?.includes(SCHEMATHESIS_VERSION) ?? false,
  });
  return bin(dir);
}

async function main(): Promise<number> {
  const maxExamples = positiveInt('SCHEMA_MAX_EXAMPLES', 50)!;
  const maxTime = positiveInt('SCHEMA_MAX_TIME');
  const seed = positiveInt('SCHEMA_SEED');
  // One worker: with several, Python 3.11 (before 3.11.9) can fail inside hypothesis with "AST constructor
  // recursion depth mismatch" (CPython gh-106905, ast.parse from concurrent threads).
  const workers = positiveInt('SCHEMA_WORKERS', 1)!;
  const schemathesis = await ensureSchemathesis();

  const work = await fs.mkdtemp(path.join(os.tmpdir(), 'mas-schema-fuzz-'));
  const dataDir = path.join(work, 'data');
  const logFile = path.join(work, 'server.log');
  let server: Server | undefined;
  let stripe: RunningStripeMock | undefined;
  let interrupted = false;
  const onSignal = (signal: NodeJS.Signals) => {
    if (interrupted) return;
    interrupted = true;
    say(`${signal}: stopping`);
    fuzz?.kill('SIGTERM');
  };
  let fuzz: ChildProcess | undefined;
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  killLeftoversOnExit(work, () => server);

  try {
    // Payments on, against stripe-mock (Stripe's API, locally): the payment routes are fuzzed as
    // a server that takes payments runs them, not only as "payments are not set up" (503).
    stripe = await startStripeMock(await ensureStripeMock(createLogger('warn', process.stderr)));
    // Plans too: the document then names them (`plan` is one of them), and a plan's Checkout is
    // fuzzed as on a server that sells them. (With no plans no body is valid: `plan` admits nothing.)
    const plansFile = path.join(work, 'plans.yaml');
    await fs.writeFile(plansFile, 'plans:\n  - { name: Starter, stripe_price_id: price_SchemaFuzzStarter, coins_per_period: 10000 }\n  - { name: Pro, stripe_price_id: price_SchemaFuzzPro, coins_per_period: 50000 }\n');
    say(`starting the server (DATA_DIR ${dataDir}; Stripe API: stripe-mock at ${stripe.url})`);
    server = await startServer(say, work, dataDir, logFile, {
      STRIPE_SECRET_KEY: 'sk_test_SchemaFuzz',
      STRIPE_WEBHOOK_SECRET: 'whsec_schema_fuzz',
      STRIPE_API_URL: stripe.url,
      PLANS_FILE: plansFile,
    });
    if (interrupted) return 130;
    say(`server up at ${server.base}; fuzzing with up to ${maxExamples} examples per operation`);
    const args = [
      '--config-file',
      process.env.SCHEMA_CONFIG ?? path.join(root, 'scripts', 'schemathesis.toml'),
      'run',
      `${server.base}/api/v1/openapi.json`,
      '--url', `${server.base}/api/v1`,
      '--header', `Authorization: Bearer ${server.key}`,
      '--checks', 'all',
      '--max-examples', String(maxExamples),
      '--workers', String(workers),
      '--generation-database', 'none',
      '--no-color',
      ...(maxTime ? ['--max-time', String(maxTime)] : []),
      ...(seed ? ['--seed', String(seed)] : []),
      ...(process.env.SCHEMA_PHASES ? ['--phases', process.env.SCHEMA_PHASES] : []),
      ...(process.env.SCHEMA_REPORT_DIR ? ['--report', 'junit,har', '--report-dir', path.resolve(process.env.SCHEMA_REPORT_DIR)] : []),
      // Anything else for schemathesis, e.g. "--include-path /files" to fuzz one operation.
      ...(process.env.SCHEMA_EXTRA_ARGS ?? '').split(/\s+/).filter(Boolean),
    ];
    // Run from the temporary folder: schemathesis and hypothesis write nothing into the clone.
    fuzz = spawn(schemathesis, args, { cwd: work, stdio: ['ignore', 'inherit', 'inherit'], env: { ...process.env, PYTHONUNBUFFERED: '1' } });
    const code = await new Promise<number>((resolve) => {
      fuzz!.on('error', (err) => {
        say(`schemathesis could not run: ${err.message}`);
        resolve(1);
      });
      fuzz!.on('exit', (c, signal) => resolve(c ?? (signal ? 128 : 1)));
    });
    if (server.hasExited()) {
      say('the server died during the run');
      await printServerErrors(say, logFile);
      return 1;
    }
    if (code !== 0) await printServerErrors(say, logFile);
    say(code === 0 ? 'schemathesis found no failure' : `schemathesis exited with ${code}`);
    return interrupted ? 130 : code;
  } finally {
    if (server) {
      say('stopping the server');
      await stopServer(say, server, work);
    }
    await stripe?.stop();
    if (process.env.SCHEMA_KEEP_DATA === '1') say(`kept ${work}`);
    else await fs.rm(work, { recursive: true, force: true }).catch(() => undefined);
  }
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    say(`failed: ${(err as Error).message}`);
    process.exit(1);
  },
);
