import { performance } from 'node:perf_hooks';
import v8 from 'node:v8';
import vm from 'node:vm';

type Gc = (options: { type: 'minor' | 'major'; execution: 'sync' | 'async' }) => void;

/**
 * Lets V8 give back, once the process is idle, the memory its busy time grew (the young
 * generation above all: 2 × 16 MiB with `--max-semi-space-size=16`, nearly empty at idle).
 *
 * V8 has a memory reducer for this, but it judges "idle" from the allocation rate measured at
 * the last garbage collection: an idle process collects nothing (it allocates a few KiB a second,
 * and the next scavenge is 16 MiB away), so the reducer keeps reading the rate of the busy
 * time before and waits, 8 s at a time, for good (`--trace-memory-reducer`: "high alloc" every
 * 8 s of a 60 s idle; bench/RESULTS.md, "Memory"). One young-generation collection at the start
 * of each idle period (about 1 ms) gives it a fresh, low rate: it then runs its own
 * memory-reducing collections, which shrink the young generation and the old one.
 *
 * Idle: the event loop was busy less than `maxUtilization` of the last `everyMs`. One nudge per
 * idle period; a busy interval starts a new one. The timer keeps no process alive.
 */
export function collectWhenIdle(
  opts: { everyMs?: number; maxUtilization?: number; gc?: Gc; utilization?: () => number } = {},
): { stop(): void } {
  const everyMs = opts.everyMs ?? 10_000;
  const maxUtilization = opts.maxUtilization ?? 0.02;
  const gc = opts.gc ?? exposedGc();
  const utilization = opts.utilization ?? loopUtilization();
  let nudged = false;
  const timer = setInterval(() => {
    if (utilization() > maxUtilization) {
      nudged = false;
      return;
    }
    if (nudged) return;
    nudged = true;
    gc({ type: 'minor', execution: 'sync' });
  }, everyMs);
  timer.unref();
  return { stop: () => clearInterval(timer) };
}

/** The share of the time since its previous call (or its making) the event loop was busy. */
function loopUtilization(): () => number {
  let last = performance.eventLoopUtilization();
  return () => {
    const now = performance.eventLoopUtilization();
    const busy = performance.eventLoopUtilization(now, last).utilization;
    last = now;
    return busy;
  };
}

/**
 * V8's `gc` function without `--expose-gc` on the command line (which would also give every
 * script a global `gc`): the flag is set for the one context made to fetch it, then unset.
 */
export function exposedGc(): Gc {
  const global = (globalThis as { gc?: Gc }).gc;
  if (typeof global === 'function') return global;
  v8.setFlagsFromString('--expose-gc');
  try {
    return vm.runInNewContext('gc') as Gc;
  } finally {
    v8.setFlagsFromString('--no-expose-gc');
  }
}
