import fs from 'node:fs';
import fsp from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { freePort, machine, processTree, start } from './support.ts';

/**
 * npm run bench:memory — what a whole `npm start` takes when idle, part by part: the README's
 * own command on a fresh DATA_DIR (embedded PostgreSQL and Temporal dev server, the worker
 * process), IDLE seconds (60) after the worker reports running. For each process: RSS (what
 * `ps` shows; it counts shared pages, the node binary's included, in every process that maps
 * them) and PSS (each shared page divided among the processes sharing it: the parts add up).
 * PostgreSQL is started detached (pg_ctl), so its processes are found by their data folder.
 */
const IDLE = Number(process.env.IDLE ?? 60);

interface Part {
  name: string;
  pids: number[];
}

function readKiB(pid: number, file: string, field: string): number {
  try {
    return Number(new RegExp(`^${field}:\\s+(\\d+)`, 'm').exec(fs.readFileSync(`/proc/${pid}/${file}`, 'utf8'))?.[1] ?? 0);
  } catch {
    return 0;
  }
}
const cmdline = (pid: number) => {
  try {
    return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').replace(/\0/g, ' ').trim();
  } catch {
    return '';
  }
};

async function main() {
  const dataDir = await fsp.mkdtemp(path.join(os.tmpdir(), 'mas-bench-memory-'));
  const port = await freePort();
  const npm = start('npm', ['start'], { DATA_DIR: dataDir, PORT: String(port), HOST: '127.0.0.1', LOG_LEVEL: 'warn' });
  try {
    await npm.waitFor(/listening on/);
    await npm.waitFor(/worker running/);
    await new Promise((r) => setTimeout(r, IDLE * 1000));
    const tree = processTree(npm.child.pid!);
    const postgres = fs
      .readdirSync('/proc')
      .filter((e) => /^\d+$/.test(e))
      .map(Number)
      .filter((pid) => {
        // The postmaster names the data folder; its children are its backends and helpers.
        const cmd = cmdline(pid);
        return cmd.includes(dataDir) && /postgres/.test(cmd);
      });
    const postgresAll = postgres.flatMap((pid) => processTree(pid));
    const parts: Part[] = [
      { name: 'npm (the command itself)', pids: tree.filter((pid) => /^npm|npm-cli|\/npm /.test(cmdline(pid))) },
      { name: 'API process (dist/main.js)', pids: tree.filter((pid) => /main\.(js|ts)/.test(cmdline(pid))) },
      { name: 'worker process (dist/worker.js)', pids: tree.filter((pid) => /worker\.(js|ts)/.test(cmdline(pid))) },
      { name: 'Temporal dev server', pids: tree.filter((pid) => /temporal.*start-dev/.test(cmdline(pid))) },
      { name: `PostgreSQL (${new Set(postgresAll).size} processes)`, pids: [...new Set(postgresAll)] },
    ];
    const rows = parts.map((p) => ({
      name: p.name,
      rss: p.pids.reduce((s, pid) => s + readKiB(pid, 'status', 'VmRSS'), 0) / 1024,
      pss: p.pids.reduce((s, pid) => s + readKiB(pid, 'smaps_rollup', 'Pss'), 0) / 1024,
    }));
    const total = { rss: rows.reduce((s, r) => s + r.rss, 0), pss: rows.reduce((s, r) => s + r.pss, 0) };
    const lines = [
      `Machine: ${machine()}`,
      `Date: ${new Date().toISOString()}; \`npm start\` on a fresh DATA_DIR, ${IDLE} s idle after the worker reported running.`,
      '',
      '| part | RSS MiB | PSS MiB |',
      '|---|---|---|',
      ...rows.map((r) => `| ${r.name} | ${r.rss.toFixed(0)} | ${r.pss.toFixed(0)} |`),
      `| **total** | ${total.rss.toFixed(0)} | **${total.pss.toFixed(0)}** |`,
    ];
    process.stdout.write(`${lines.join('\n')}\n`);
  } finally {
    await npm.stop();
    await new Promise((r) => setTimeout(r, 2000));
    await fsp.rm(dataDir, { recursive: true, force: true }).catch(() => undefined);
  }
}

await main();
