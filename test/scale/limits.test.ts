import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { nowMs, sleep, startTestCluster, upstreamOf, type TestCluster } from './support.ts';

/**
 * The limits hold for the service as a whole, not per instance: two API instances behind nginx
 * (round-robin, scripts/support/cluster.ts), two workers, one PostgreSQL and one Redis.
 *   1. 120 requests per minute per key: counted in Redis, so 150 requests spread over both
 *      instances within one minute give exactly 120 answers and 30 refusals.
 *   2. 5 unfinished media jobs per key: checked under the key's row lock in PostgreSQL, so 8
 *      parallel submissions through both instances start exactly 5 jobs; cancelling them
 *      gives every coin back.
 *   3. Idempotency-Key: 20 parallel identical submissions through both instances make one job,
 *      one hold, one capture; the same key with another body is 422.
 *   4. MCP is stateless: the official SDK client works while its requests alternate between
 *      the instances.
 *   5. The OAuth /token limit per client address (60 a minute) is counted in Redis too.
 * Every test uses fresh keys, so that no count of one test leaks into another.
 */

let tc: TestCluster;
let api: string;

beforeAll(async () => {
  tc = await startTestCluster('limits', { apis: 2, workers: 2 });
  api = `${tc.cluster.url}/api/v1`;
});
afterAll(async () => {
  await tc?.stop();
});

/** Runs `fn(0..n-1)` with at most `concurrency` in flight; results in index order. */
async function pool<T>(n: number, concurrency: number, fn: (i: number) => Promise<T>): Promise<T[]> {
  const results = new Array<T>(n);
  let next = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < n) {
        const i = next++;
        results[i] = await fn(i);
      }
    }),
  );
  return results;
}

/** One answer, read whole: status, which instance, the headers we look at, the JSON body. */
interface Answer {
  status: number;
  upstream: string;
  retryAfter: string | null;
  replayed: string | null;
  body: unknown;
}

async function send(url: string, init: RequestInit = {}): Promise<Answer> {
  const res = await fetch(url, init);
  const text = await res.text();
  let body: unknown = text;
  try {
    body = JSON.parse(text);
  } catch {
    /* not JSON: keep the text */
  }
  return { status: res.status, upstream: upstreamOf(res), retryAfter: res.headers.get('retry-after'), replayed: res.headers.get('idempotent-replayed'), body };
}

const bearer = (key: string) => ({ Authorization: `Bearer ${key}` });
const json = (key: string, extra: Record<string, string> = {}) => ({ ...bearer(key), 'Content-Type': 'application/json', ...extra });

/** How many answers each instance gave: `{ '127.0.0.1:port': n }`. */
function perUpstream(answers: { upstream: string }[]): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const a of answers) counts[a.upstream] = (counts[a.upstream] ?? 0) + 1;
  return counts;
}

/** The two instances nginx balances over, as X-Upstream names them. */
const instances = () => tc.cluster.apis.map((a) => `127.0.0.1:${a.port}`).sort();

async function wallet(accountId: string): Promise<{ spendable: string; held: string }> {
  const { rows } = await tc.sql.query<{ spendable: string; held: string }>(
    'select (subscription_micro + purchased_micro)::text as spendable, held_micro::text as held from wallets where account_id = $1',
    [accountId],
  );
  return rows[0]!;
}

describe('limits across two instances', () => {
  it('150 requests in under a minute on one key, spread over both instances: exactly 120 succeed', async () => {
    const { key } = await tc.fundedKey();
    const started = nowMs();
    const answers = await pool(150, 10, () => send(`${api}/balance`, { headers: bearer(key) }));
    const elapsedMs = nowMs() - started;

    const ok = answers.filter((a) => a.status === 200);
    const limited = answers.filter((a) => a.status === 429);
    process.stderr.write(`[limits] rate limit: ${ok.length} × 200, ${limited.length} × 429 in ${Math.round(elapsedMs)} ms; 200s per instance ${JSON.stringify(perUpstream(ok))}\n`);

    // One fixed window: the first request opened it, and everything fit inside it.
    expect(elapsedMs).toBeLessThan(60_000);
    expect(ok).toHaveLength(120);
    expect(limited).toHaveLength(30);
    for (const a of limited) {
      expect(a.body).toMatchObject({ error: { type: 'rate_limit_error', code: 'rate_limit_exceeded', message: expect.any(String) } });
      expect(Number(a.retryAfter)).toBeGreaterThanOrEqual(1);
      expect(Number(a.retryAfter)).toBeLessThanOrEqual(60);
    }
    // Both instances served from the one shared count.
    expect(Object.keys(perUpstream(ok)).sort()).toEqual(instances());
  });

  it('8 slow jobs on one key through both instances: exactly 5 run, the rest get 429', async () => {
    const { accountId, keyId, key } = await tc.fundedKey();
    const before = await wallet(accountId);
    const body = JSON.stringify({ model: 'mas/image-demo', prompt: 'a slow lighthouse', settings: { delay_ms: 30_000, size: 128 } });
    const answers = await Promise.all(Array.from({ length: 8 }, () => send(`${api}/generations`, { method: 'POST', headers: json(key), body })));

    const accepted = answers.filter((a) => a.status >= 200 && a.status < 300);
    const refused = answers.filter((a) => a.status === 429);
    process.stderr.write(
      `[limits] concurrency: ${accepted.length} accepted ${JSON.stringify(perUpstream(accepted))}, ${refused.length} × 429 ${JSON.stringify(perUpstream(refused))}\n`,
    );
    expect(answers.map((a) => a.status).sort()).toEqual([202, 202, 202, 202, 202, 429, 429, 429]);
    const ids = accepted.map((a) => (a.body as { id: string }).id);
    for (const id of ids) expect(id).toMatch(/^gen_/);
    expect(new Set(ids).size).toBe(5);
    for (const a of refused) {
      expect(a.body).toMatchObject({ error: { type: 'rate_limit_error', code: 'concurrency_limit_exceeded' } });
      expect(Number(a.retryAfter)).toBeGreaterThanOrEqual(1);
    }
    // Round-robin gives each instance 4 of the 8, so the 5 jobs were accepted by both.
    expect(Object.keys(perUpstream(answers)).sort()).toEqual(instances());
    expect(Object.keys(perUpstream(accepted)).sort()).toEqual(instances());

    const { rows: jobs } = await tc.sql.query<{ id: string; status: string }>('select id, status from generations where key_id = $1', [keyId]);
    expect(jobs.map((j) => j.id).sort()).toEqual([...ids].sort());
    for (const j of jobs) expect(['queued', 'running']).toContain(j.status);
    const price = accepted.reduce((sum, a) => sum + Number((a.body as { price_coins: number }).price_coins), 0);
    const held = await wallet(accountId);
    expect(Number(held.held)).toBe(Math.round(price * 1_000_000));

    // Cancel them all (through both instances too): every coin comes back.
    const canceled = await Promise.all(ids.map((id) => send(`${api}/generations/${id}/cancel`, { method: 'POST', headers: bearer(key) })));
    for (const c of canceled) expect(c.body).toMatchObject({ object: 'generation', status: 'canceled', cost_coins: 0 });
    const { rows: after } = await tc.sql.query<{ status: string }>('select status from generations where key_id = $1', [keyId]);
    expect(after.map((j) => j.status)).toEqual(['canceled', 'canceled', 'canceled', 'canceled', 'canceled']);
    expect(await wallet(accountId)).toEqual({ spendable: before.spendable, held: '0' });
    const balance = await send(`${api}/balance`, { headers: bearer(key) });
    expect(balance.body).toMatchObject({ coins: Number(before.spendable) / 1_000_000, held_coins: 0 });
  });

  it('20 parallel submissions with one Idempotency-Key through both instances: one job, one hold, one capture', async () => {
    const { keyId, key } = await tc.fundedKey();
    const idem = { 'Idempotency-Key': `scale-limits-${Date.now()}` };
    const body = JSON.stringify({ model: 'mas/image-demo', prompt: 'one fox, once', settings: { delay_ms: 500, size: 128 } });
    const answers = await Promise.all(Array.from({ length: 20 }, () => send(`${api}/generations`, { method: 'POST', headers: json(key, idem), body })));

    process.stderr.write(`[limits] idempotency: statuses ${JSON.stringify(perUpstream(answers.map((a) => ({ upstream: String(a.status) }))))} per instance ${JSON.stringify(perUpstream(answers))}\n`);
    expect(answers.map((a) => a.status)).toEqual(Array(20).fill(202));
    expect(Object.keys(perUpstream(answers)).sort()).toEqual(instances());
    const ids = new Set(answers.map((a) => (a.body as { id: string }).id));
    expect(ids.size).toBe(1);
    const [id] = [...ids] as [string];
    expect(id).toMatch(/^gen_/);
    // The first answer made the job; the 19 others are its stored answer.
    expect(answers.filter((a) => a.replayed === 'true')).toHaveLength(19);

    const { rows: jobs } = await tc.sql.query<{ id: string; hold_id: string }>('select id, hold_id from generations where key_id = $1', [keyId]);
    expect(jobs).toEqual([{ id, hold_id: expect.any(String) }]);
    const { rows: holds } = await tc.sql.query<{ id: string }>('select id from holds where reference = $1', [id]);
    expect(holds).toEqual([{ id: jobs[0]!.hold_id }]);

    // Wait (on the database, not counting against the key's rate limit) for the job to end.
    let status = 'queued';
    for (let i = 0; i < 240 && (status === 'queued' || status === 'running'); i++) {
      await sleep(250);
      status = (await tc.sql.query<{ status: string }>('select status from generations where id = $1', [id])).rows[0]!.status;
    }
    expect(status).toBe('succeeded');
    const { rows: captures } = await tc.sql.query<{ n: number }>(`select count(*)::int as n from ledger_entries where hold_id = $1 and kind = 'capture'`, [jobs[0]!.hold_id]);
    expect(captures[0]!.n).toBe(1);
    const { rows: hold } = await tc.sql.query<{ status: string }>('select status from holds where id = $1', [jobs[0]!.hold_id]);
    expect(hold[0]!.status).toBe('settled');

    // The same key with another body is refused, and starts nothing.
    const other = JSON.stringify({ model: 'mas/image-demo', prompt: 'another fox', settings: { delay_ms: 500, size: 128 } });
    const reused = await send(`${api}/generations`, { method: 'POST', headers: json(key, idem), body: other });
    expect(reused.status).toBe(422);
    expect(reused.body).toMatchObject({ error: { type: 'idempotency_error', code: 'idempotency_key_reused' } });
    const { rows: count } = await tc.sql.query<{ n: number }>('select count(*)::int as n from generations where key_id = $1', [keyId]);
    expect(count[0]!.n).toBe(1);
  });

  it('MCP is stateless: the SDK client works while its requests alternate between the instances', async () => {
    const { key } = await tc.fundedKey();
    const seen: { method: string; status: number; upstream: string; session: string | null }[] = [];
    const recordingFetch = async (input: string | URL | Request, init?: RequestInit): Promise<Response> => {
      const res = await fetch(input, init);
      seen.push({ method: init?.method ?? 'GET', status: res.status, upstream: upstreamOf(res), session: res.headers.get('mcp-session-id') });
      return res;
    };
    const client = new Client({ name: 'mas-scale-test', version: '1.0.0' });
    const transport = new StreamableHTTPClientTransport(new URL(`${api}/mcp`), { requestInit: { headers: bearer(key) }, fetch: recordingFetch });
    await client.connect(transport);
    try {
      const { tools } = await client.listTools();
      expect(tools.map((t) => t.name)).toEqual(expect.arrayContaining(['get_balance', 'list_models']));
      for (let i = 0; i < 10; i++) {
        const result = (await client.callTool({ name: i % 2 ? 'list_models' : 'get_balance', arguments: {} })) as CallToolResult;
        expect(result.isError ?? false).toBe(false);
        if (i % 2) expect((result.structuredContent as { object: string; data: unknown[] }).data.length).toBeGreaterThan(0);
        else expect(result.structuredContent).toMatchObject({ object: 'balance', coins: 1000 });
      }
    } finally {
      await client.close();
    }
    const posts = seen.filter((s) => s.method === 'POST');
    process.stderr.write(`[limits] mcp: ${posts.length} POSTs, statuses ${JSON.stringify(perUpstream(posts.map((p) => ({ upstream: String(p.status) }))))}, per instance ${JSON.stringify(perUpstream(posts))}\n`);
    // initialize, notifications/initialized, tools/list and 10 tools/call.
    expect(posts).toHaveLength(13);
    for (const p of posts) expect(p.status === 200 || p.status === 202, JSON.stringify(p)).toBe(true);
    expect(posts.every((p) => p.session === null)).toBe(true);
    expect(Object.keys(perUpstream(posts)).sort()).toEqual(instances());
  });

  it('the OAuth /token limit per client address is global: 80 requests through both instances, exactly 60 answered', async () => {
    const form = new URLSearchParams({ grant_type: 'authorization_code', code: 'junk-code', code_verifier: 'junk-verifier-junk-verifier-junk-verifier-1234', client_id: 'junk-client', redirect_uri: 'http://127.0.0.1/cb' });
    const started = nowMs();
    const answers = await pool(80, 10, () =>
      send(`${tc.cluster.url}/token`, { method: 'POST', headers: { 'Content-Type': 'application/x-www-form-urlencoded' }, body: form.toString() }),
    );
    const elapsedMs = nowMs() - started;
    const answered = answers.filter((a) => a.status !== 429);
    const limited = answers.filter((a) => a.status === 429);
    process.stderr.write(
      `[limits] /token: ${answered.length} answered (${[...new Set(answered.map((a) => a.status))].join(', ')}) ${JSON.stringify(perUpstream(answered))}, ${limited.length} × 429 in ${Math.round(elapsedMs)} ms\n`,
    );
    expect(elapsedMs).toBeLessThan(60_000);
    expect(answered).toHaveLength(60);
    expect(limited).toHaveLength(20);
    // The junk is refused as OAuth refuses it, not as a server error.
    for (const a of answered) {
      expect(a.status).toBeGreaterThanOrEqual(400);
      expect(a.status).toBeLessThan(500);
      expect(a.body).toMatchObject({ error: expect.any(String) });
    }
    for (const a of limited) {
      expect(a.body).toMatchObject({ error: 'too_many_requests' });
      expect(Number(a.retryAfter)).toBeGreaterThanOrEqual(1);
    }
    expect(Object.keys(perUpstream(answered)).sort()).toEqual(instances());
    expect(Object.keys(perUpstream(limited)).sort()).toEqual(instances());
  });
});
