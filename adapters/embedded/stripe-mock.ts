import { execFile, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { promisify } from 'node:util';
import type { Logger } from 'pino';
import { firstUseBuild, masCacheDir, which, type BuildOutput } from './first-use-build.ts';

const execFileAsync = promisify(execFile);

/**
 * stripe-mock, Stripe's own mock of its API (it answers every endpoint from Stripe's OpenAPI
 * document, validating the parameters sent), which the tests use as the Stripe API. Found or
 * built with no manual step, like the Temporal CLI:
 *   1. a `stripe-mock` already on PATH;
 *   2. the cache, ~/.cache/mas/stripe-mock-v0.203.0/stripe-mock (XDG_CACHE_HOME respected);
 *   3. `go install github.com/stripe/stripe-mock@v0.203.0` into the cache, through the Go
 *      module proxy, one process at a time per machine (first-use-build.ts); about a minute.
 * Nothing else is downloaded: without Go, the error says to install Go or put stripe-mock on PATH.
 */
export const STRIPE_MOCK_VERSION = '0.203.0';
const MODULE = `github.com/stripe/stripe-mock@v${STRIPE_MOCK_VERSION}`;

export function stripeMockCacheDir(): string {
  return path.join(masCacheDir(), `stripe-mock-v${STRIPE_MOCK_VERSION}`);
}

/** The binary's path; built on first use, one process at a time per machine. */
export async function ensureStripeMock(logger: Logger, output: BuildOutput = {}): Promise<string> {
  const onPath = await which('stripe-mock');
  if (onPath) return onPath;

  const dir = stripeMockCacheDir();
  const cached = path.join(dir, 'stripe-mock');
  const go = await which('go');
  await firstUseBuild({
    ...output,
    logger,
    name: 'stripe-mock',
    how: `v${STRIPE_MOCK_VERSION} with go install (about a minute)`,
    why: 'the payment tests use it as the Stripe API; put `stripe-mock` on PATH to skip this',
    cacheDir: dir,
    isReady: () => existsSync(cached),
    howToFix: go
      ? `run \`GOBIN=${dir} CGO_ENABLED=0 go install ${MODULE}\` by hand to see the whole error, or put \`stripe-mock\` on PATH.`
      : `install Go (1.22 or later) and start again, or put \`stripe-mock\` (${MODULE}) on PATH.`,
    build: () => install(dir, cached, go),
  });
  return cached;
}

async function install(dir: string, cached: string, go: string | undefined): Promise<void> {
  if (!go) throw new Error('Go is not installed (no `go` on PATH)');
  await fs.mkdir(dir, { recursive: true });
  // Built into a private folder, then moved into place: nothing ever sees half a binary.
  const staging = await fs.mkdtemp(path.join(dir, '.staging-'));
  try {
    await execFileAsync(go, ['install', MODULE], {
      env: { ...process.env, GOBIN: staging, CGO_ENABLED: process.env.CGO_ENABLED ?? '0' },
      maxBuffer: 64 * 1024 * 1024,
    });
    await fs.rename(path.join(staging, 'stripe-mock'), cached);
  } finally {
    await fs.rm(staging, { recursive: true, force: true });
  }
}

export interface RunningStripeMock {
  /** `http://127.0.0.1:<port>`: what STRIPE_API_URL takes. */
  url: string;
  pid: number;
  /** Stops this process (by its PID), and waits for it to exit. */
  stop(): Promise<void>;
}

const LISTENING = /Listening for HTTP at address: 127\.0\.0\.1:(\d+)/;

/**
 * Starts stripe-mock on ports the system chooses, on the loopback interface only. Both
 * listeners are named: with only -http-port it would also open HTTPS on its fixed default
 * port (12112) on every interface, where two test files starting it at once would collide.
 * The port is read from its own start-up line, so no port is picked and then raced for.
 */
export async function startStripeMock(binary: string, opts: { timeoutMs?: number } = {}): Promise<RunningStripeMock> {
  const child = spawn(binary, ['-http-addr', '127.0.0.1:', '-https-addr', '127.0.0.1:'], { stdio: ['ignore', 'pipe', 'pipe'] });
  const pid = child.pid;
  if (pid === undefined) throw new Error(`could not start ${binary}`);
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  // A test process that ends abruptly still stops its stripe-mock.
  const onExit = () => {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // gone already
    }
  };
  process.once('exit', onExit);

  const seen: string[] = [];
  const port = await new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => fail(new Error(`stripe-mock did not say where it listens within ${opts.timeoutMs ?? 30_000} ms`)), opts.timeoutMs ?? 30_000);
    const fail = (err: Error) => {
      clearTimeout(timer);
      reject(new Error(`${err.message}; its output: ${seen.join(' | ').slice(0, 2000)}`));
    };
    for (const stream of [child.stdout, child.stderr]) {
      createInterface({ input: stream }).on('line', (line) => {
        seen.push(line);
        const match = LISTENING.exec(line);
        if (match) {
          clearTimeout(timer);
          resolve(Number(match[1]));
        }
      });
    }
    child.once('error', fail);
    child.once('exit', (code, signal) => fail(new Error(`stripe-mock exited (${signal ?? `code ${code}`}) before it listened`)));
  }).catch(async (err: unknown) => {
    process.off('exit', onExit);
    onExit();
    await exited;
    throw err;
  });

  let stopping: Promise<void> | undefined;
  return {
    url: `http://127.0.0.1:${port}`,
    pid,
    stop: () =>
      (stopping ??= (async () => {
        process.off('exit', onExit);
        if (child.exitCode !== null || child.signalCode !== null) return;
        process.kill(pid, 'SIGTERM');
        const killer = setTimeout(onExit, 5000);
        await exited;
        clearTimeout(killer);
      })()),
  };
}
