import vm from 'node:vm';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { collectWhenIdle, exposedGc } from '../../config/idle-gc.ts';

/** config/idle-gc.ts: one young-generation collection at the start of each idle period, none while busy. */
describe('collectWhenIdle', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('collects once when the loop turns idle, not again until it has been busy, never while busy', () => {
    vi.useFakeTimers();
    const gc = vi.fn();
    // The event loop's busy share over each interval, as the timer reads it.
    const shares = [0.6, 0.3, 0.01, 0.0, 0.01, 0.5, 0.02, 0.001];
    const idle = collectWhenIdle({ everyMs: 1000, maxUtilization: 0.02, gc, utilization: () => shares.shift()! });
    const calls: number[] = [];
    for (let tick = 1; tick <= 8; tick++) {
      vi.advanceTimersByTime(1000);
      calls.push(gc.mock.calls.length);
    }
    // Busy, busy, idle (collects), idle, idle, busy, idle (collects), idle.
    expect(calls).toEqual([0, 0, 1, 1, 1, 1, 2, 2]);
    expect(gc).toHaveBeenCalledWith({ type: 'minor', execution: 'sync' });
    idle.stop();
    vi.advanceTimersByTime(10_000);
    expect(gc).toHaveBeenCalledTimes(2);
  });

  it("takes V8's gc without leaving it to scripts: no global gc, none in contexts made afterwards", () => {
    const hadGlobal = typeof (globalThis as { gc?: unknown }).gc === 'function';
    const gc = exposedGc();
    expect(() => gc({ type: 'minor', execution: 'sync' })).not.toThrow();
    if (!hadGlobal) expect(typeof (globalThis as { gc?: unknown }).gc).toBe('undefined');
    expect(vm.runInNewContext('typeof gc')).toBe('undefined');
  });
});
