import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { freePort, machine, percentile, start, type Proc } from './support.ts';

/**
 * npm run bench:generations — N media jobs on the `local` provider with no artificial delay,
 * end to end through the API, the embedded Temporal dev server and the in-process worker.
 * Jobs run in lanes (5 per key, the per-key limit, over KEYS keys); each lane submits with
 * `Prefer: wait=60` and submits again when its job has ended. Submit-to-succeeded times come
 * from the database (`completed_at - created_at`), so they do not include the lanes' waits.
 *   JOBS (200), KEYS (10)
 */
const JOBS = Number(process.env.JOBS ?? 200);
const KEYS = Number(process.env.KEYS ?? 10);

async function main() {
  const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'mas-bench-gen-'));
  const procs: Proc[] = [];
  try {
    const port = await freePort();
    const env = { DATA_DIR: dataDir, PORT: String(port), HOST: '127.0.0.1', RATE_LIMIT_PER_MINUTE: '1000000000', LOG_LEVEL: 'warn', DEMO_COINS: '0' };
    const server = start(process.execPath, [...(process.env.SERVER_NODE_FLAGS ?? '').split(' ').filter(Boolean), '--import', 'tsx', 'main.ts'], env);
    procs.push(server);
    await server.waitFor(/listening on/);
    const cli = async (...args: string[]) => {
      const p = start('npm', ['run', '--silent', 'mas', '--', ...args, '--json'], env);
      return JSON.parse((await p.waitFor(/\{.*\}/))[0]) as Record<string, unknown>;
    };
    await cli('account', 'create', '--email', 'bench@example.com');
    await cli('wallet', 'topup', '--account', 'bench@example.com', '--coins', '100000000');
    const keys: string[] = [];
    for (let i = 0; i < KEYS; i++) keys.push((await cli('key', 'create', '--account', 'bench@example.com')).key as string);

    let next = 0;
    const ids: string[] = [];
    const started = Date.now();
    const lane = async (key: string) => {
      while (next < JOBS) {
        next++;
        const res = await fetch(`http://127.0.0.1:${port}/api/v1/generations`, {
          method: 'POST',
          headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', prefer: 'wait=60' },
          body: JSON.stringify({ model: 'mas/image-demo', prompt: `bench ${next}`, settings: { size: 128 } }),
        });
        const job = (await res.json()) as { id?: string; status?: string };
        if (!job.id) throw new Error(`submit failed: ${res.status} ${JSON.stringify(job)}`);
        ids.push(job.id);
      }
    };
    await Promise.all(keys.flatMap((key) => Array.from({ length: 5 }, () => lane(key))));

    const state = JSON.parse(await fs.readFile(path.join(dataDir, 'postgres.json'), 'utf8')) as { password: string };
    const pgPort = Number((await fs.readFile(path.join(dataDir, 'postgres', 'postmaster.pid'), 'utf8')).split('\n')[3]);
    const db = new pg.Client({ host: '127.0.0.1', port: pgPort, user: 'postgres', password: state.password, database: 'mas' });
    await db.connect();
    for (;;) {
      const { rows } = await db.query(`select count(*)::int as n from generations where status in ('queued', 'running')`);
      if (rows[0].n === 0) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    const { rows } = await db.query(
      `select status, extract(epoch from completed_at - created_at) * 1000 as ms, extract(epoch from completed_at) * 1000 as done_at from generations`,
    );
    await db.end();
    const ok = rows.filter((r) => r.status === 'succeeded');
    const ms = ok.map((r) => Number(r.ms));
    const last = Math.max(...ok.map((r) => Number(r.done_at)));
    const seconds = (last - started) / 1000;
    process.stdout.write(
      [
        `Machine: ${machine()}`,
        `Date: ${new Date().toISOString()}; ${JOBS} jobs, ${KEYS} keys × 5 lanes, local provider, no delay, embedded PostgreSQL and Temporal dev server`,
        '',
        '| jobs | succeeded | jobs/s | submit→succeeded p50 ms | p99 ms | peak RSS of the server MiB |',
        '|---|---|---|---|---|---|',
        `| ${rows.length} | ${ok.length} | ${(ok.length / seconds).toFixed(1)} | ${percentile(ms, 50).toFixed(0)} | ${percentile(ms, 99).toFixed(0)} | ${server.peakRssMiB().toFixed(0)} |`,
        '',
      ].join('\n'),
    );
  } finally {
    for (const p of procs.reverse()) await p.stop();
    await fs.rm(dataDir, { recursive: true, force: true }).catch(() => undefined);
  }
}

await main();
