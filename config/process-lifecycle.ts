import { readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import type { Logger } from 'pino';

/**
 * How an entry point (main.ts, worker.ts) stops: one graceful stop, run once, whatever asks
 * for it, then exit.
 *
 * - SIGTERM, SIGINT, SIGHUP (a closed terminal): graceful stop, exit 0. A further signal at
 *   least a second later (a second Ctrl-C) exits at once with code 1.
 * - Started by npm (`npm start`, `npm run worker`): npm runs `sh -c "node …"`, and on Debian
 *   that shell (dash) stays between npm and node. Measured with npm 11 and dash 0.5.12, when
 *   npm's own PID is signalled:
 *     SIGTERM: npm passes it to the shell, the shell dies, node is left running, re-parented;
 *     SIGINT:  npm passes it to the shell, which catches it and waits for node: nothing stops;
 *     SIGHUP:  npm dies, the shell and node run on.
 *   So the process watches the chain that started it (an unref'd timer, two small /proc reads
 *   every half second): its parent gone, npm gone, or the shell in between woken while it
 *   only waits for us (it was signalled) all run the same graceful stop. Started directly
 *   with `node`, nothing is watched: a process whose parent exits is left alone.
 * - Started by another process of the service with an IPC channel (`npm start`'s worker): the
 *   channel closing (that process ended, even by SIGKILL) runs the graceful stop.
 * - An uncaught exception: logged (fatal), graceful stop, exit 1; the process does not go on
 *   in an unknown state. Before the stop is set (during start-up), there is nothing to stop
 *   gracefully: exit 1 at once.
 * - An unhandled promise rejection: logged (error), the process keeps serving.
 * - The graceful stop is bounded by `stopTimeoutMs`; past it the process exits with code 1.
 */
export interface ProcessLifecycle {
  /** The graceful stop. A stop asked for before this (a signal during start-up) runs now. */
  setStop(stop: () => Promise<void>): void;
  /** Runs the graceful stop once, then exits with `code`. */
  shutdown(reason: string, code?: number): void;
}

export interface LifecycleOptions {
  /** Longest the graceful stop may take; then the process exits with code 1. */
  stopTimeoutMs?: number;
  /** How often the chain that started this process is checked. */
  pollMs?: number;
}

const SIGNALS = ['SIGTERM', 'SIGINT', 'SIGHUP'] as const;

export function manageProcessLifecycle(logger: Logger, opts: LifecycleOptions = {}): ProcessLifecycle {
  const stopTimeoutMs = opts.stopTimeoutMs ?? 60_000;
  let stop: (() => Promise<void>) | undefined;
  let requested: { reason: string; code: number; at: number } | undefined;
  let running = false;

  const exit = (code: number): never => {
    logger.flush();
    process.exit(code);
  };

  const run = () => {
    if (!requested || !stop || running) return;
    running = true;
    stop().then(
      () => exit(requested!.code),
      (err: unknown) => {
        logger.error({ err }, 'graceful stop failed');
        exit(1);
      },
    );
  };

  const shutdown = (reason: string, code = 0) => {
    if (requested) {
      if (code !== 0) requested.code = code;
      return;
    }
    requested = { reason, code, at: performance.now() };
    logger.info({ reason }, 'stopping');
    if (!stop && code !== 0) exit(code);
    setTimeout(() => {
      logger.error({ reason, timeoutMs: stopTimeoutMs }, 'the graceful stop did not finish in time: exiting');
      exit(1);
    }, stopTimeoutMs).unref();
    run();
  };

  for (const signal of SIGNALS) {
    process.on(signal, () => {
      // A terminal's Ctrl-C reaches node and npm (which passes it on) at once: only a signal
      // well after the first is a second request, to stop now.
      if (requested && performance.now() - requested.at >= 1000) {
        logger.warn({ signal }, 'second signal while stopping: exiting now');
        exit(1);
      }
      shutdown(signal);
    });
  }

  process.on('uncaughtException', (err, origin) => {
    logger.fatal({ err, origin }, 'uncaught exception: stopping');
    shutdown('uncaught exception', 1);
  });
  process.on('unhandledRejection', (reason) => {
    logger.error({ err: reason }, 'unhandled promise rejection (still serving)');
  });

  watchLauncher(logger, opts.pollMs ?? 500, (reason) => shutdown(reason));
  // Started by another process of this service with an IPC channel (`npm start`'s worker,
  // config/worker-process.ts): the channel closes when that process is gone, however it ended.
  // It may have closed already, while this process was still loading its modules.
  if (typeof process.send === 'function') {
    const gone = () => shutdown('the process that started this one is gone');
    if (!process.connected) gone();
    else {
      process.channel?.unref();
      process.once('disconnect', gone);
    }
  }

  return {
    setStop(fn) {
      stop = fn;
      run();
    },
    shutdown,
  };
}

interface ProcStat {
  ppid: number;
}

function readStat(pid: number): ProcStat | undefined {
  try {
    const text = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // pid (comm) state ppid …; comm may hold spaces and parentheses.
    const fields = text.slice(text.lastIndexOf(')') + 2).split(' ');
    if (fields[0] === 'Z' || fields[0] === 'X') return undefined;
    return { ppid: Number(fields[1]) };
  } catch {
    return undefined;
  }
}

/** How many times the process went to sleep: a shell blocked in wait() only wakes for a signal. */
function wakeups(pid: number): number | undefined {
  try {
    const m = /^voluntary_ctxt_switches:\s*(\d+)$/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) : undefined;
  } catch {
    return undefined;
  }
}

function isShellRunningScript(pid: number): boolean {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0')[1] === '-c';
  } catch {
    return false;
  }
}

/** Calls `onGone` once when the package manager that started this process is gone or signalled it. */
function watchLauncher(logger: Logger, pollMs: number, onGone: (reason: string) => void): void {
  // Set by npm (and yarn, pnpm) for the scripts they run.
  if (process.env.npm_lifecycle_event === undefined) return;
  const parent = process.ppid;
  if (parent <= 1) return;

  // Linux: npm → `sh -c script` → node. Elsewhere (no /proc) only the parent is watched; macOS's
  // sh (bash) execs a lone command, so there node is npm's own child.
  let shell: { pid: number; npm: number; wakeups: number } | undefined;
  const parentStat = readStat(parent);
  const parentWakeups = wakeups(parent);
  if (parentStat && parentWakeups !== undefined && isShellRunningScript(parent)) {
    shell = { pid: parent, npm: parentStat.ppid, wakeups: parentWakeups };
  }
  logger.debug({ parent, shell: shell?.pid, npm: shell?.npm }, 'watching the process that started this one');

  let last = performance.now();
  let quietUntil = 0;
  let fired = false;
  const fire = (reason: string) => {
    if (fired) return;
    fired = true;
    clearInterval(timer);
    onGone(reason);
  };
  const timer = setInterval(() => {
    const now = performance.now();
    const late = now - last > pollMs + 1000;
    last = now;
    if (process.ppid !== parent) return fire(`the process that started this one (pid ${parent}) is gone`);
    if (!shell) return;
    const stat = readStat(shell.pid);
    if (!stat || stat.ppid !== shell.npm) return fire(`npm (pid ${shell.npm}) is gone`);
    const count = wakeups(shell.pid);
    if (count === undefined || count === shell.wakeups) return;
    shell.wakeups = count;
    // This process was stopped and continued (Ctrl-Z then fg, a paused container): the shell
    // woke for that (SIGCHLD), not for a signal meant for us. Let it settle.
    if (late) quietUntil = now + 2000;
    if (now < quietUntil) return;
    fire(`the shell between npm and this process (pid ${shell.pid}) was signalled (npm passes SIGINT and SIGTERM to it, not to node)`);
  }, pollMs);
  timer.unref();
}
