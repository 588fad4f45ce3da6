import fs from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { makeAccount, makeKey } from '../support/db.ts';
import { bearer, getJson } from '../support/http.ts';
import { startJobHarness, type JobHarness } from '../support/jobs.ts';
import { expectSettledWallet } from '../support/ledger.ts';
import { parseCoins } from '../../core/money/coins.ts';
import { png, seededRandom } from '../../adapters/providers/media/formats.ts';
import { reportSection, table } from './support/results.ts';

/**
 * Issue 20, part 5: Stripe's promise for idempotency keys, under a storm. Many concurrent
 * requests with one Idempotency-Key and one body make one job and one charge, and all get the
 * same answer; the same key with another body is 422 every time. The same for POST /files,
 * the API's other idempotent endpoint (docs/api.md, "Idempotency and waiting").
 */
const STORM = 50;
const CONFLICTS = 20;

let h: JobHarness;
let starts = 0;

beforeAll(async () => {
  h = await startJobHarness();
  // Count the workflow starts the API asks for: one job, one start.
  const start = h.deps.generations.start.bind(h.deps.generations);
  h.deps.generations.start = (job) => {
    starts++;
    return start(job);
  };
});
afterAll(async () => {
  await h?.close();
});

const count = (values: (string | number)[]) => values.reduce<Record<string, number>>((m, v) => ((m[String(v)] = (m[String(v)] ?? 0) + 1), m), {});

function postGeneration(key: string, idem: string, prompt: string) {
  return getJson(`${h.base}/api/v1/generations`, {
    method: 'POST',
    headers: { ...bearer(key), 'content-type': 'application/json', 'idempotency-key': idem },
    body: JSON.stringify({ model: 'mas/image-demo', prompt, settings: { size: 128, seed: 7 } }),
  });
}

function postFile(key: string, idem: string, bytes: Uint8Array, filename: string) {
  const form = new FormData();
  form.append('file', new Blob([bytes]), filename);
  return getJson(`${h.base}/api/v1/files`, { method: 'POST', headers: { ...bearer(key), 'idempotency-key': idem }, body: form });
}

async function one(sql: string, params: unknown[]): Promise<number> {
  const [row] = await h.orm.em.fork().execute<{ n: number }[]>(sql, params);
  return row!.n;
}

describe('an idempotency storm', () => {
  it('POST /generations: 50 at once with one key and body make one job and one charge; another body is 422 every time', async () => {
    const account = await makeAccount(h.orm, { coins: '1000' });
    const { key } = await makeKey(h.orm, account.id);
    const idem = `storm-${account.id}`;

    const storm = await Promise.all(Array.from({ length: STORM }, () => postGeneration(key, idem, 'one fox, once')));
    const statuses = count(storm.map((r) => r.status));
    const ids = new Set(storm.map((r) => r.body.id));
    const replayed = storm.filter((r) => r.headers.get('idempotent-replayed') === 'true').length;
    for (const r of storm) expect([200, 202]).toContain(r.status);
    expect(ids.size).toBe(1);
    expect(replayed).toBe(STORM - 1);
    const [jobId] = [...ids] as string[];

    // The same key, another body: refused every time, concurrently, with the documented code.
    const conflicts = await Promise.all(Array.from({ length: CONFLICTS }, (_, i) => postGeneration(key, idem, `another fox ${i}`)));
    const conflictStatuses = count(conflicts.map((r) => r.status));
    const conflictCodes = count(conflicts.map((r) => r.body.error?.code ?? 'none'));
    expect(conflictStatuses).toEqual({ 422: CONFLICTS });
    expect(conflictCodes).toEqual({ idempotency_key_reused: CONFLICTS });

    // A fresh key raced by different bodies: exactly one wins, the others are 422.
    const raceKey = `race-${account.id}`;
    const race = await Promise.all(Array.from({ length: CONFLICTS }, (_, i) => postGeneration(key, raceKey, `racing fox ${i}`)));
    const raceStatuses = count(race.map((r) => r.status));
    expect(race.filter((r) => r.status === 202 || r.status === 200).length).toBe(1);
    expect(race.filter((r) => r.status === 422 && r.body.error?.code === 'idempotency_key_reused').length).toBe(CONFLICTS - 1);
    const raceJob = race.find((r) => r.status < 300)!.body.id as string;

    // Both jobs end; the database holds exactly one job, one hold and one charge for each.
    for (const id of [jobId!, raceJob]) {
      await vi.waitFor(async () => expect((await getJson(`${h.base}/api/v1/generations/${id}`, { headers: bearer(key) })).body.status).toBe('succeeded'), {
        timeout: 120_000,
        interval: 200,
      });
    }
    const jobs = await one('select count(*)::int as n from generations where account_id = ?', [account.id]);
    const holds = await one('select count(*)::int as n from holds where account_id = ?', [account.id]);
    const reservations = await one(`select count(*)::int as n from ledger_entries where account_id = ? and kind = 'reservation' and pocket = 'held'`, [account.id]);
    const captures = await one(`select count(*)::int as n from ledger_entries where account_id = ? and kind = 'capture'`, [account.id]);
    const [prices] = await h.orm.em.fork().execute<{ price: string; captured: string }[]>(
      `select (select coalesce(sum(price_micro), 0) from generations where account_id = ?)::text as price,
              (select coalesce(-sum(amount_micro), 0) from ledger_entries where account_id = ? and kind = 'capture')::text as captured`,
      [account.id, account.id],
    );
    expect({ jobs, holds, reservations, captures, starts }).toEqual({ jobs: 2, holds: 2, reservations: 2, captures: 2, starts: 2 });
    expect(BigInt(prices!.captured)).toBe(BigInt(prices!.price));
    const state = await expectSettledWallet(h.orm, account.id);
    expect(state.balance.subscription + state.balance.purchased).toBe(parseCoins('1000') - BigInt(prices!.price));
    const stormJobs = await one('select count(*)::int as n from generations where account_id = ? and prompt = ?', [account.id, 'one fox, once']);
    const conflictJobs = await one(`select count(*)::int as n from generations where account_id = ? and prompt like 'another fox %'`, [account.id]);

    generationsFigures = {
      statuses,
      ids: ids.size,
      replayed,
      conflictStatuses,
      conflictCodes,
      raceStatuses,
      stormJobs,
      conflictJobs,
      jobs,
      holds,
      reservations,
      captures,
      starts,
    };
  }, 300_000);

  it('POST /files: 50 at once with one key and file make one file; another file is 422 every time', async () => {
    const account = await makeAccount(h.orm, { coins: '10' });
    const { key } = await makeKey(h.orm, account.id);
    const idem = `file-storm-${account.id}`;
    const bytes = png(16, 16, seededRandom(new Uint8Array([20])));

    const storm = await Promise.all(Array.from({ length: STORM }, () => postFile(key, idem, bytes, 'storm.bin')));
    const statuses = count(storm.map((r) => r.status));
    const ids = new Set(storm.map((r) => r.body.id));
    const replayed = storm.filter((r) => r.headers.get('idempotent-replayed') === 'true').length;
    expect(statuses).toEqual({ 200: STORM });
    expect(ids.size).toBe(1);
    expect(replayed).toBe(STORM - 1);

    const conflicts = await Promise.all(
      Array.from({ length: CONFLICTS }, (_, i) => postFile(key, idem, new TextEncoder().encode(`another file ${i}\n`), `other-${i}.txt`)),
    );
    const conflictStatuses = count(conflicts.map((r) => r.status));
    const conflictCodes = count(conflicts.map((r) => r.body.error?.code ?? 'none'));
    expect(conflictStatuses).toEqual({ 422: CONFLICTS });
    expect(conflictCodes).toEqual({ idempotency_key_reused: CONFLICTS });

    const rows = await one('select count(*)::int as n from files where account_id = ?', [account.id]);
    const stored = (await fs.readdir(path.join(h.storageDir, 'files', account.id)).catch(() => [])).length;
    expect({ rows, stored }).toEqual({ rows: 1, stored: 1 });
    // Uploading charges nothing.
    await expectSettledWallet(h.orm, account.id);
    expect(await one('select count(*)::int as n from ledger_entries where account_id = ?', [account.id])).toBe(1);
    filesFigures = { statuses, ids: ids.size, replayed, conflictStatuses, conflictCodes, rows, stored };
  }, 120_000);

  afterAll(async () => {
    const fmt = (m: Record<string, number> | undefined) =>
      m
        ? Object.entries(m)
            .map(([k, v]) => `${v} × ${k}`)
            .join(', ')
        : 'not measured';
    const g = generationsFigures;
    const f = filesFigures;
    await reportSection(
      'idempotency-storm',
      5,
      `## Idempotency storm

Concurrent requests with one \`Idempotency-Key\`, on the REST API with a real worker.

${table(
  ['Check', 'POST /generations', 'POST /files'],
  [
    [`${STORM} concurrent, same key and body: statuses`, fmt(g?.statuses), fmt(f?.statuses)],
    ['Distinct ids in those answers', g?.ids ?? '–', f?.ids ?? '–'],
    ['Answers marked `Idempotent-Replayed: true`', g?.replayed ?? '–', f?.replayed ?? '–'],
    ['Objects made by the storm', g ? `${g.stormJobs} job` : '–', f ? `${f.rows} file (${f.stored} stored)` : '–'],
    [`${CONFLICTS} concurrent, same key, other bodies: statuses`, fmt(g?.conflictStatuses), fmt(f?.conflictStatuses)],
    ['Their error codes', fmt(g?.conflictCodes), fmt(f?.conflictCodes)],
    ['Objects made by those', g ? `${g.conflictJobs} jobs` : '–', f ? `${f.rows - 1} files` : '–'],
    [`${CONFLICTS} concurrent, a fresh key, each another body: statuses`, fmt(g?.raceStatuses), '–'],
  ],
)}

For the account of the generation storms (the storm's key, then a fresh key raced by ${CONFLICTS} bodies): ${g ? `${g.jobs} jobs, ${g.holds} holds, ${g.reservations} reservations, ${g.captures} captures, ${g.starts} workflow starts` : 'not measured'}; each job was charged its price once and the wallet settled (no held coins, the ledger sums to the balance).
`,
    );
  });
});

let generationsFigures:
  | {
      statuses: Record<string, number>;
      ids: number;
      replayed: number;
      conflictStatuses: Record<string, number>;
      conflictCodes: Record<string, number>;
      raceStatuses: Record<string, number>;
      stormJobs: number;
      conflictJobs: number;
      jobs: number;
      holds: number;
      reservations: number;
      captures: number;
      starts: number;
    }
  | undefined;
let filesFigures:
  | { statuses: Record<string, number>; ids: number; replayed: number; conflictStatuses: Record<string, number>; conflictCodes: Record<string, number>; rows: number; stored: number }
  | undefined;
