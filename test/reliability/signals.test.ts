import { execFileSync, spawn } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import fs from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { isRunning, processesOfDataDir, ROOT, spawnProject, type Spawned } from '../support/process.ts';
import { reportSection, table } from './support/results.ts';

/**
 * Signals and leftovers (issue 20, part 8), on the real `npm start` with the embedded
 * PostgreSQL and Temporal dev server (no DATABASE_URL, no TEMPORAL_ADDRESS), a fresh DATA_DIR
 * each. test/e2e/signals.test.ts covers SIGINT and SIGTERM and the adoption after the API
 * process alone is SIGKILLed; this file adds:
 *   - SIGINT, SIGTERM, SIGHUP and SIGUSR2 to npm's PID leave no PostgreSQL or Temporal
 *     process behind (by the pids in DATA_DIR and by ps), and how long the stop took;
 *   - a SIGKILLed start: node and npm killed with the servers left holding their ports (the
 *     next start adopts them), then everything killed (a stale postmaster.pid and server.json,
 *     and the old PostgreSQL port held by a stranger): the next start recovers by itself;
 *   - a test run (vitest with the project's global setup) interrupted with SIGINT mid-run
 *     leaves no PostgreSQL or Temporal process of its temporary data directory.
 */
let tmp: string;
const started: Spawned[] = [];
const dataDirs: string[] = [];
const signalRows: (string | number)[][] = [];
const crashRows: (string | number)[][] = [];
let interruptedRow: (string | number)[] | undefined;

beforeAll(async () => {
  tmp = await fs.mkdtemp(path.join(os.tmpdir(), 'mas-rel-signals-'));
});

/** Ends whatever a failed test left running: npm and node first, then the servers (PostgreSQL by its fast shutdown). */
async function cleanUp(dir: string): Promise<void> {
  const left = processesOfDataDir(dir);
  for (const p of left) {
    try {
      process.kill(p.pid, /postgres -D/.test(p.cmd) ? 'SIGINT' : 'SIGKILL');
    } catch {
      // gone meanwhile
    }
  }
  if (left.length > 0) await vi.waitFor(() => expect(processesOfDataDir(dir)).toEqual([]), { timeout: 30_000, interval: 250 }).catch(() => undefined);
}

afterEach(async () => {
  for (const p of started.splice(0)) if (p.child.exitCode === null && p.child.signalCode === null) p.child.kill('SIGKILL');
  for (const dir of dataDirs) await cleanUp(dir);
});

afterAll(async () => {
  await fs.rm(tmp, { recursive: true, force: true });
  const parts = ['## 8. Signals and leftovers', ''];
  parts.push(
    'Each signal went to the PID of `npm start` (npm, as a process manager would signal it), with the embedded PostgreSQL and Temporal dev server in a fresh DATA_DIR. ' +
      '"Left" counts the processes of that DATA_DIR still alive afterwards (by the pids in postmaster.pid and temporal/server.json, and by `ps`); "stop" is the time from the signal until none was left.',
    '',
    table(['Signal', 'Exit of npm', 'Processes before', 'Left (pid files)', 'Left (ps)', 'Stop (s)'], signalRows),
    '',
    'A SIGKILLed start, then the next start on the same DATA_DIR:',
    '',
    table(['Killed', 'State left', 'Next start', 'Start (s)', 'Left after its SIGTERM'], crashRows),
  );
  if (interruptedRow) {
    parts.push('', 'A test run (vitest with test/support/global-setup.ts) interrupted by SIGINT while a test ran:', '', table(['Run', 'Servers it had', 'Exit', 'Servers left after 30 s', 'Data folders left', "vitest's test workers left (ended by this test)"], [interruptedRow]));
  }
  await reportSection('signals', 8, parts.join('\n'));
});

const POSTMASTER = /postgres -D /;
const TEMPORAL = /temporal server start-dev/;
// `npm start` runs the built dist/main.js, which runs its worker as a child process (dist/worker.js).
// Node's flags (config/node-flags.ts) come between node and the entry point.
const API = /^(\S*\/)?node (--\S+ )*(\S*\/)?dist\/main\.js/;
const WORKER = /^(\S*\/)?node (--\S+ )*(\S*\/)?dist\/worker\.js/;

async function freshDataDir(name: string): Promise<string> {
  const dir = path.join(tmp, name, 'data');
  await fs.mkdir(path.dirname(dir), { recursive: true });
  dataDirs.push(dir);
  return dir;
}

async function npmStart(dataDir: string): Promise<{ npm: Spawned; port: number; seconds: number }> {
  const t0 = performance.now();
  const npm = spawnProject(['start'], { DATA_DIR: dataDir, HOST: '127.0.0.1', PORT: '0' }, 'npm');
  started.push(npm);
  const [, port] = await npm.waitFor(/"port":(\d+).*"msg":"listening"/, 240_000);
  await npm.waitFor(/listening on/);
  return { npm, port: Number(port), seconds: (performance.now() - t0) / 1000 };
}

/** The pids DATA_DIR records for its servers. */
async function recordedPids(dataDir: string): Promise<{ postmaster?: number; temporal?: number }> {
  const postmaster = await fs.readFile(path.join(dataDir, 'postgres', 'postmaster.pid'), 'utf8').then((t) => Number(t.split('\n')[0]), () => undefined);
  const temporal = await fs
    .readFile(path.join(dataDir, 'temporal', 'server.json'), 'utf8')
    .then((t) => (JSON.parse(t) as { pid: number }).pid, () => undefined);
  return { postmaster, temporal };
}

/** Lines of `ps` that name this DATA_DIR (the postmaster's -D, the dev server's --db-filename, node's environment is not shown: those come from /proc). */
function psLines(dataDir: string): string[] {
  return execFileSync('ps', ['-eo', 'pid,stat,args', '--no-headers'], { encoding: 'utf8' })
    .split('\n')
    .filter((l) => l.includes(dataDir) && !/^\s*\d+\s+Z/.test(l));
}

const readyz = (port: number) => fetch(`http://127.0.0.1:${port}/readyz`).then((r) => r.status, () => 'refused' as const);

describe.runIf(process.platform === 'linux')('signals to `npm start` and leftovers', () => {
  it('SIGINT, SIGTERM, SIGHUP and SIGUSR2 to npm each stop the API, PostgreSQL and the Temporal dev server', async () => {
    // The four at once, each in its own DATA_DIR: four first starts in the time of about one.
    const results = await Promise.all(
      (['SIGINT', 'SIGTERM', 'SIGHUP', 'SIGUSR2'] as const).map(async (signal) => {
        const dataDir = await freshDataDir(signal.toLowerCase());
        const { npm, port } = await npmStart(dataDir);
        expect(await readyz(port)).toBe(200);
        const pids = await recordedPids(dataDir);
        expect(pids.postmaster).toBeGreaterThan(0);
        expect(pids.temporal).toBeGreaterThan(0);
        const before = processesOfDataDir(dataDir);
        expect(before.filter((p) => API.test(p.cmd))).toHaveLength(1);
        expect(before.filter((p) => WORKER.test(p.cmd))).toHaveLength(1);
        expect(before.filter((p) => POSTMASTER.test(p.cmd))).toHaveLength(1);
        expect(before.filter((p) => TEMPORAL.test(p.cmd))).toHaveLength(1);

        const t0 = performance.now();
        npm.child.kill(signal);
        let seconds = Number.NaN;
        await vi
          .waitFor(() => expect(processesOfDataDir(dataDir)).toEqual([]), { timeout: 90_000, interval: 100 })
          .then(() => (seconds = (performance.now() - t0) / 1000))
          .catch(() => undefined);
        const exit = await Promise.race([npm.exited.then((code) => code ?? npm.child.signalCode ?? '?'), new Promise<string>((r) => setTimeout(() => r('running'), 5_000))]);
        const leftByPid = [pids.postmaster!, pids.temporal!].filter(isRunning).length;
        const leftByPs = psLines(dataDir).length;
        return { signal, dataDir, npm, port, exit, before: before.length, leftByPid, leftByPs, seconds, left: processesOfDataDir(dataDir) };
      }),
    );
    for (const r of results) signalRows.push([r.signal, String(r.exit), r.before, r.leftByPid, r.leftByPs, Number.isNaN(r.seconds) ? 'did not stop' : r.seconds.toFixed(1)]);
    for (const r of results) {
      expect(r.left.map((p) => p.cmd), `${r.signal}: ${r.npm.output().slice(-3000)}`).toEqual([]);
      expect(r.leftByPid, r.signal).toBe(0);
      expect(r.leftByPs, r.signal).toBe(0);
      expect(await readyz(r.port), r.signal).toBe('refused');
      // The graceful stop ran: the service and both embedded servers said so.
      expect(r.npm.output(), r.signal).toContain('"msg":"stopped"');
      expect(r.npm.output(), r.signal).toContain('stopped embedded PostgreSQL');
      expect(r.npm.output(), r.signal).toContain('stopped embedded Temporal dev server');
    }
  }, 420_000);

  it('a SIGKILLed start leaves state the next start recovers from by itself: servers left running, then a stale postmaster.pid and a held port', async () => {
    const dataDir = await freshDataDir('sigkill');
    const first = await npmStart(dataDir);
    const pids = await recordedPids(dataDir);

    // 1. node and npm killed outright (kill -9; node's process group is npm's, which is this
    //    test's, so each by its pid), the servers (sessions of their own) left holding their ports.
    const api = processesOfDataDir(dataDir).find((p) => API.test(p.cmd))!;
    process.kill(api.pid, 'SIGKILL');
    process.kill(first.npm.child.pid!, 'SIGKILL');
    await first.npm.exited;
    await vi.waitFor(() => expect(processesOfDataDir(dataDir).filter((p) => API.test(p.cmd))).toEqual([]), { timeout: 10_000 });
    // Its worker process saw it go (the IPC channel closed) and stopped by itself.
    await vi.waitFor(() => expect(processesOfDataDir(dataDir).filter((p) => WORKER.test(p.cmd))).toEqual([]), { timeout: 60_000, interval: 250 });
    expect(isRunning(pids.postmaster!)).toBe(true);
    expect(isRunning(pids.temporal!)).toBe(true);

    const second = await npmStart(dataDir);
    expect(second.npm.output()).toContain('attached to the running embedded PostgreSQL');
    expect(second.npm.output()).toContain('attached to the running embedded Temporal dev server');
    expect(await readyz(second.port)).toBe(200);
    crashRows.push(['npm and node (SIGKILL)', 'PostgreSQL and Temporal running, their ports held', 'adopted both, ready', second.seconds.toFixed(1), '(next row)']);

    // 2. Everything killed outright: npm, node, the postmaster and its backends, the dev server.
    //    postmaster.pid and server.json stay behind naming dead pids; a stranger then takes the
    //    port PostgreSQL had (the next start must not wait for it).
    const pgPort = Number((await fs.readFile(path.join(dataDir, 'postgres', 'postmaster.pid'), 'utf8')).split('\n')[3]);
    for (const p of processesOfDataDir(dataDir)) {
      try {
        process.kill(p.pid, 'SIGKILL');
      } catch {
        // gone meanwhile
      }
    }
    await second.npm.exited;
    await vi.waitFor(() => expect(processesOfDataDir(dataDir)).toEqual([]), { timeout: 20_000, interval: 100 });
    expect(existsSync(path.join(dataDir, 'postgres', 'postmaster.pid'))).toBe(true);
    expect(existsSync(path.join(dataDir, 'temporal', 'server.json'))).toBe(true);
    const stranger = net.createServer();
    await new Promise<void>((resolve, reject) => {
      stranger.once('error', reject);
      stranger.listen(pgPort, '127.0.0.1', () => resolve());
    });
    try {
      const third = await npmStart(dataDir);
      expect(await readyz(third.port)).toBe(200);
      const now = await recordedPids(dataDir);
      expect(now.postmaster).not.toBe(pids.postmaster);
      const newPgPort = Number((await fs.readFile(path.join(dataDir, 'postgres', 'postmaster.pid'), 'utf8')).split('\n')[3]);
      expect(newPgPort).not.toBe(pgPort);
      // The data survived: the demo account the first start made is still there, not made again.
      expect(third.npm.output()).not.toContain('Demo account created');

      third.npm.child.kill('SIGTERM');
      await vi.waitFor(() => expect(processesOfDataDir(dataDir)).toEqual([]), { timeout: 90_000, interval: 100 });
      crashRows.push([
        'everything (npm, node, postmaster and backends, Temporal)',
        `stale postmaster.pid (pid ${pids.postmaster}) and server.json, PostgreSQL's port ${pgPort} held by another process`,
        `started both anew (PostgreSQL on ${newPgPort}), ready`,
        third.seconds.toFixed(1),
        processesOfDataDir(dataDir).length + psLines(dataDir).length,
      ]);
      crashRows[0]![4] = 'see next row';
    } finally {
      await new Promise((r) => stranger.close(r));
    }
  }, 420_000);

  it('a test run interrupted by SIGINT (Ctrl-C on `npm test`) leaves no PostgreSQL or Temporal process behind', async () => {
    // vitest with the project's global setup, on one tiny test that waits; TMPDIR points the
    // setup's `mktemp -d` data directory into a folder of this test.
    const dir = path.join(tmp, 'interrupted');
    const runTmp = path.join(dir, 'tmp');
    await fs.mkdir(runTmp, { recursive: true });
    dataDirs.push(runTmp);
    const marker = path.join(dir, 'running');
    await fs.writeFile(
      path.join(dir, 'tiny.test.ts'),
      `import fs from 'node:fs';\nit('waits', async () => {\n  fs.writeFileSync(${JSON.stringify(marker)}, 'x');\n  await new Promise((r) => setTimeout(r, 120_000));\n}, 400_000);\n`,
    );
    await fs.writeFile(
      path.join(dir, 'vitest.config.mjs'),
      `export default { test: { globals: true, include: ['tiny.test.ts'], globalSetup: [${JSON.stringify(path.join(ROOT, 'test/support/global-setup.ts'))}], pool: 'forks', hookTimeout: 180000, teardownTimeout: 60000 } };\n`,
    );
    const child = spawn(process.execPath, [path.join(ROOT, 'node_modules/vitest/vitest.mjs'), 'run', '--config', path.join(dir, 'vitest.config.mjs'), '--root', dir], {
      cwd: ROOT,
      env: { PATH: process.env.PATH, HOME: process.env.HOME, TMPDIR: runTmp },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout.on('data', (c: Buffer) => (out += c.toString()));
    child.stderr.on('data', (c: Buffer) => (out += c.toString()));
    const exited = new Promise<number | string>((r) => child.once('exit', (code, signal) => r(code ?? signal ?? '?')));
    try {
      await vi.waitFor(() => expect(existsSync(marker), out).toBe(true), { timeout: 240_000, interval: 250 });
      const servers = processesOfDataDir(runTmp).filter((p) => POSTMASTER.test(p.cmd) || TEMPORAL.test(p.cmd));
      expect(servers.filter((p) => POSTMASTER.test(p.cmd))).toHaveLength(1);
      expect(servers.filter((p) => TEMPORAL.test(p.cmd))).toHaveLength(1);

      child.kill('SIGINT');
      const code = await Promise.race([exited, new Promise<string>((r) => setTimeout(() => r('still running after 60 s'), 60_000))]);
      // The servers get a moment to finish stopping after vitest itself is gone.
      await vi.waitFor(() => expect(processesOfDataDir(runTmp).filter((p) => POSTMASTER.test(p.cmd) || TEMPORAL.test(p.cmd))).toEqual([]), { timeout: 30_000, interval: 250 }).catch(() => undefined);
      const left = processesOfDataDir(runTmp).filter((p) => POSTMASTER.test(p.cmd) || TEMPORAL.test(p.cmd));
      // The setup's own folder (mas-test-*; vite and others leave theirs in TMPDIR too).
      const folders = (await fs.readdir(runTmp)).filter((f) => f.startsWith('mas-test-'));
      // Not a server, and not this project's to stop: vitest's own fork running the test, which
      // its main process leaves behind on SIGINT (orphaned until the test ends). Counted, then ended.
      const workers = withEnv(`TMPDIR=${runTmp}`);
      for (const pid of workers) process.kill(pid, 'SIGKILL');
      interruptedRow = ['vitest run (SIGINT while a test ran)', servers.length, String(code), left.length + psLines(runTmp).filter((l) => !left.some((p) => l.trim().startsWith(String(p.pid)))).length, folders.length, workers.length];
      expect(left.map((p) => p.cmd), out.slice(-3000)).toEqual([]);
      expect(psLines(runTmp)).toEqual([]);
      // Its temporary data directory went with them.
      expect(folders).toEqual([]);
    } finally {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      for (const pid of withEnv(`TMPDIR=${runTmp}`)) process.kill(pid, 'SIGKILL');
    }
  }, 420_000);
});

/** Live processes with this entry in their environment. */
function withEnv(entry: string): number[] {
  const found: number[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name) || !isRunning(Number(name))) continue;
    try {
      if (readFileSync(`/proc/${name}/environ`, 'utf8').split('\0').includes(entry)) found.push(Number(name));
    } catch {
      // gone, or not readable
    }
  }
  return found;
}
