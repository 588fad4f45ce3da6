/**
 * Preloaded into a server process a test starts (`node --import tsx --import <this file>
 * main.ts`): measures how long that process's event loop is held without a break, in a way the
 * machine's load does not change.
 *
 * A 1 ms interval ticks on the loop. A gap between two ticks is the loop held by the process's
 * own work only as far as the process used the CPU meanwhile: on a loaded machine it may also
 * wait to be scheduled, which no code of ours causes or can prevent. So a block counts as the
 * smaller of the gap's wall time and the CPU time the process used in it (all its threads, so
 * that the main thread waiting on the garbage collector's helpers counts too). The same with
 * the main thread's CPU time alone (process.threadCpuUsage), and the largest wall gap, are
 * reported for the record.
 *
 * On SIGUSR2 it writes one line to stderr, `loop-blocks #<n> <json>` (n counts the reports from
 * 1), with those figures since the last report, then starts over. A signal is handled on the
 * loop, after any block in progress: the report covers everything before it.
 */
let longestBlockMs = 0;
let longestMainThreadMs = 0;
let longestGapMs = 0;
let ticks = 0;
let reports = 0;
let last = performance.now();
let lastCpu = process.cpuUsage();
let lastThreadCpu = process.threadCpuUsage();

const ms = (cpu: NodeJS.CpuUsage) => (cpu.user + cpu.system) / 1000;
const round = (x: number) => Math.round(x * 10) / 10;

setInterval(() => {
  const now = performance.now();
  const gap = now - last;
  const cpu = process.cpuUsage(lastCpu);
  const threadCpu = process.threadCpuUsage(lastThreadCpu);
  ticks++;
  longestGapMs = Math.max(longestGapMs, gap);
  longestBlockMs = Math.max(longestBlockMs, Math.min(gap, ms(cpu)));
  longestMainThreadMs = Math.max(longestMainThreadMs, Math.min(gap, ms(threadCpu)));
  last = now;
  lastCpu = process.cpuUsage();
  lastThreadCpu = process.threadCpuUsage();
}, 1).unref();

process.on('SIGUSR2', () => {
  const report = { longestBlockMs: round(longestBlockMs), longestMainThreadMs: round(longestMainThreadMs), longestGapMs: round(longestGapMs), ticks };
  process.stderr.write(`loop-blocks #${++reports} ${JSON.stringify(report)}\n`);
  longestBlockMs = 0;
  longestMainThreadMs = 0;
  longestGapMs = 0;
  ticks = 0;
});

export {};
