import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from 'pino';
import type { LockOptions } from 'proper-lockfile';

/**
 * Things built once per machine on first use (the Temporal CLI with `go install`, Python venvs):
 * minutes of work that must neither run twice at once nor look like a hang.
 *
 * - One build at a time per machine: a lock per artifact beside it in the cache
 *   (proper-lockfile: a directory made atomically, its mtime refreshed while held, so the lock
 *   of a killed holder goes stale and is taken over). Callers in one process share one promise.
 *   The artifact is checked again once the lock is held: a waiter usually finds it built.
 * - Progress people can read: on a terminal, plain lines on stderr (what, why, where it is kept,
 *   the elapsed time every 15 s, what to do when it fails); elsewhere the same facts as
 *   structured log lines, since the service's logs are JSON lines: the start, wait and end at
 *   warn (a start minutes slower than usual, seen even where the level is warn, as in the
 *   tests' servers), the 15-second progress at info.
 */
export interface FirstUseBuild extends BuildOutput {
  /** What is built, as it reads in every line: "the Temporal CLI". */
  name: string;
  /** How, after the name in the first line only: "v1.5.1 with go install". */
  how?: string;
  /** Why it is needed, and the way around it. */
  why: string;
  /** Where the result is kept, for the lines; the lock is `<cacheDir>.lock` unless lockPath says otherwise. */
  cacheDir: string;
  lockPath?: string;
  isReady: () => Promise<boolean> | boolean;
  build: () => Promise<void>;
  /** What to do when the build fails: the command to run by hand, the alternatives. */
  howToFix: string;
  logger?: Logger;
  /** How old a lock's refreshed mtime may get before it counts as left by a dead process. */
  staleMs?: number;
}

/** Where the lines go; injectable so tests do not depend on a terminal or on wall time. */
export interface BuildOutput {
  /** Human lines (true) or log lines (false); by default whether stderr is a terminal. */
  tty?: boolean;
  /** Writes one human line; stderr by default. Also used off a terminal when there is no logger. */
  out?: (line: string) => void;
  clock?: Clock;
}

export interface Clock {
  now(): number;
  /** Calls fn every ms; returns the function that stops it. */
  every(ms: number, fn: () => void): () => void;
}

const systemClock: Clock = {
  now: () => Date.now(),
  every(ms, fn) {
    const timer = setInterval(fn, ms);
    timer.unref(); // progress lines never keep a process alive
    return () => clearInterval(timer);
  },
};

export const PROGRESS_EVERY_MS = 15_000;
// Long enough that a busy event loop does not lose the lock, short enough that a first start after a
// killed one waits half a minute, not minutes.
const STALE_MS = 30_000;
const POLL_MS = 500;

/** ~/.cache/mas (XDG_CACHE_HOME respected): kept outside the clone, so every clone on this machine shares it. */
export function masCacheDir(): string {
  return path.join(process.env.XDG_CACHE_HOME || path.join(os.homedir(), '.cache'), 'mas');
}

const inFlight = new Map<string, Promise<void>>();

/** Returns once the artifact is ready: already there, built by another process, or built here. */
export async function firstUseBuild(o: FirstUseBuild): Promise<void> {
  if (await o.isReady()) return;
  const lockPath = path.resolve(o.lockPath ?? `${o.cacheDir}.lock`);
  let running = inFlight.get(lockPath);
  if (!running) {
    running = buildUnderLock(o, lockPath).finally(() => inFlight.delete(lockPath));
    inFlight.set(lockPath, running);
  }
  return running;
}

async function buildUnderLock(o: FirstUseBuild, lockPath: string): Promise<void> {
  const clock = o.clock ?? systemClock;
  const human = o.tty ?? process.stderr.isTTY === true;
  const out = o.out ?? ((line: string) => process.stderr.write(`${line}\n`));
  const base = { artifact: o.name, cacheDir: o.cacheDir };
  const say = (level: 'info' | 'warn' | 'error', fields: Record<string, unknown>, line: string) => {
    if (human || !o.logger) out(line);
    else o.logger[level]({ ...base, ...fields }, line);
  };
  const since = (t0: number) => Math.round((clock.now() - t0) / 1000);
  const every = (event: string, line: (elapsedS: number) => string) => {
    const t0 = clock.now();
    return clock.every(PROGRESS_EVERY_MS, () => say('info', { event, elapsedS: since(t0) }, line(since(t0))));
  };

  await fs.mkdir(path.dirname(lockPath), { recursive: true });
  const lockOptions: LockOptions = {
    realpath: false, // the lock directory is the only file involved; nothing needs to exist first
    lockfilePath: lockPath,
    stale: o.staleMs ?? STALE_MS,
    // Lost only if this process stalled past the stale time or the lock was removed by hand; the
    // default would throw from a timer and end the process.
    onCompromised: (err) => say('warn', { event: 'lock-lost', lockPath, err: err.message }, `lost the lock on ${o.name} (${err.message}); another process may be building it too`),
  };
  let release = await tryLock(lockPath, lockOptions);
  let waitedS: number | undefined;
  if (!release) {
    const t0 = clock.now();
    say('warn', { event: 'waiting', lockPath }, `Waiting for another process that is building ${o.name} (lock ${lockPath}) …`);
    const stop = every('waiting', (s) => `still waiting for ${o.name}: ${s} s`);
    try {
      while (!release) {
        await sleep(POLL_MS);
        release = await tryLock(lockPath, lockOptions);
      }
    } finally {
      stop();
    }
    waitedS = since(t0); // the holder has finished, or died and its lock went stale: the check below tells which
  }

  try {
    // Another process may have finished it between the first check and the lock.
    if (await o.isReady()) {
      if (waitedS !== undefined) say('warn', { event: 'ready', waitedS }, `${capitalize(o.name)} is ready: another process built it (waited ${waitedS} s).`);
      return;
    }
    const t0 = clock.now();
    say('warn', { event: 'building', why: o.why, lockPath }, `Building ${o.name}${o.how ? ` ${o.how}` : ''}: ${o.why}.`);
    say('warn', { event: 'building' }, `This happens once per machine; the result is kept in ${o.cacheDir}.`);
    const stop = every('progress', (s) => `still building ${o.name}: ${s} s`);
    try {
      await o.build();
      if (!(await o.isReady())) throw new Error('the build finished but left nothing usable');
    } catch (err) {
      const message = (err as Error).message;
      say('error', { event: 'failed', elapsedS: since(t0), err: message, howToFix: o.howToFix }, `Building ${o.name} failed after ${since(t0)} s: ${message}`);
      say('error', { event: 'failed', howToFix: o.howToFix }, `What to do: ${o.howToFix}`);
      throw new Error(`could not build ${o.name}: ${message}; what to do: ${o.howToFix}`, { cause: err });
    } finally {
      stop();
    }
    say('warn', { event: 'done', elapsedS: since(t0) }, `Built ${o.name}: done in ${since(t0)} s.`);
  } finally {
    await release().catch(() => undefined); // already released when the lock was lost
  }
}

/** The lock, or undefined while another process holds it; any other failure (permissions…) is thrown. */
async function tryLock(lockPath: string, options: LockOptions): Promise<(() => Promise<void>) | undefined> {
  // Loaded only when a build is needed: proper-lockfile installs signal-exit's handlers for
  // SIGINT, SIGTERM… when it loads, which re-raise the signal past the process's own 'exit'
  // handlers (the test setup's, which stop the servers it started).
  const { default: lockfile } = await import('proper-lockfile');
  try {
    return await lockfile.lock(lockPath, options);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ELOCKED') return undefined;
    throw err;
  }
}

function capitalize(s: string): string {
  return s.charAt(0).toUpperCase() + s.slice(1);
}

/** The executable `command` on PATH, or undefined: tools are found on PATH before any cache. */
export async function which(command: string): Promise<string | undefined> {
  for (const dir of (process.env.PATH ?? '').split(path.delimiter)) {
    if (!dir) continue;
    const candidate = path.join(dir, command);
    try {
      await fs.access(candidate, fs.constants.X_OK);
      return candidate;
    } catch {
      // not here
    }
  }
  return undefined;
}
