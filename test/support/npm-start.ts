import { realpathSync } from 'node:fs';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, expect, vi } from 'vitest';
import { processesOfDataDir, ROOT, spawnProject, type Spawned } from './process.ts';

/**
 * The real commands, `npm start` and `npm run worker`, with the embedded PostgreSQL and the
 * embedded Temporal dev server (no DATABASE_URL, no TEMPORAL_ADDRESS) in a DATA_DIR of the
 * calling test file's own (test/e2e/signals*.test.ts): its hooks start from an empty folder,
 * end whatever a failed test left running, and remove the folder.
 */
export function npmStartHarness() {
  let tmp: string;
  const state = { dataDir: '' };
  const started: Spawned[] = [];

  beforeAll(async () => {
    tmp = await fs.mkdtemp(path.join(os.tmpdir(), 'mas-signals-'));
    state.dataDir = path.join(tmp, 'data');
  });
  afterEach(async () => {
    // Whatever a failed test left running: end it, PostgreSQL with its own fast shutdown.
    for (const p of started.splice(0)) if (p.child.exitCode === null && p.child.signalCode === null) p.child.kill('SIGKILL');
    const left = processesOfDataDir(state.dataDir);
    for (const p of left) {
      try {
        process.kill(p.pid, /postgres -D/.test(p.cmd) ? 'SIGINT' : 'SIGKILL');
      } catch {
        // gone meanwhile
      }
    }
    if (left.length > 0) await vi.waitFor(() => expect(processesOfDataDir(state.dataDir)).toEqual([]), { timeout: 30_000, interval: 250 });
  });
  afterAll(async () => {
    await fs.rm(tmp, { recursive: true, force: true });
  });

  const env = (extra: Record<string, string> = {}) => ({ DATA_DIR: state.dataDir, HOST: '127.0.0.1', ...extra });
  const find = (pattern: RegExp) => processesOfDataDir(state.dataDir).filter((p) => pattern.test(p.cmd));

  return {
    get dataDir() {
      return state.dataDir;
    },
    /** The file's temporary folder (DATA_DIR is inside it). */
    get folder() {
      return tmp;
    },
    /** A process of the test's own to end with the others if the test fails. */
    track(proc: Spawned): Spawned {
      started.push(proc);
      return proc;
    },
    env,
    find,
    async npmStart(): Promise<{ npm: Spawned; port: number }> {
      // Port 0, the one it got read from its log: a port picked beforehand may be taken meanwhile
      // (the Temporal dev server picks two more as it starts).
      const npm = spawnProject(['start'], env({ PORT: '0' }), 'npm');
      started.push(npm);
      const [, port] = await npm.waitFor(/"port":(\d+).*"msg":"listening"/, 240_000);
      await npm.waitFor(/listening on/);
      return { npm, port: Number(port) };
    },
    async npmRunWorker(): Promise<Spawned> {
      const npm = spawnProject(['run', 'worker'], env(), 'npm');
      started.push(npm);
      await npm.waitFor(/Temporal worker running/, 120_000);
      return npm;
    },
    /** The API process, its worker process, PostgreSQL and the Temporal dev server of this DATA_DIR run; both Node processes on the pinned Node.js. */
    expectRunning(): void {
      expect(find(API)).toHaveLength(1);
      expect(find(WORKER)).toHaveLength(1);
      expect([...find(API), ...find(WORKER)].map((p) => executable(p.pid))).toEqual([PINNED_NODE, PINNED_NODE]);
      expect(find(POSTMASTER)).toHaveLength(1);
      expect(find(TEMPORAL)).toHaveLength(1);
    },
    async expectNothingLeft(timeoutMs = 60_000): Promise<void> {
      await vi.waitFor(() => expect(processesOfDataDir(state.dataDir).map((p) => p.cmd)).toEqual([]), { timeout: timeoutMs, interval: 250 });
    },
  };
}

// `npm start` runs the built JavaScript (dist/main.js, no transpiler), which runs its worker as a child (dist/worker.js).
/** node, its flags (config/node-flags.ts: `npm start` passes them), then the entry point. */
export const API = /^(\S*\/)?node (--\S+ )*(\S*\/)?dist\/main\.js/;
export const WORKER = /^(\S*\/)?node (--\S+ )*(\S*\/)?dist\/worker\.js/;
export const POSTMASTER = /postgres -D /;
export const TEMPORAL = /temporal server start-dev/;

// The Node.js npm ci installed from the lockfile (node_modules/.bin/node): what npm start's processes must run.
const PINNED_NODE = realpathSync(path.join(ROOT, 'node_modules', '.bin', 'node'));
const executable = (pid: number) => realpathSync(`/proc/${pid}/exe`);

export async function readyz(port: number): Promise<number | 'refused'> {
  return fetch(`http://127.0.0.1:${port}/readyz`).then((r) => r.status, () => 'refused' as const);
}
