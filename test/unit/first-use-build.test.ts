import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pino from 'pino';
import lockfile from 'proper-lockfile';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { firstUseBuild, type FirstUseBuild } from '../../adapters/embedded/first-use-build.ts';
import { ROOT } from '../support/process.ts';

const CHILD = path.join(ROOT, 'test/support/first-use-build-child.ts');

let root: string;
beforeEach(async () => {
  root = await fs.mkdtemp(path.join(os.tmpdir(), 'mas-first-use-'));
});
afterEach(async () => {
  vi.useRealTimers();
  await fs.rm(root, { recursive: true, force: true });
});

/** A fake artifact in its own cache dir: counts its builds, collects the human lines. */
function artifact(name = 'thing', build?: () => Promise<void>) {
  const cacheDir = path.join(root, 'cache', name);
  const file = path.join(cacheDir, 'artifact');
  const lines: string[] = [];
  let builds = 0;
  const options: FirstUseBuild = {
    name: `the ${name}`,
    how: 'with make',
    why: 'the tests need it; set THING_URL to use another one',
    cacheDir,
    howToFix: 'run `make thing` by hand, or set THING_URL',
    tty: true,
    out: (line) => lines.push(line),
    isReady: () => existsSync(file),
    async build() {
      builds++;
      if (build) return build();
      await new Promise((r) => setTimeout(r, 50));
      await fs.mkdir(cacheDir, { recursive: true });
      await fs.writeFile(file, 'built');
    },
  };
  return { options, lines, file, lockPath: `${cacheDir}.lock`, builds: () => builds };
}

function child(mode: 'build' | 'hang', cacheDir: string, countFile: string, goFile: string, staleMs = 30_000) {
  const proc = spawn(process.execPath, ['--import', 'tsx', CHILD, mode, cacheDir, countFile, goFile, String(staleMs)], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  proc.stdout.on('data', (d: Buffer) => (output += d.toString()));
  proc.stderr.on('data', (d: Buffer) => (output += d.toString()));
  const exited = new Promise<number | null>((resolve) => proc.once('exit', (code) => resolve(code)));
  return { proc, output: () => output, exited };
}

const countLines = (file: string) => (existsSync(file) ? readFileSync(file, 'utf8').split('\n').filter(Boolean) : []);

describe('firstUseBuild', () => {
  it('builds once for several concurrent callers in one process, and all of them resolve', async () => {
    const a = artifact();
    await Promise.all(Array.from({ length: 5 }, () => firstUseBuild(a.options)));
    expect(a.builds()).toBe(1);
    expect(existsSync(a.file)).toBe(true);
    expect(existsSync(a.lockPath)).toBe(false); // released
    await firstUseBuild(a.options); // ready: no second build
    expect(a.builds()).toBe(1);
  });

  it('builds once when two processes race on the same lock; the other one waits and says so', async () => {
    const cacheDir = path.join(root, 'cache', 'raced');
    const countFile = path.join(root, 'builds');
    const goFile = path.join(root, 'go');
    const children = [child('build', cacheDir, countFile, goFile), child('build', cacheDir, countFile, goFile)];
    // Both processes up before either may start, so that they really race.
    await vi.waitFor(async () => expect((await fs.readdir(root)).filter((f) => f.startsWith('builds.ready-'))).toHaveLength(2), { timeout: 30_000, interval: 50 });
    await fs.writeFile(goFile, '');
    const codes = await Promise.all(children.map((c) => c.exited));

    expect(codes, children.map((c) => c.output()).join('\n')).toEqual([0, 0]);
    const builders = countLines(countFile);
    expect(builders).toHaveLength(1);
    const [builder, waiter] = children[0]!.proc.pid === Number(builders[0]) ? children : [children[1]!, children[0]!];
    expect(builder!.output()).toContain('Building the test artifact: a test needs it.');
    expect(waiter!.output()).toMatch(/Waiting for another process that is building the test artifact \(lock .*raced\.lock\) …/);
    expect(waiter!.output()).toMatch(/The test artifact is ready: another process built it \(waited \d+ s\)\./);
    expect(waiter!.output()).not.toContain('Building');
  });

  it('a caller that finds the lock held says it is waiting, then reports the artifact ready without building it', async () => {
    const a = artifact();
    await fs.mkdir(path.dirname(a.lockPath), { recursive: true });
    const release = await lockfile.lock(a.lockPath, { realpath: false, lockfilePath: a.lockPath });
    // An injected clock: the progress of the wait, with no wall time involved.
    let now = 0;
    const timers: { ms: number; fn: () => void; stopped: boolean }[] = [];
    const clock = {
      now: () => now,
      every(ms: number, fn: () => void) {
        const timer = { ms, fn, stopped: false };
        timers.push(timer);
        return () => void (timer.stopped = true);
      },
    };
    const waiting = firstUseBuild({ ...a.options, clock });
    await vi.waitFor(() => expect(a.lines).toEqual([`Waiting for another process that is building the thing (lock ${a.lockPath}) …`]), { timeout: 10_000 });
    expect(timers.map((t) => t.ms)).toEqual([15_000]);
    for (let i = 0; i < 2; i++) {
      now += 15_000;
      timers[0]!.fn();
    }
    expect(a.lines.slice(1)).toEqual(['still waiting for the thing: 15 s', 'still waiting for the thing: 30 s']);

    await fs.mkdir(path.dirname(a.file), { recursive: true });
    await fs.writeFile(a.file, 'built by the holder');
    await release();
    await waiting;
    expect(a.builds()).toBe(0);
    expect(timers[0]!.stopped).toBe(true);
    expect(a.lines.at(-1)).toBe('The thing is ready: another process built it (waited 30 s).');
  });

  it('on a terminal, says what it builds, why, where it is kept, the elapsed time every 15 s, and when it is done', async () => {
    vi.useFakeTimers({ toFake: ['setInterval', 'clearInterval', 'Date'] });
    let started!: () => void;
    const building = new Promise<void>((r) => (started = r));
    let finish!: () => void;
    const a = artifact('slow thing', async () => {
      started();
      await new Promise<void>((r) => (finish = r));
      await fs.mkdir(a.options.cacheDir, { recursive: true });
      await fs.writeFile(a.file, 'built');
    });
    const done = firstUseBuild(a.options);
    await building;
    vi.advanceTimersByTime(45_000);
    finish();
    await done;

    expect(a.lines).toEqual([
      'Building the slow thing with make: the tests need it; set THING_URL to use another one.',
      `This happens once per machine; the result is kept in ${a.options.cacheDir}.`,
      'still building the slow thing: 15 s',
      'still building the slow thing: 30 s',
      'still building the slow thing: 45 s',
      'Built the slow thing: done in 45 s.',
    ]);
  });

  it('a failed build says what to do, releases the lock, and a later call builds again', async () => {
    let fail = true;
    const a = artifact('flaky thing', async () => {
      if (fail) throw new Error('compiler exploded');
      await fs.mkdir(a.options.cacheDir, { recursive: true });
      await fs.writeFile(a.file, 'built');
    });
    await expect(firstUseBuild(a.options)).rejects.toThrow('could not build the flaky thing: compiler exploded; what to do: run `make thing` by hand, or set THING_URL');
    expect(a.lines).toContain('What to do: run `make thing` by hand, or set THING_URL');
    expect(a.lines.some((l) => /^Building the flaky thing failed after \d+ s: compiler exploded$/.test(l))).toBe(true);
    expect(existsSync(a.lockPath)).toBe(false);

    fail = false;
    await firstUseBuild(a.options);
    expect(a.builds()).toBe(2);
    expect(existsSync(a.file)).toBe(true);
  });

  it('a build that leaves nothing usable is a failure too', async () => {
    const a = artifact('empty thing', async () => undefined);
    await expect(firstUseBuild(a.options)).rejects.toThrow('the build finished but left nothing usable');
  });

  it('takes over the lock of a process killed mid-build once it is stale', async () => {
    const cacheDir = path.join(root, 'cache', 'thing');
    const countFile = path.join(root, 'builds');
    const goFile = path.join(root, 'go');
    await fs.writeFile(goFile, '');
    const holder = child('hang', cacheDir, countFile, goFile, 2000);
    await vi.waitFor(() => expect(countLines(countFile)).toHaveLength(1), { timeout: 30_000, interval: 50 });
    holder.proc.kill('SIGKILL');
    await holder.exited;
    expect(existsSync(`${cacheDir}.lock`)).toBe(true); // left behind: SIGKILL runs no exit handler

    const a = artifact();
    await firstUseBuild({ ...a.options, staleMs: 2000 });
    expect(a.builds()).toBe(1);
    expect(existsSync(a.file)).toBe(true);
    expect(a.lines).toContain('Built the thing: done in 0 s.');
  });

  it('off a terminal, reports the same facts as structured log lines through the logger', async () => {
    const logs: Record<string, unknown>[] = [];
    const logger = pino({ level: 'info', base: undefined }, { write: (line: string) => logs.push(JSON.parse(line) as Record<string, unknown>) });
    const good = artifact();
    await firstUseBuild({ ...good.options, tty: false, logger });
    const bad = artifact('broken thing', () => Promise.reject(new Error('no compiler')));
    await expect(firstUseBuild({ ...bad.options, tty: false, logger })).rejects.toThrow('no compiler');

    expect(good.lines).toEqual([]);
    expect(bad.lines).toEqual([]);
    expect(logs[0]).toMatchObject({
      level: 40,
      event: 'building',
      artifact: 'the thing',
      why: 'the tests need it; set THING_URL to use another one',
      cacheDir: good.options.cacheDir,
      lockPath: good.lockPath,
      msg: 'Building the thing with make: the tests need it; set THING_URL to use another one.',
    });
    expect(logs.find((l) => l.event === 'done')).toMatchObject({ level: 40, artifact: 'the thing', elapsedS: expect.any(Number) });
    expect(logs.find((l) => l.event === 'failed')).toMatchObject({
      level: 50,
      artifact: 'the broken thing',
      err: 'no compiler',
      howToFix: 'run `make thing` by hand, or set THING_URL',
    });
  });
});
