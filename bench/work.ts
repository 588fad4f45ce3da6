import fs from 'node:fs/promises';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import autocannon from 'autocannon';
import pg from 'pg';
import { machine, percentile, startChatService, type Proc } from './support.ts';

/**
 * npm run bench:work — the work the database does per chat, counted rather than timed (a shared
 * machine moves wall-clock numbers by more than most regressions): the service as bench:profile
 * runs it (dist/, real billing, one API key, the mock upstream), SAMPLES chats one at a time with
 * every statement logged (statements per chat and their mean time), then DURATION seconds at
 * c=32. For each phase, per chat: commits, calls and mean time of each SQL function
 * (track_functions), rows fetched per table and index, the API process's CPU; during c=32 the
 * backends' wait events are sampled every 50 ms (pg_stat_activity) with the locks not granted.
 * PATCH_SQL=<file> runs that SQL once the service is up (a changed money function, say), for an
 * A/B of a database change before its migration is written.
 */
const SAMPLES = Number(process.env.SAMPLES ?? 1000);
const DURATION = Number(process.env.DURATION ?? 10);
const PATCH_SQL = process.env.PATCH_SQL;
const body = JSON.stringify({ model: 'bench/mock', messages: [{ role: 'user', content: 'Hello, ledger.' }], max_tokens: 16 });

interface Snapshot {
  commits: number;
  fns: Map<string, { calls: number; total: number; self: number }>;
  tables: Map<string, { seqTupRead: number; idxTupFetch: number; inserted: number; updated: number; hot: number }>;
  indexes: Map<string, { scans: number; tupRead: number }>;
}

async function main() {
  const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'mas-work-'));
  const procs: Proc[] = [];
  try {
    const { port, ours, key } = await startChatService(dataDir, procs);
    const state = JSON.parse(await fs.readFile(path.join(dataDir, 'postgres.json'), 'utf8')) as { password: string };
    const pgPort = Number((await fs.readFile(path.join(dataDir, 'postgres', 'postmaster.pid'), 'utf8')).split('\n')[3]);
    const dbUrl = `postgres://postgres:${encodeURIComponent(state.password)}@127.0.0.1:${pgPort}/mas`;
    const db = new pg.Client({ connectionString: dbUrl, application_name: 'bench-work' });
    await db.connect();
    const setting = async (name: string, value: string | null) => {
      await db.query(value === null ? `alter system reset ${name}` : `alter system set ${name} = '${value}'`);
      await db.query('select pg_reload_conf()');
    };
    await setting('track_functions', 'all');
    if (PATCH_SQL) await db.query(await fs.readFile(PATCH_SQL, 'utf8'));

    const url = `http://127.0.0.1:${port}/api/v1/chat/completions`;
    const headers = { 'content-type': 'application/json', authorization: `Bearer ${key}` };
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    const one = () =>
      new Promise<number>((resolve, reject) => {
        const began = process.hrtime.bigint();
        http
          .request(url, { method: 'POST', agent, headers }, (res) => {
            res.resume();
            res.on('end', () => (res.statusCode === 200 ? resolve(Number(process.hrtime.bigint() - began) / 1e6) : reject(new Error(`status ${res.statusCode}`))));
          })
          .on('error', reject)
          .end(body);
      });
    const snapshot = async (): Promise<Snapshot> => {
      // One client answers one query at a time.
      const dbs = await db.query<{ commits: string }>(`select xact_commit::text as commits from pg_stat_database where datname = current_database()`);
      const fns = await db.query<{ name: string; calls: string; total: number; self: number }>(
        `select funcname as name, calls::text, total_time as total, self_time as self from pg_stat_user_functions`,
      );
      const tables = await db.query<{ name: string; seq: string; fetch: string; ins: string; upd: string; hot: string }>(
        `select relname as name, seq_tup_read::text as seq, coalesce(idx_tup_fetch, 0)::text as fetch, n_tup_ins::text as ins, n_tup_upd::text as upd, n_tup_hot_upd::text as hot from pg_stat_user_tables`,
      );
      const indexes = await db.query<{ name: string; scans: string; read: string }>(`select indexrelname as name, idx_scan::text as scans, idx_tup_read::text as read from pg_stat_user_indexes`);
      return {
        commits: Number(dbs.rows[0]!.commits),
        fns: new Map(fns.rows.map((r) => [r.name, { calls: Number(r.calls), total: r.total, self: r.self }])),
        tables: new Map(tables.rows.map((r) => [r.name, { seqTupRead: Number(r.seq), idxTupFetch: Number(r.fetch), inserted: Number(r.ins), updated: Number(r.upd), hot: Number(r.hot) }])),
        indexes: new Map(indexes.rows.map((r) => [r.name, { scans: Number(r.scans), tupRead: Number(r.read) }])),
      };
    };
    // A backend reports its statistics at most once a second, and an idle one within 10 s
    // (PostgreSQL 15 and later): wait that long before each count.
    const settled = async () => {
      await new Promise((r) => setTimeout(r, 11_000));
      return snapshot();
    };
    const lines: string[] = [`Machine: ${machine()}`, `Date: ${new Date().toISOString()}${PATCH_SQL ? `; PATCH_SQL=${PATCH_SQL}` : ''}`];
    const perChat = (a: Snapshot, b: Snapshot, n: number, label: string, apiCpuMs: number) => {
      lines.push('', `### ${label}: per chat (${n} chats)`, '', `Commits ${((b.commits - a.commits) / n).toFixed(2)}; API process CPU ${(apiCpuMs / n).toFixed(3)} ms.`, '');
      lines.push('| SQL function | calls per chat | mean total ms | mean self ms |', '|---|---|---|---|');
      for (const [name, f] of b.fns) {
        const calls = f.calls - (a.fns.get(name)?.calls ?? 0);
        if (calls === 0) continue;
        lines.push(`| ${name} | ${(calls / n).toFixed(3)} | ${((f.total - (a.fns.get(name)?.total ?? 0)) / calls).toFixed(3)} | ${((f.self - (a.fns.get(name)?.self ?? 0)) / calls).toFixed(3)} |`);
      }
      lines.push('', '| table | rows read by scans | rows fetched by index | inserted | updated (HOT) |', '|---|---|---|---|---|');
      for (const [name, t] of b.tables) {
        const o = a.tables.get(name) ?? { seqTupRead: 0, idxTupFetch: 0, inserted: 0, updated: 0, hot: 0 };
        const d = { seq: t.seqTupRead - o.seqTupRead, fetch: t.idxTupFetch - o.idxTupFetch, ins: t.inserted - o.inserted, upd: t.updated - o.updated, hot: t.hot - o.hot };
        if (!d.seq && !d.fetch && !d.ins && !d.upd) continue;
        lines.push(`| ${name} | ${(d.seq / n).toFixed(1)} | ${(d.fetch / n).toFixed(1)} | ${(d.ins / n).toFixed(2)} | ${(d.upd / n).toFixed(2)} (${(d.hot / n).toFixed(2)}) |`);
      }
      lines.push('', '| index | scans per chat | entries read per chat |', '|---|---|---|');
      for (const [name, x] of b.indexes) {
        const o = a.indexes.get(name) ?? { scans: 0, tupRead: 0 };
        if (x.scans === o.scans) continue;
        lines.push(`| ${name} | ${((x.scans - o.scans) / n).toFixed(2)} | ${((x.tupRead - o.tupRead) / n).toFixed(1)} |`);
      }
    };

    for (let i = 0; i < 100; i++) await one(); // warm-up: not counted

    // One at a time, every statement logged with its duration.
    const logFile = path.join(dataDir, 'postgres', 'server.log');
    const logFrom = (await fs.stat(logFile)).size;
    const s0 = await settled();
    await setting('log_min_duration_statement', '0');
    const ms: number[] = [];
    const cpu0 = await cpuMs(ours.child.pid!);
    for (let i = 0; i < SAMPLES; i++) ms.push(await one());
    const cpuSequential = (await cpuMs(ours.child.pid!)) - cpu0;
    await setting('log_min_duration_statement', null);
    const s1 = await settled();
    const log = (await fs.readFile(logFile)).subarray(logFrom).toString('utf8');
    const statements = new Map<string, { n: number; ms: number }>();
    for (const m of log.matchAll(/duration: ([\d.]+) ms {2}(?:statement|execute [^:]*): (.*)/g)) {
      const text = m[2]!.replace(/\s+/g, ' ').slice(0, 80);
      if (/pg_stat|alter system|pg_reload_conf|current_database/.test(text)) continue; // this script's own
      const s = statements.get(text) ?? { n: 0, ms: 0 };
      s.n++;
      s.ms += Number(m[1]);
      statements.set(text, s);
    }
    const total = [...statements.values()].reduce((sum, s) => sum + s.n, 0);
    lines.push('', `### ${SAMPLES} chats one at a time: p50 ${percentile(ms, 50).toFixed(2)} ms, p99 ${percentile(ms, 99).toFixed(2)} ms`, '');
    lines.push(`Statements per chat: ${(total / SAMPLES).toFixed(2)}`, '', '| statement | per chat | mean ms |', '|---|---|---|');
    for (const [text, s] of [...statements].sort((a, b) => b[1].n - a[1].n).slice(0, 12)) {
      lines.push(`| \`${text.replace(/\|/g, '\\|')}\` | ${(s.n / SAMPLES).toFixed(2)} | ${(s.ms / s.n).toFixed(3)} |`);
    }
    perChat(s0, s1, SAMPLES, 'one at a time', cpuSequential);

    // c=32, the backends sampled every 50 ms.
    const waits = new Map<string, number>();
    let samples = 0;
    let notGranted = 0;
    let loading = true;
    const sampler = (async () => {
      const probe = new pg.Client({ connectionString: dbUrl, application_name: 'bench-work-probe' });
      await probe.connect();
      while (loading) {
        const { rows } = await probe.query<{ state: string; wait: string; query: string }>(
          `select state, coalesce(wait_event_type || ':' || wait_event, 'on CPU') as wait, left(regexp_replace(query, '\\s+', ' ', 'g'), 50) as query
             from pg_stat_activity where datname = current_database() and backend_type = 'client backend' and application_name not like 'bench-work%' and state = 'active'`,
        );
        for (const r of rows) waits.set(`${r.wait} | \`${r.query}\``, (waits.get(`${r.wait} | \`${r.query}\``) ?? 0) + 1);
        notGranted += Number((await probe.query<{ n: string }>('select count(*)::text as n from pg_locks where not granted')).rows[0]!.n);
        samples++;
        await new Promise((r) => setTimeout(r, 50));
      }
      await probe.end();
    })();
    const s2 = s1;
    const cpu2 = await cpuMs(ours.child.pid!);
    const loaded = await autocannon({ url, method: 'POST', headers, body, connections: 32, duration: DURATION });
    const cpuLoaded = (await cpuMs(ours.child.pid!)) - cpu2;
    loading = false;
    await sampler;
    const s3 = await settled();
    lines.push('', `### c=32 for ${DURATION} s: ${Math.round(loaded.requests.average)} req/s, p50 ${loaded.latency.p50} ms, ${loaded.non2xx} not 2xx`);
    perChat(s2, s3, loaded.requests.total, 'c=32', cpuLoaded);
    lines.push('', `Backends busy per 50 ms sample (${samples} samples), by wait event and statement; locks not granted: ${(notGranted / samples).toFixed(2)} per sample.`, '');
    lines.push('| busy backends | wait | statement |', '|---|---|---|');
    for (const [k, n] of [...waits].sort((a, b) => b[1] - a[1]).slice(0, 12)) lines.push(`| ${(n / samples).toFixed(2)} | ${k} |`);
    await db.end();
    process.stdout.write(`${lines.join('\n')}\n`);
  } finally {
    for (const p of procs.reverse()) await p.stop();
    await fs.rm(dataDir, { recursive: true, force: true }).catch(() => undefined);
  }
}

/** User + system CPU time of a process so far, in ms (/proc/<pid>/stat, clock ticks of 10 ms). */
async function cpuMs(pid: number): Promise<number> {
  const stat = await fs.readFile(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) * 10;
}

await main();
