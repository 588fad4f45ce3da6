import fs from 'node:fs';
import { ensureBuilt } from '../scripts/build.ts';
import { entryArgs, processTree, spawnProcess, type Spawned } from '../scripts/support/process.ts';
import os from 'node:os';
import path from 'node:path';

export const ROOT = path.resolve(import.meta.dirname, '..');

/** A process a benchmark started (scripts/support/process.ts, the one helper tests, scripts and benchmarks share). */
export type Proc = Spawned;

/** Starts `command` with this process's environment plus `env` (its output kept, waited on by `waitFor`). */
export function start(command: string, args: string[], env: Record<string, string | undefined> = {}): Proc {
  return spawnProcess(command, args, { env, inheritEnv: true });
}

export { processTree };

import { freePort } from '../adapters/embedded/postgres.ts';
import { NODE_FLAGS } from '../config/node-flags.ts';

export { freePort };

/**
 * The node arguments that run one of the service's entry points (`main`, `api`, `worker`,
 * `migrate`) as production runs it: the built JavaScript in dist/ (`npm ci` builds it; a
 * benchmark builds it first when a source is newer: `ensureBuilt`).
 */
export function serviceArgs(entry: 'main' | 'api' | 'worker' | 'migrate', nodeArgs: string[] = []): string[] {
  // The V8 flags package.json's scripts start the service with (config/node-flags.ts), then the
  // benchmark's own (`nodeArgs`), which win where they name the same flag.
  return [...(entry === 'migrate' ? [] : NODE_FLAGS), ...nodeArgs, ...entryArgs(entry)];
}

export function median(values: number[]): number {
  const s = [...values].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}

export function percentile(values: number[], p: number): number {
  const s = [...values].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)]!;
}

export function machine(): string {
  const cpu = os.cpus()[0]?.model ?? 'unknown CPU';
  return `${os.cpus().length} × ${cpu}, ${(os.totalmem() / 2 ** 30).toFixed(0)} GiB, ${os.type()} ${os.release()}, Node ${process.version}`;
}

/**
 * The share of the machine's CPU time the hypervisor gave to others (steal) between two
 * calls, from /proc/stat: on a shared virtual machine this says how much a run was disturbed.
 */
export function stealMeter(): () => string {
  const read = () => {
    try {
      const fields = fs.readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1).map(Number);
      return { steal: fields[7] ?? 0, total: fields.reduce((a, b) => a + b, 0) };
    } catch {
      return undefined;
    }
  };
  const start = read();
  return () => {
    const end = read();
    if (!start || !end || end.total === start.total) return 'unknown';
    return `${((100 * (end.steal - start.steal)) / (end.total - start.total)).toFixed(1)}%`;
  };
}

/**
 * The chat benchmarks' set-up: the mock upstream (bench/mock-upstream.ts), a catalog with one
 * model on it (`bench/mock`), the service API-only (RUN_WORKER=false, the rate limit raised,
 * LOG_LEVEL=warn) with `nodeArgs` before its entry point, and an account with coins and a key
 * made through the CLI. Every process started is pushed onto `procs` for the caller to stop.
 */
export async function startChatService(
  dataDir: string,
  procs: Proc[],
  nodeArgs: string[] = [],
  /** More catalog (YAML lines of providers and of models, `{mock}` standing for the mock's URL) and environment. */
  more: { providers?: string; models?: string; env?: Record<string, string> } = {},
) {
  const mockPort = await freePort();
  const mock = start(process.execPath, ['--import', 'tsx', 'bench/mock-upstream.ts', String(mockPort)]);
  procs.push(mock);
  const mockUrl = (await mock.waitFor(/(http:\/\/127\.0\.0\.1:\d+\/v1)/))[1]!;
  const catalog = path.join(dataDir, 'models.yaml');
  fs.writeFileSync(
    catalog,
    `providers:\n  mock: { kind: openai-compatible, base_url: "${mockUrl}", timeout_seconds: 30 }\n${(more.providers ?? '').replaceAll('{mock}', mockUrl)}` +
      `models:\n  - { id: bench/mock, name: Mock, type: text, generation_types: [chat], provider: { name: mock, model: mock },\n` +
      `      pricing: { input_per_million: 100, output_per_million: 400 }, context_window: 8192, max_output_tokens: 256, default_max_tokens: 16 }\n${(more.models ?? '').replaceAll('{mock}', mockUrl)}`,
  );
  const port = await freePort();
  const env = { DATA_DIR: dataDir, CATALOG_FILE: catalog, PORT: String(port), HOST: '127.0.0.1', RATE_LIMIT_PER_MINUTE: '1000000000', LOG_LEVEL: 'warn', DEMO_COINS: '0', RUN_WORKER: 'false', ...more.env };
  await ensureBuilt();
  const ours = start(process.execPath, serviceArgs('main', nodeArgs), env);
  procs.push(ours);
  await ours.waitFor(/listening on/);
  const cli = (...args: string[]) => start(process.execPath, [...entryArgs('mas'), ...args, '--json'], env);
  await cli('account', 'create', '--email', 'bench@example.com').waitFor(/"id"/);
  await cli('wallet', 'topup', '--account', 'bench@example.com', '--coins', '100000000').waitFor(/"object"/);
  const key = JSON.parse((await cli('key', 'create', '--account', 'bench@example.com').waitFor(/\{.*\}/))[0]).key as string;
  return { mockUrl, port, env, ours, key };
}
