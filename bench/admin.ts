import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import type { EntityManager } from '@mikro-orm/postgresql';
import { startEmbeddedPostgres } from '../adapters/embedded/postgres.ts';
import { createLogger } from '../config/logger.ts';
import { jobDurations, jobDurationsInput, jobsByStatus, jobsByStatusInput } from '../core/admin/analytics/jobs.ts';
import { addDays } from '../core/admin/analytics/days.ts';
import { refreshAnalytics } from '../core/admin/analytics/refresh.ts';
import { topAccounts, topAccountsInput, topModels, topModelsInput } from '../core/admin/analytics/top.ts';
import { usageInput, usagePerDay } from '../core/admin/analytics/usage.ts';
import { migrate, openOrm } from '../core/orm.ts';
import { machine, percentile, stealMeter } from './support.ts';

/**
 * npm run bench:admin — the admin analytics on a ledger of about a million entries.
 *
 * A fresh embedded PostgreSQL (its own temporary DATA_DIR, default settings), migrated, then
 * seeded in SQL (generate_series, a fixed seed): ACCOUNTS accounts with 3 keys each, 12 text
 * and 8 media models, REQUESTS requests over DAYS days up to now, in time order as a live
 * ledger is written. Most are chats (reserve, capture, release of the rest: 5 entries; 3%
 * fail and are released whole); JOB_SHARE are media jobs (85% succeed, 10% fail with one of
 * four codes, 5% are canceled), 1% of succeeded jobs are refunded later; top-ups and
 * adjustments. Accounts and models are skewed (a few big spenders and popular models), as in
 * life. Then the refresh runs once over everything (the first run of a new install), once more
 * as the schedule runs it every minute (today and yesterday), and each query RUNS times after
 * WARMUP runs; p50 and p95 are of the in-process call (SQL, mapping and input parsing).
 *   ACCOUNTS (1000), REQUESTS (222000), JOB_SHARE (0.27), DAYS (90), RUNS (50), WARMUP (5), KEEP (keep the data dir)
 */
const ACCOUNTS = Number(process.env.ACCOUNTS ?? 1000);
const REQUESTS = Number(process.env.REQUESTS ?? 222_000);
const JOB_SHARE = Number(process.env.JOB_SHARE ?? 0.27);
const DAYS = Number(process.env.DAYS ?? 90);
const RUNS = Number(process.env.RUNS ?? 50);
const WARMUP = Number(process.env.WARMUP ?? 5);
const TARGET_MS = 200;

const SEED = [
  `select setseed(0.42)`,
  `insert into accounts (id, email, paid) select 'acct_b' || lpad(i::text, 5, '0'), 'bench' || i || '@example.com', true from generate_series(1, ${ACCOUNTS}) i`,
  `insert into wallets (account_id, purchased_micro) select id, 1000000000000 from accounts`,
  `insert into api_keys (id, account_id, name, prefix, key_hash)
   select 'key_b' || lpad(i::text, 5, '0'), 'acct_b' || lpad((1 + (i - 1) / 3)::text, 5, '0'), 'bench', 'mas_bench', md5(i::text)
   from generate_series(1, ${ACCOUNTS * 3}) i`,
  // One row per request: when, who, which model, what was held and captured, how it ended.
  `create temp table r as
   select n, t, a, (a - 1) * 3 + 1 + floor(random() * 3)::int as k, job,
          case when job then 'media-' || (1 + floor(8 * power(random(), 2))::int) else 'text-' || (1 + floor(12 * power(random(), 2))::int) end as model,
          random() as u, random() as v
   from (select n, date_trunc('day', now()) - interval '${DAYS - 1} days' + (now() - date_trunc('day', now()) + interval '${DAYS - 1} days') * (n::float8 / ${REQUESTS}) as t,
                1 + floor(${ACCOUNTS} * power(random(), 2.5))::int as a, random() < ${JOB_SHARE} as job
         from generate_series(1, ${REQUESTS}) n) s`,
  `create temp table h as
   select n, t, a, k, job, model,
          case when job then 'gen_b' || n else 'chatcmpl-b' || n end as reference,
          case when job then 100000 * (1 + substr(model, 7)::int) else 10000 + floor(u * 490000)::bigint end as amount,
          case when job then (case when u < 0.85 then 'succeeded' when u < 0.95 then 'failed' else 'canceled' end)
               else (case when u < 0.97 then 'settled' else 'released' end) end as outcome,
          (array['upstream_error', 'timeout', 'content_policy', 'reservation_expired'])[1 + floor(v * 4)::int] as code,
          interval '1 millisecond' * floor(50 + v * 2000) as queued,
          interval '1 millisecond' * floor(800 + power(u, 3) * 20000 * (1 + (n % 3))) as ran
   from r`,
  `insert into holds (id, account_id, amount_micro, from_subscription_micro, from_purchased_micro, status, captured_micro, reference, metadata, expires_at, created_at, ended_at)
   select 'hold_b' || n, 'acct_b' || lpad(a::text, 5, '0'), amount, 0, amount,
          case when outcome in ('settled', 'succeeded') then 'settled' else 'released' end,
          case when outcome = 'succeeded' then amount when outcome = 'settled' then floor(amount * (0.2 + 0.8 * random()))::bigint else 0 end,
          reference, jsonb_build_object('kind', case when job then 'generation' else 'chat' end, 'model', model, 'key_id', 'key_b' || lpad(k::text, 5, '0')),
          t + interval '15 minutes', t, t + queued + ran
   from h`,
  `insert into generations (id, account_id, key_id, model_id, status, prompt, settings, inputs, price_micro, cost_micro, hold_id, error, created_at, started_at, completed_at)
   select reference, 'acct_b' || lpad(a::text, 5, '0'), 'key_b' || lpad(k::text, 5, '0'), model, outcome, 'a bench prompt', '{}', '{}', amount,
          case when outcome = 'succeeded' then amount else 0 end, 'hold_b' || n,
          case when outcome = 'failed' then jsonb_build_object('code', code, 'message', 'bench') end,
          t, case when outcome <> 'canceled' then t + queued end, t + queued + ran
   from h where job`,
  // The ledger, in time order: each hold's reservation (2 entries), then its end.
  `create temp table e as
   select x.created_at, x.ord, x.account_id, x.pocket, x.kind, x.amount, x.reference, x.hold_id
   from holds ho, lateral (values
     (ho.created_at, 1, 'purchased', 'reservation', -ho.amount_micro),
     (ho.created_at, 2, 'held', 'reservation', ho.amount_micro),
     (ho.ended_at, 3, 'held', 'capture', -ho.captured_micro),
     (ho.ended_at, 4, 'held', 'release', -(ho.amount_micro - ho.captured_micro)),
     (ho.ended_at, 5, 'purchased', 'release', ho.amount_micro - ho.captured_micro)
   ) as v (created_at, ord, pocket, kind, amount),
   lateral (select v.created_at, v.ord, ho.account_id, v.pocket, v.kind, v.amount, ho.reference, ho.id as hold_id) x
   where ho.id like 'hold_b%' and x.amount <> 0`,
  `insert into e select now() - interval '${DAYS - 1} days' * random(), 0, id, 'purchased', 'topup', 1000000000 * (1 + floor(random() * 50)), 'pay_' || id || '_' || i, null
   from accounts, generate_series(1, 3) i`,
  `insert into e select least(g.completed_at + interval '1 day' * random() * 3, now()), 0, g.account_id, 'purchased', 'refund', g.price_micro / 2, g.id, null
   from generations g where g.status = 'succeeded' and random() < 0.01`,
  `insert into e select now() - interval '${DAYS - 1} days' * random(), 0, 'acct_b' || lpad((1 + floor(random() * ${ACCOUNTS}))::text, 5, '0'), 'purchased', 'adjustment',
     (case when random() < 0.7 then 1 else -1 end) * 1000000 * (1 + floor(random() * 100)), 'ticket-' || i, null
   from generate_series(1, 500) i`,
  `insert into ledger_entries (account_id, pocket, kind, amount_micro, balance_after_micro, reference, hold_id, idempotency_key, description, created_at)
   select account_id, pocket, kind, amount, 1000000000000, reference, hold_id,
          coalesce(hold_id, reference) || ':' || kind || ':' || pocket || ':' || row_number() over (), kind, created_at
   from e order by created_at, hold_id, ord`,
  `vacuum analyze`,
];

async function timed<T>(fn: () => Promise<T>): Promise<{ ms: number; result: T }> {
  const started = performance.now();
  const result = await fn();
  return { ms: performance.now() - started, result };
}

async function main() {
  const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'mas-bench-admin-'));
  const logger = createLogger('warn', process.stderr);
  const steal = stealMeter();
  const embedded = await startEmbeddedPostgres({ dataDir, database: 'mas_bench', logger });
  const orm = await openOrm({ url: embedded.url });
  try {
    await migrate(orm);
    const db = new pg.Client({ connectionString: embedded.url });
    await db.connect();
    const seeding = await timed(async () => {
      for (const sql of SEED) await db.query(sql);
    });
    const counts = (await db.query<{ ledger: string; generations: string; holds: string }>(
      `select (select count(*) from ledger_entries) as ledger, (select count(*) from generations) as generations, (select count(*) from holds) as holds`,
    )).rows[0]!;
    const kinds = (await db.query<{ kind: string; n: string }>(`select kind, count(*) as n from ledger_entries group by kind order by kind`)).rows;
    const today = (await db.query<{ today: string }>(`select (now() at time zone 'UTC')::date::text as today`)).rows[0]!.today;
    await db.end();
    console.log(`seeded in ${(seeding.ms / 1000).toFixed(1)} s: ${counts.ledger} ledger entries (${kinds.map((k) => `${k.kind} ${k.n}`).join(', ')}), ${counts.holds} holds, ${counts.generations} jobs`);

    const em = () => orm.em.fork() as EntityManager;
    const first = await timed(() => refreshAnalytics(em()));
    const steady = await timed(() => refreshAnalytics(em()));
    const rollupRows = await em().execute<{ t: string; n: string }[]>(
      `select 'usage_daily' as t, count(*)::text as n from usage_daily union all select 'usage_daily_models', count(*)::text from usage_daily_models
       union all select 'usage_daily_accounts', count(*)::text from usage_daily_accounts union all select 'jobs_daily', count(*)::text from jobs_daily`,
    );
    console.log(`refresh: first run ${first.ms.toFixed(0)} ms (${first.result.usage_days} + ${first.result.job_days} days), steady run ${steady.ms.toFixed(0)} ms (${steady.result.usage_days} + ${steady.result.job_days} days)`);
    console.log(`rollup rows: ${rollupRows.map((r) => `${r.t} ${r.n}`).join(', ')}`);

    const from90 = addDays(today, -(DAYS - 1));
    const from30 = addDays(today, -29);
    const from7 = addDays(today, -6);
    const bigAccount = 'acct_b00001';
    const bigKey = 'key_b00001';
    const queries: [string, () => Promise<unknown>][] = [
      [`usage: per day, ${DAYS} days`, () => usagePerDay(em(), usageInput.parse({ from: from90, to: today }))],
      [`usage: per day and model, ${DAYS} days`, () => usagePerDay(em(), usageInput.parse({ from: from90, to: today, group_by: ['model'] }))],
      [`usage: one account per day and model, ${DAYS} days`, () => usagePerDay(em(), usageInput.parse({ from: from90, to: today, account_id: bigAccount, group_by: ['model'] }))],
      [`usage: one key per day and model, ${DAYS} days`, () => usagePerDay(em(), usageInput.parse({ from: from90, to: today, key_id: bigKey, group_by: ['model'] }))],
      [`usage: one model per day and account, 30 days (1,000 rows)`, () => usagePerDay(em(), usageInput.parse({ from: from30, to: today, model_id: 'text-1', group_by: ['account'] }))],
      [`usage: per day and account, ${DAYS} days (1,000 rows)`, () => usagePerDay(em(), usageInput.parse({ from: from90, to: today, group_by: ['account'] }))],
      [`usage: per day, account, model and key, 7 days (1,000 rows)`, () => usagePerDay(em(), usageInput.parse({ from: from7, to: today, group_by: ['account', 'model', 'key'] }))],
      [`top 10 accounts, ${DAYS} days`, () => topAccounts(em(), topAccountsInput.parse({ from: from90, to: today }))],
      [`top 10 accounts on one model, ${DAYS} days`, () => topAccounts(em(), topAccountsInput.parse({ from: from90, to: today, model_id: 'text-1' }))],
      [`top 10 models, ${DAYS} days`, () => topModels(em(), topModelsInput.parse({ from: from90, to: today }))],
      [`top 10 models of one account, ${DAYS} days`, () => topModels(em(), topModelsInput.parse({ from: from90, to: today, account_id: bigAccount }))],
      [`jobs by status and failure code, ${DAYS} days`, () => jobsByStatus(em(), jobsByStatusInput.parse({ from: from90, to: today }))],
      [`job durations p50/p95 per model, ${DAYS} days`, () => jobDurations(em(), jobDurationsInput.parse({ from: from90, to: today }))],
    ];
    const results: { name: string; p50: number; p95: number; max: number }[] = [];
    for (const [name, run] of queries) {
      for (let i = 0; i < WARMUP; i++) await run();
      const times: number[] = [];
      for (let i = 0; i < RUNS; i++) times.push((await timed(run)).ms);
      results.push({ name, p50: percentile(times, 50), p95: percentile(times, 95), max: Math.max(...times) });
    }

    console.log(`\n${machine()}; steal during the run: ${steal()}`);
    console.log(`${RUNS} runs per query after ${WARMUP} of warm-up; target: under ${TARGET_MS} ms\n`);
    console.log('| query | p50 ms | p95 ms | max ms |');
    console.log('|---|---|---|---|');
    for (const r of results) console.log(`| ${r.name} | ${r.p50.toFixed(1)} | ${r.p95.toFixed(1)} | ${r.max.toFixed(1)} |`);
    const slow = results.filter((r) => r.p95 >= TARGET_MS);
    console.log(slow.length ? `\nover the target at p95: ${slow.map((r) => r.name).join('; ')}` : `\nevery query under ${TARGET_MS} ms at p95`);
  } finally {
    await orm.close();
    await embedded.release();
    if (!process.env.KEEP) await fs.rm(dataDir, { recursive: true, force: true });
  }
}

await main();
