import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import http from 'node:http';
import type { Server } from 'node:http';
import { Client, Connection, WorkflowNotFoundError } from '@temporalio/client';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type { MikroORM } from '@mikro-orm/postgresql';
import { createTestApp } from '../support/http.ts';
import type { CoreDeps } from '../../core/context.ts';
import { parseCoins } from '../../core/money/coins.ts';
import { makeAccount, makeKey, silentLogger, walletInvariants } from '../support/db.ts';
import { bearer, getJson } from '../support/http.ts';
import { expectReplays, startJobHarness, type JobHarness } from '../support/jobs.ts';
import { capturedFor, expectSettledWallet } from '../support/ledger.ts';
import { releaseExpiredHolds } from '../../core/money/sweep.ts';

/**
 * Media jobs end to end: the REST app over HTTP, a real Temporal dev server, a real worker,
 * real PostgreSQL, the local provider making real files.
 */
let h: JobHarness;
let orm: MikroORM;
let deps: CoreDeps;
let connection: Connection;
let base: string;
let inputServer: Server;
let inputBase: string;
let inputHits = 0;

beforeAll(async () => {
  h = await startJobHarness();
  ({ orm, deps, connection, base } = h);
  // A file server for input URLs (127.0.0.1 is on the test allowlist).
  inputServer = http.createServer((_req, res) => {
    inputHits++;
    res.writeHead(200, { 'content-type': 'image/png' }).end(Buffer.from('not-really-a-png'));
  });
  await new Promise<void>((resolve) => inputServer.listen(0, '127.0.0.1', resolve));
  inputBase = `http://127.0.0.1:${(inputServer.address() as { port: number }).port}`;
});
afterAll(async () => {
  // A provider's kept-alive connection would hold close() open.
  inputServer.closeAllConnections();
  await new Promise((r) => inputServer.close(r));
  await h.close();
});

async function customer(coins = '100') {
  const account = await makeAccount(orm, { coins });
  const { key } = await makeKey(orm, account.id);
  return { account, key };
}

function submit(key: string, body: unknown) {
  return getJson(`${base}/api/v1/generations`, { method: 'POST', headers: { ...bearer(key), 'content-type': 'application/json' }, body: JSON.stringify(body) });
}

async function waitEnded(key: string, id: string, timeout = 30_000) {
  let job: any;
  await vi.waitFor(
    async () => {
      job = (await getJson(`${base}/api/v1/generations/${id}`, { headers: bearer(key) })).body;
      expect(['succeeded', 'failed', 'canceled']).toContain(job.status);
    },
    { timeout, interval: 100 },
  );
  return job;
}

/** The signed link, aimed at this test's server (links carry PUBLIC_BASE_URL). */
const local = (url: string) => `${base}${new URL(url).pathname}${new URL(url).search}`;

/**
 * A media job's API price, written out from config/models.yaml in integer micro-coins:
 * (base + per-unit price x value) x factor, at API_PRICE_PERCENT (50), rounded up to a whole
 * micro-coin. A factor is a fraction [numerator, denominator].
 */
const API_PRICE_PERCENT = 50n;
function apiPrice(inAppMicro: bigint, [num, den]: [bigint, bigint] = [1n, 1n]): bigint {
  const numerator = inAppMicro * num * API_PRICE_PERCENT;
  const denominator = den * 100n;
  return (numerator + denominator - 1n) / denominator;
}
const COIN = 1_000_000n;
const coins = (micro: bigint) => Number(micro) / 1e6;

describe('generations', () => {
  const kinds: [string, Record<string, unknown>, bigint, string, (b: Buffer) => void][] = [
    // base 20 coins, size 128 x 0.5: 10 in-app -> 5 coins.
    ['mas/image-demo', { size: 128, seed: 7 }, apiPrice(20n * COIN, [1n, 2n]), 'image/png', (b) => expect(b.subarray(0, 8).toString('hex')).toBe('89504e470d0a1a0a')],
    // base 2 + 2 per second x 1 s: 4 in-app -> 2 coins.
    ['mas/audio-demo', { duration: 1 }, apiPrice(2n * COIN + 2n * COIN * 1n), 'audio/wav', (b) => expect([b.subarray(0, 4).toString(), b.subarray(8, 12).toString()]).toEqual(['RIFF', 'WAVE'])],
    // base 10 + 10 per second x 1 s, resolution 64 (the default) x 1: 20 in-app -> 10 coins.
    ['mas/video-demo', { duration: 1 }, apiPrice(10n * COIN + 10n * COIN * 1n, [1n, 1n]), 'video/x-msvideo', (b) => expect([b.subarray(0, 4).toString(), b.subarray(8, 12).toString()]).toEqual(['RIFF', 'AVI '])],
    // base 30, detail low x 1: 30 in-app -> 15 coins.
    ['mas/3d-demo', { detail: 'low' }, apiPrice(30n * COIN, [1n, 1n]), 'model/gltf+json', (b) => expect(JSON.parse(b.toString()).asset.version).toBe('2.0')],
  ];
  it('the prices these tests expect, worked out by hand', () => {
    expect(kinds.map(([model, , price]) => [model, price])).toEqual([
      ['mas/image-demo', 5_000_000n],
      ['mas/audio-demo', 2_000_000n],
      ['mas/video-demo', 10_000_000n],
      ['mas/3d-demo', 15_000_000n],
    ]);
  });
  for (const [model, settings, price, mime, check] of kinds) {
    it(`${model}: 202 queued, then succeeded with a downloadable file, charged exactly its price`, async () => {
      const { account, key } = await customer();
      const res = await submit(key, { model, prompt: 'a lighthouse at dusk', settings });
      expect(res.status).toBe(202);
      expect(res.body).toMatchObject({ id: expect.stringMatching(/^gen_/), object: 'generation', status: 'queued', model, cost_coins: null, output: null });
      expect(res.body.price_coins).toBe(coins(price));
      const job = await waitEnded(key, res.body.id);
      expect(job.status).toBe('succeeded');
      expect(job.cost_coins).toBe(coins(price));
      expect(Date.parse(job.output.expires_at) - Date.parse(job.completed_at)).toBeGreaterThan(3_590_000);
      expect(job.output.url).not.toContain(key);
      const file = await fetch(local(job.output.url));
      expect(file.status).toBe(200);
      expect(file.headers.get('content-type')).toBe(mime);
      check(Buffer.from(await file.arrayBuffer()));
      expect(await capturedFor(orm, job.id)).toBe(price);
      const state = await expectSettledWallet(orm, account.id);
      expect(state.balance.purchased).toBe(100n * COIN - price);
    });
  }

  it('a job whose hold expired before it ended: failed as reservation_expired, its output not delivered, nothing charged', async () => {
    const { account, key } = await customer('10');
    const res = await submit(key, { model: 'mas/image-demo', prompt: 'x', settings: { size: 128, delay_ms: 4000 } });
    expect(res.status).toBe(202);
    const id = res.body.id as string;
    await vi.waitFor(async () => expect((await getJson(`${base}/api/v1/generations/${id}`, { headers: bearer(key) })).body.status).toBe('running'), { timeout: 10_000, interval: 50 });
    // While it runs, its reservation (5 coins: 20 x 0.5 at 50%) is held.
    const held = await walletInvariants(orm, account.id);
    expect(held.balance.held).toBe(apiPrice(20n * COIN, [1n, 2n]));
    // Its hold expires (as if the job had outlived HOLD_TTL_SECONDS) and the hold sweep releases
    // it. The sweep runs as at a moment long past, so it touches no other test's hold.
    await orm.em.fork().execute(`update holds set expires_at = '2000-01-01T00:00:00Z' where id = ? and status = 'open'`, [`hold_${id}`]);
    expect(await releaseExpiredHolds(orm.em.fork(), new Date('2000-01-01T00:00:01Z'))).toBe(1);
    const [hold] = await orm.em.fork().execute<{ status: string }[]>('select status from holds where id = ?', [`hold_${id}`]);
    expect(hold!.status).toBe('released');

    // The provider then finishes: the job is not delivered unpaid.
    const job = await waitEnded(key, id);
    expect(job).toMatchObject({ status: 'failed', cost_coins: 0, output: null, error: { code: 'reservation_expired', message: expect.any(String) } });
    expect(await capturedFor(orm, id)).toBe(0n);
    const state = await expectSettledWallet(orm, account.id);
    expect(state.balance.purchased).toBe(10n * COIN);
    expect(state.ledgerTotal).toBe(10n * COIN);
    // Nothing of the result is kept or served: no stored file, and even a validly signed link finds nothing.
    const stored = await fs.readdir(path.join(h.storageDir, 'generations')).catch(() => [] as string[]);
    expect(stored.filter((f) => f.startsWith(id))).toEqual([]);
    const link = await getJson(local(deps.signer.sign(id, new Date(Date.now() + 60_000))));
    expect(link.status).toBe(404);
    expect(link.body.error.code).toBe('output_not_found');
  });

  it('a failing provider: failed with an error object, refunded in full', async () => {
    const { account, key } = await customer('10');
    const res = await submit(key, { model: 'mas/image-demo', prompt: 'x', settings: { fail: true } });
    const job = await waitEnded(key, res.body.id);
    expect(job).toMatchObject({ status: 'failed', cost_coins: 0, output: null, error: { code: 'provider_failed', message: expect.any(String) } });
    expect((await expectSettledWallet(orm, account.id)).balance.purchased).toBe(parseCoins('10'));
    // The workflow's run id is kept for the admin API's Temporal links.
    const [row] = await orm.em.fork().execute<{ workflow_run_id: string | null }[]>('select workflow_run_id from generations where id = ?', [job.id]);
    expect(row!.workflow_run_id).toMatch(/^[0-9a-f-]{36}$/);
  });

  it("a job past its model's deadline: failed, refunded in full", async () => {
    const { account, key } = await customer('10');
    const res = await submit(key, { model: 'test/deadline-image', prompt: 'x', settings: { delay_ms: 60_000 } });
    const job = await waitEnded(key, res.body.id);
    expect(job).toMatchObject({ status: 'failed', cost_coins: 0, error: { code: 'deadline_exceeded' } });
    expect((await expectSettledWallet(orm, account.id)).balance.purchased).toBe(parseCoins('10'));
  });

  it('20 parallel submissions on one key start at most 5; the others get 429 and are not charged', async () => {
    const { account, key } = await customer('100');
    const results = await Promise.all(Array.from({ length: 20 }, () => submit(key, { model: 'mas/image-demo', prompt: 'x', settings: { delay_ms: 1500, size: 128 } })));
    const accepted = results.filter((r) => r.status === 202);
    expect(accepted).toHaveLength(5);
    for (const r of results.filter((x) => x.status !== 202)) {
      expect(r.status).toBe(429);
      expect(r.body.error).toMatchObject({ type: 'rate_limit_error', code: 'concurrency_limit_exceeded' });
    }
    // Each holds its price: 20 x 0.5 at 50% = 5 coins.
    const price = apiPrice(20n * COIN, [1n, 2n]);
    const [held] = await orm.em.fork().execute<{ h: string }[]>('select held_micro::text as h from wallets where account_id = ?', [account.id]);
    expect(BigInt(held!.h)).toBe(5n * price);
    for (const r of accepted) await waitEnded(key, r.body.id);
    // Once they end, the key may start jobs again.
    expect((await submit(key, { model: 'mas/image-demo', prompt: 'x', settings: { size: 128 } })).status).toBe(202);
  });

  it('refuses bad requests with a clear 4xx naming the field, and charges nothing', async () => {
    const { account, key } = await customer('10');
    const cases: [Record<string, unknown>, number, string | RegExp][] = [
      [{ model: 'mas/image-demo', prompt: 'x', settings: { colour: 'red' } }, 400, /settings\.colour/],
      [{ model: 'mas/image-demo', prompt: 'x', settings: { size: 4096 } }, 400, /settings\.size/],
      [{ model: 'mas/audio-demo', prompt: 'x', settings: { duration: 99 } }, 400, /settings\.duration.*between 1 and 30/],
      [{ model: 'mas/audio-demo', prompt: 'x', settings: { duration: 2.5 } }, 400, /settings\.duration/],
      [{ model: 'mas/image-demo', prompt: 'x', inputs: { mask: 'https://example.com/a.png' } }, 400, /inputs\.mask/],
      [{ model: 'mas/image-demo', prompt: 'x', inputs: { reference_image: ['https://example.com/a.png'] } }, 400, /inputs\.reference_image.*one file/],
      [{ model: 'mas/image-demo', prompt: 'x', inputs: { reference_image: 'http://169.254.169.254/latest/meta-data' } }, 400, /inputs\.reference_image/],
      [{ model: 'mas/image-demo', prompt: 'x', inputs: { reference_image: 'http://localhost:8080/a.png' } }, 400, /inputs\.reference_image.*private/],
      [{ model: 'mas/image-demo', prompt: 'x', inputs: { reference_image: 'http://[::1]/a.png' } }, 400, /inputs\.reference_image/],
      [{ model: 'mas/image-demo', prompt: 'x', inputs: { reference_image: 'http://10.1.2.3/a.png' } }, 400, /inputs\.reference_image/],
      [{ model: 'mas/image-demo', prompt: 'x', inputs: { reference_image: 'ftp://example.com/a.png' } }, 400, /inputs\.reference_image.*http/],
      [{ model: 'mas/echo', prompt: 'x' }, 400, /chat\/completions/],
      [{ model: 'nobody/nothing', prompt: 'x' }, 404, /nobody\/nothing/],
      [{ prompt: 'x' }, 400, /'model'/],
    ];
    for (const [body, status, message] of cases) {
      const res = await submit(key, body);
      expect(res.status, JSON.stringify(body)).toBe(status);
      expect(res.body.error.message).toMatch(message);
    }
    const state = await expectSettledWallet(orm, account.id);
    expect(state.balance.purchased).toBe(parseCoins('10'));
    expect(state.ledgerTotal).toBe(parseCoins('10'));
  });

  it('403 for a paid-only model on an unpaid account; 402 when the price does not fit', async () => {
    const unpaid = await makeAccount(orm);
    const unpaidKey = (await makeKey(orm, unpaid.id)).key;
    expect((await submit(unpaidKey, { model: 'mas/3d-demo', prompt: 'x' })).status).toBe(403);
    const poor = await customer('0.5');
    const res = await submit(poor.key, { model: 'mas/image-demo', prompt: 'x' });
    expect(res.status).toBe(402);
    expect(res.body.error.code).toBe('insufficient_balance');
    await expectSettledWallet(orm, poor.account.id);
  });

  it('fetches public input URLs at run time (the URL guard applies again when connecting)', async () => {
    const { key } = await customer();
    const before = inputHits;
    const res = await submit(key, { model: 'mas/image-demo', prompt: 'x', settings: { size: 128 }, inputs: { reference_image: `${inputBase}/ref.png` } });
    expect(res.status).toBe(202);
    expect((await waitEnded(key, res.body.id)).status).toBe('succeeded');
    expect(inputHits).toBe(before + 1);
  });

  it("another account's job is 404, like an unknown one; a tampered or expired link is 403", async () => {
    const a = await customer();
    const b = await customer();
    const res = await submit(a.key, { model: 'mas/image-demo', prompt: 'x', settings: { size: 128 } });
    const job = await waitEnded(a.key, res.body.id);
    const other = await getJson(`${base}/api/v1/generations/${job.id}`, { headers: bearer(b.key) });
    const unknown = await getJson(`${base}/api/v1/generations/gen_nothing`, { headers: bearer(b.key) });
    expect(other.status).toBe(404);
    expect(unknown.status).toBe(404);
    expect(other.body.error).toEqual({ type: unknown.body.error.type, param: null, code: unknown.body.error.code, message: `No generation ${job.id}.` });

    const url = new URL(local(job.output.url));
    url.searchParams.set('signature', `${url.searchParams.get('signature')!.slice(0, -2)}xx`);
    const tampered = await getJson(url.toString());
    expect(tampered.status).toBe(403);
    expect(tampered.body.error.code).toBe('invalid_signature');
    const expired = await getJson(local(deps.signer.sign(job.id, new Date(Date.now() - 1000))));
    expect(expired.status).toBe(403);
    expect(expired.body.error.code).toBe('url_expired');
  });

  it('starts the workflow of a job left queued by a crash between accepting it and starting it', async () => {
    const { account, key } = await customer('20');
    // A process that records the job and dies before starting its workflow: a starter that does nothing.
    const crashed = { ...deps, generations: { start: async () => undefined, cancel: async () => undefined, state: async () => ({ state: 'open' as const }), deliverWebhook: async () => undefined } };
    const app = createTestApp({ deps: crashed, logger: silentLogger, publicBaseUrl: 'http://localhost' });
    const crashedServer = await new Promise<Server>((resolve) => {
      const srv = app.listen(0, '127.0.0.1', () => resolve(srv));
    });
    const res = await getJson(`http://127.0.0.1:${(crashedServer.address() as { port: number }).port}/api/v1/generations`, {
      method: 'POST',
      headers: { ...bearer(key), 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'mas/image-demo', prompt: 'x', settings: { size: 128 } }),
    });
    await new Promise((r) => crashedServer.close(r));
    expect(res.status).toBe(202);
    // A job accepted after it, by a process that does start workflows, runs to its end on the
    // same worker: the system is working. The crashed one still has no workflow and is queued.
    const later = await submit(key, { model: 'mas/image-demo', prompt: 'later', settings: { size: 128 } });
    expect(later.status).toBe(202);
    expect((await waitEnded(key, later.body.id)).status).toBe('succeeded');
    const client = new Client({ connection });
    await expect(client.workflow.getHandle(res.body.id).describe()).rejects.toBeInstanceOf(WorkflowNotFoundError);
    expect((await getJson(`${base}/api/v1/generations/${res.body.id}`, { headers: bearer(key) })).body.status).toBe('queued');

    await orm.em.fork().execute(`update generations set created_at = now() - interval '1 minute' where id = ?`, [res.body.id]);
    const { createActivities } = await import('../../workflows/activities.ts');
    expect(await createActivities(deps).restartStaleGenerations()).toBeGreaterThanOrEqual(1);
    expect((await waitEnded(key, res.body.id)).status).toBe('succeeded');
    await expectSettledWallet(orm, account.id);
  });

  it('cancel while running: canceled, refunded in full, once; a finished job answers 409 and keeps its state', async () => {
    const { account, key } = await customer('10');
    const res = await submit(key, { model: 'mas/image-demo', prompt: 'x', settings: { size: 128, delay_ms: 20_000 } });
    await vi.waitFor(async () => expect((await getJson(`${base}/api/v1/generations/${res.body.id}`, { headers: bearer(key) })).body.status).toBe('running'));
    const canceled = await getJson(`${base}/api/v1/generations/${res.body.id}/cancel`, { method: 'POST', headers: bearer(key) });
    expect(canceled.status).toBe(200);
    expect(canceled.body).toMatchObject({ status: 'canceled', cost_coins: 0, output: null });
    expect((await expectSettledWallet(orm, account.id)).balance.purchased).toBe(parseCoins('10'));
    // The workflow stops too, and leaves the job as it is.
    const client = new Client({ connection });
    await vi.waitFor(async () => expect((await client.workflow.getHandle(res.body.id).describe()).status.name).not.toBe('RUNNING'), { timeout: 10_000 });
    const again = await getJson(`${base}/api/v1/generations/${res.body.id}/cancel`, { method: 'POST', headers: bearer(key) });
    expect(again.status).toBe(409);
    expect(again.body.error.code).toBe('generation_finished');
    expect((await getJson(`${base}/api/v1/generations/${res.body.id}`, { headers: bearer(key) })).body.status).toBe('canceled');

    const other = await customer();
    expect((await getJson(`${base}/api/v1/generations/${res.body.id}/cancel`, { method: 'POST', headers: bearer(other.key) })).status).toBe(404);
  });

  it('cancel racing completion: exactly one outcome, and the money matches it', async () => {
    const { account, key } = await customer('100');
    for (let i = 0; i < 5; i++) {
      const res = await submit(key, { model: 'mas/image-demo', prompt: `race ${i}`, settings: { size: 128, delay_ms: 300 } });
      await new Promise((r) => setTimeout(r, 150 + i * 100));
      const cancel = await getJson(`${base}/api/v1/generations/${res.body.id}/cancel`, { method: 'POST', headers: bearer(key) });
      const job = await waitEnded(key, res.body.id);
      const [counts] = await orm.em.fork().execute<{ captures: number; releases: number }[]>(
        `select (select count(*)::int from ledger_entries where hold_id = ? and kind = 'capture') as captures,
                (select count(*)::int from ledger_entries where hold_id = ? and kind = 'release' and pocket = 'held') as releases`,
        [`hold_${job.id}`, `hold_${job.id}`],
      );
      if (cancel.status === 200) {
        expect(job.status).toBe('canceled');
        expect(counts).toEqual({ captures: 0, releases: 1 });
      } else {
        expect(cancel.status).toBe(409);
        expect(job.status).toBe('succeeded');
        expect(counts).toEqual({ captures: 1, releases: 0 });
      }
    }
    await expectSettledWallet(orm, account.id);
  });

  it('50 parallel submissions with one Idempotency-Key: one job, one charge, the first response for all', async () => {
    const { account, key } = await customer('100');
    const body = { model: 'mas/image-demo', prompt: 'once', settings: { size: 128 } };
    const headers = { ...bearer(key), 'content-type': 'application/json', 'idempotency-key': `order-${randomBytes(4).toString('hex')}` };
    const results = await Promise.all(
      Array.from({ length: 50 }, () => getJson(`${base}/api/v1/generations`, { method: 'POST', headers, body: JSON.stringify(body) })),
    );
    expect(results.map((r) => r.status)).toEqual(Array(50).fill(202));
    const ids = new Set(results.map((r) => r.body.id));
    expect(ids.size).toBe(1);
    expect(results.filter((r) => r.headers.get('idempotent-replayed') === 'true')).toHaveLength(49);
    const [jobs] = await orm.em.fork().execute<{ n: number }[]>('select count(*)::int as n from generations where account_id = ?', [account.id]);
    expect(jobs!.n).toBe(1);
    const job = await waitEnded(key, [...ids][0]!);
    expect(Number(await capturedFor(orm, job.id))).toBe(job.cost_coins * 1e6);
    await expectSettledWallet(orm, account.id);

    // The same key with another body: 422, nothing done.
    const other = await getJson(`${base}/api/v1/generations`, { method: 'POST', headers, body: JSON.stringify({ ...body, prompt: 'twice' }) });
    expect(other.status).toBe(422);
    expect(other.body.error).toMatchObject({ type: 'idempotency_error', code: 'idempotency_key_reused' });
    // An invalid key is refused by name.
    const bad = await getJson(`${base}/api/v1/generations`, { method: 'POST', headers: { ...headers, 'idempotency-key': 'has space' }, body: JSON.stringify(body) });
    expect(bad.status).toBe(400);
    expect(bad.body.error.message).toMatch(/idempotency_key/);
  });

  it('Prefer: wait=N answers with the finished job when it ends in time, else 202', async () => {
    const { key } = await customer();
    const quick = await getJson(`${base}/api/v1/generations`, {
      method: 'POST',
      headers: { ...bearer(key), 'content-type': 'application/json', prefer: 'wait=10' },
      body: JSON.stringify({ model: 'mas/image-demo', prompt: 'x', settings: { size: 128 } }),
    });
    expect(quick.status).toBe(200);
    expect(quick.headers.get('preference-applied')).toBe('wait=10');
    expect(quick.body).toMatchObject({ status: 'succeeded', output: { url: expect.any(String) } });
    const slow = await getJson(`${base}/api/v1/generations`, {
      method: 'POST',
      headers: { ...bearer(key), 'content-type': 'application/json', prefer: 'wait=1' },
      body: JSON.stringify({ model: 'mas/image-demo', prompt: 'x', settings: { size: 128, delay_ms: 5000 } }),
    });
    expect(slow.status).toBe(202);
    expect(slow.body.status).toMatch(/queued|running/);
    const tooLong = await getJson(`${base}/api/v1/generations`, {
      method: 'POST',
      headers: { ...bearer(key), 'content-type': 'application/json', prefer: 'wait=61' },
      body: JSON.stringify({ model: 'mas/image-demo', prompt: 'x' }),
    });
    expect(tooLong.status).toBe(400);
    expect(tooLong.body.error.message).toMatch(/wait_seconds/);
    await waitEnded(key, slow.body.id);
  });

  it('webhooks: delivered signed (Standard Webhooks), retried when the receiver fails, private URLs refused', async () => {
    const { key } = await customer();
    const received: { headers: http.IncomingHttpHeaders; body: string }[] = [];
    const receiver = http.createServer((req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => (body += c.toString()));
      req.on('end', () => {
        received.push({ headers: req.headers, body });
        res.writeHead(received.length === 1 ? 500 : 204).end();
      });
    });
    await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
    try {
      const hook = `http://127.0.0.1:${(receiver.address() as { port: number }).port}/hooks/mas`;
      const res = await submit(key, { model: 'mas/image-demo', prompt: 'x', settings: { size: 128 }, webhook_url: hook });
      expect(res.status).toBe(202);
      expect(res.body.webhook_url).toBe(hook);
      await vi.waitFor(() => expect(received.length).toBe(2), { timeout: 20_000, interval: 100 });
      const [first, second] = received;
      expect(second!.headers['webhook-id']).toBe(first!.headers['webhook-id']);
      const secret = (await getJson(`${base}/api/v1/webhook_secret`, { headers: bearer(key) })).body.secret as string;
      expect(secret).toMatch(/^whsec_/);
      const { createHmac } = await import('node:crypto');
      const h = second!.headers;
      const expected = createHmac('sha256', Buffer.from(secret.slice(6), 'base64')).update(`${h['webhook-id']}.${h['webhook-timestamp']}.${second!.body}`).digest('base64');
      expect(h['webhook-signature']).toBe(`v1,${expected}`);
      const payload = JSON.parse(second!.body);
      expect(payload).toMatchObject({ type: 'generation.succeeded', data: { id: res.body.id, object: 'generation', status: 'succeeded' } });
    } finally {
      await new Promise((r) => receiver.close(r));
    }
    for (const url of ['http://10.0.0.1/hook', 'http://localhost:9/hook', 'file:///tmp/x']) {
      const bad = await submit(key, { model: 'mas/image-demo', prompt: 'x', webhook_url: url });
      expect(bad.status, url).toBe(400);
      expect(bad.body.error.message).toMatch(/webhook_url/);
    }
  });

  it("a job's work through Temporal: one workflow task, no activity task, its steps local (counts, bench/RESULTS.md round 3)", async () => {
    const { key } = await customer();
    const res = await submit(key, { model: 'mas/image-demo', prompt: 'count', settings: { size: 128 } });
    expect(res.status).toBe(202);
    expect((await waitEnded(key, res.body.id)).status).toBe('succeeded');
    const handle = new Client({ connection }).workflow.getHandle(res.body.id);
    await vi.waitFor(async () => expect((await handle.describe()).status.name).toBe('COMPLETED'), { timeout: 10_000, interval: 100 });
    const events = (await handle.fetchHistory()).events ?? [];
    const count = (pick: (e: (typeof events)[number]) => unknown) => events.filter((e) => pick(e) != null).length;
    const markers = events.map((e) => e.markerRecordedEventAttributes?.markerName).filter((m) => m != null);
    // Version 5: one patch marker, and five local steps (mark running, submit, poll, copy, charge).
    expect(markers.sort()).toEqual(['core_local_activity', 'core_local_activity', 'core_local_activity', 'core_local_activity', 'core_local_activity', 'core_patch']);
    expect(count((e) => e.workflowTaskCompletedEventAttributes)).toBe(1);
    expect(count((e) => e.activityTaskScheduledEventAttributes)).toBe(0);
    // The patch's TemporalChangeVersion, then MasJobStatus running and succeeded.
    expect(count((e) => e.upsertWorkflowSearchAttributesEventAttributes)).toBe(3);
    expect(events).toHaveLength(14);
  });

  it('replays the recorded workflow histories without determinism errors', async () => {
    const client = new Client({ connection });
    const ids: string[] = [];
    for await (const wf of client.workflow.list({ query: `TaskQueue = '${h.taskQueue}'` })) ids.push(wf.workflowId);
    expect(ids.length).toBeGreaterThan(5);
    await expectReplays(await Promise.all(ids.map(async (workflowId) => ({ workflowId, history: await client.workflow.getHandle(workflowId).fetchHistory() }))));
  });

  it('replays histories recorded by the previous workflow version (regular activities only)', async () => {
    // test/fixtures/histories: succeeded (with and without a webhook), failed and canceled runs
    // recorded before the short steps became local activities. Runs like these may still be
    // waiting on their retention timer when a new version is deployed.
    const { readdir, readFile } = await import('node:fs/promises');
    const { temporal } = await import('@temporalio/proto');
    const dir = new URL('../fixtures/histories/', import.meta.url);
    const files = (await readdir(dir)).filter((f) => f.endsWith('.binpb'));
    expect(files.length).toBe(4);
    await expectReplays(
      await Promise.all(files.map(async (f) => ({ workflowId: f, history: temporal.api.history.v1.History.decode(await readFile(new URL(f, dir))) }))),
    );
  });

  it('replays histories recorded before the workflow closed with its job (version 1: local steps, the retention timer)', async () => {
    // test/fixtures/histories/v1: succeeded (finished, and still waiting on its retention timer),
    // succeeded with a webhook, failed and canceled. A run still sleeping through retention when
    // version 2 is deployed replays on generation-v1.workflow.ts and finishes there.
    const { readdir, readFile } = await import('node:fs/promises');
    const { temporal } = await import('@temporalio/proto');
    const dir = new URL('../fixtures/histories/v1/', import.meta.url);
    const files = (await readdir(dir)).filter((f) => f.endsWith('.binpb'));
    expect(files.sort()).toEqual(['canceled.binpb', 'failed.binpb', 'succeeded-waiting-retention.binpb', 'succeeded-webhook.binpb', 'succeeded.binpb']);
    const histories = await Promise.all(files.map(async (f) => ({ workflowId: f, history: temporal.api.history.v1.History.decode(await readFile(new URL(f, dir))) })));
    // Each is of the old shape: no version-2 marker, and the finished success ran its retention timer.
    for (const { workflowId, history } of histories) expect(JSON.stringify(history), workflowId).not.toContain('closes-with-job');
    expect(JSON.stringify(histories.find((x) => x.workflowId === 'succeeded.binpb')!.history)).toContain('deleteGenerationResult');
    await expectReplays(histories);
  });
});
