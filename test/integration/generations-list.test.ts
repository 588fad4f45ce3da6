import { randomBytes } from 'node:crypto';
import type { MikroORM } from '@mikro-orm/postgresql';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { failJob } from '../../core/generations/end-job.ts';
import { reserve } from '../../core/money/holds.ts';
import { makeAccount, makeKey, openTestOrm } from '../support/db.ts';
import { bearer, getJson, startTestApi } from '../support/http.ts';

/**
 * GET /api/v1/generations (core `generations.list`): the account's jobs, newest first, in the
 * OpenAI list envelope, over real HTTP and real PostgreSQL. The jobs are rows written as the
 * job path leaves them (no worker is needed to list them); an unfinished one's hold is reserved.
 */
let orm: MikroORM;
let api: Awaited<ReturnType<typeof startTestApi>>;
beforeAll(async () => {
  orm = await openTestOrm();
  api = await startTestApi(orm);
});
// The unfinished jobs have no workflow: they are ended (and their holds released) as the file
// ends, so that no other file's sweep meets them later.
const unfinished: string[] = [];
afterAll(async () => {
  for (const id of unfinished) await failJob(orm.em.fork(), id, { code: 'test_cleanup', message: 'The list test is over.' });
  await api.close();
  await orm.close();
});

type Status = 'queued' | 'running' | 'succeeded' | 'failed' | 'canceled';

/** A job row and its hold, `createdAt` as given (several jobs may share one instant: the id breaks the tie). */
async function makeJob(accountId: string, keyId: string, status: Status, createdAt: Date): Promise<string> {
  const id = `gen_${randomBytes(12).toString('hex')}`;
  const hold = `hold_${randomBytes(12).toString('hex')}`;
  const em = orm.em.fork();
  const ended = status !== 'queued' && status !== 'running';
  // An open hold is reserved as the job path reserves it (the wallet holds its coins): the orphan
  // sweep of other test files meets these jobs in the shared database, and releases their holds.
  if (!ended) await reserve(em, { accountId, amount: 5_000_000n, reference: id, holdId: hold, expiresAt: new Date(Date.now() + 3_600_000) });
  else
    await em.execute(
      `insert into holds (id, account_id, amount_micro, from_subscription_micro, from_purchased_micro, status, captured_micro, reference, expires_at, ended_at)
       values (?, ?, 5000000, 0, 5000000, ?, ?, ?, now() + interval '1 hour', now())`,
      [hold, accountId, status === 'succeeded' ? 'settled' : 'released', status === 'succeeded' ? 5_000_000 : 0, id],
    );
  if (!ended) unfinished.push(id);
  await em.execute(
    `insert into generations (id, account_id, key_id, model_id, status, prompt, settings, inputs, price_micro, cost_micro, hold_id, output, error, created_at, completed_at, output_expires_at)
     values (?, ?, ?, 'mas/image-demo', ?, 'a lighthouse', '{"size":128}', '{}', 5000000, ?, ?, ?::jsonb, ?::jsonb, ?, ?, ?)`,
    [
      id,
      accountId,
      keyId,
      status,
      ended ? (status === 'succeeded' ? 5_000_000 : 0) : null,
      hold,
      status === 'succeeded' ? JSON.stringify({ key: `generations/${id}.png`, mime_type: 'image/png', bytes: 123, filename: `${id}.png` }) : null,
      status === 'failed' ? JSON.stringify({ message: 'The provider failed.', code: 'upstream_error' }) : null,
      createdAt,
      ended ? new Date(createdAt.getTime() + 1000) : null,
      status === 'succeeded' ? new Date(Date.now() + 3_600_000) : null,
    ],
  );
  return id;
}

async function customer() {
  const account = await makeAccount(orm, { coins: '100' });
  const key = await makeKey(orm, account.id);
  return { accountId: account.id, keyId: key.id, key: key.key };
}

const list = (key: string, query = '') => getJson(`${api.url}/api/v1/generations${query}`, { headers: bearer(key) });

/** Every page of the list, following `starting_after`. */
async function allPages(key: string, query: string): Promise<{ ids: string[]; pages: number }> {
  const ids: string[] = [];
  let cursor: string | undefined;
  for (let pages = 1; pages < 100; pages++) {
    const res = await list(key, `?${query}${cursor ? `&starting_after=${cursor}` : ''}`);
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(Object.keys(res.body).sort()).toEqual(['data', 'has_more', 'object']);
    expect(res.body.object).toBe('list');
    ids.push(...res.body.data.map((g: { id: string }) => g.id));
    if (!res.body.has_more) return { ids, pages };
    cursor = res.body.data.at(-1).id;
  }
  throw new Error('the list never ended');
}

describe('GET /api/v1/generations', () => {
  it('pages more jobs than a page holds newest first, with no gaps or repeats, ties broken by id', async () => {
    const c = await customer();
    const base = Date.now() - 3_600_000;
    const made: { id: string; at: number }[] = [];
    const statuses: Status[] = ['succeeded', 'failed', 'running', 'queued', 'canceled'];
    for (let i = 0; i < 23; i++) {
      // Every third pair shares an instant, so the order must fall back to the id.
      const at = base + Math.floor(i / 2) * 1000;
      made.push({ id: await makeJob(c.accountId, c.keyId, statuses[i % statuses.length]!, new Date(at)), at });
    }
    const expected = made.sort((a, b) => b.at - a.at || (a.id < b.id ? 1 : -1)).map((j) => j.id);

    const { ids, pages } = await allPages(c.key, 'limit=5');
    expect(pages).toBe(5);
    expect(ids).toEqual(expected);

    // The default page size is 20; has_more says a second page exists.
    const first = await list(c.key);
    expect(first.body.data).toHaveLength(20);
    expect(first.body.has_more).toBe(true);
    expect(first.body.data.map((g: { id: string }) => g.id)).toEqual(expected.slice(0, 20));
    const exact = await list(c.key, '?limit=23');
    expect(exact.body.has_more).toBe(false);
  });

  it('shows each job as GET /generations/{id} does: a succeeded job with a fresh result link', async () => {
    const c = await customer();
    const done = await makeJob(c.accountId, c.keyId, 'succeeded', new Date());
    const res = await list(c.key);
    expect(res.body.data).toHaveLength(1);
    const one = await getJson(`${api.url}/api/v1/generations/${done}`, { headers: bearer(c.key) });
    expect(res.body.data[0]).toEqual(one.body);
    expect(res.body.data[0]).toMatchObject({ id: done, object: 'generation', status: 'succeeded', model: 'mas/image-demo', cost_coins: 5 });
    expect(res.body.data[0].output.url).toContain(`/generations/${done}/output?`);
  });

  it('keeps one status with `status`, paging within it', async () => {
    const c = await customer();
    const base = Date.now() - 60_000;
    const succeeded: string[] = [];
    for (let i = 0; i < 12; i++) {
      const status: Status = i % 3 === 0 ? 'succeeded' : i % 3 === 1 ? 'failed' : 'running';
      const id = await makeJob(c.accountId, c.keyId, status, new Date(base + i * 1000));
      if (status === 'succeeded') succeeded.unshift(id);
    }
    const { ids } = await allPages(c.key, 'status=succeeded&limit=3');
    expect(ids).toEqual(succeeded);
    const running = await list(c.key, '?status=running');
    expect(running.body.data.map((g: { status: string }) => g.status)).toEqual(['running', 'running', 'running', 'running']);
    const none = await list(c.key, '?status=canceled');
    expect(none.body).toEqual({ object: 'list', data: [], has_more: false });
  });

  it("never shows another account's jobs, and takes another account's job as a cursor no more than an unknown one", async () => {
    const a = await customer();
    const b = await customer();
    const theirs = await makeJob(a.accountId, a.keyId, 'succeeded', new Date());
    const mine = await makeJob(b.accountId, b.keyId, 'running', new Date());
    expect((await list(b.key)).body.data.map((g: { id: string }) => g.id)).toEqual([mine]);
    expect((await list(a.key)).body.data.map((g: { id: string }) => g.id)).toEqual([theirs]);
    const foreign = await list(b.key, `?starting_after=${theirs}`);
    const unknown = await list(b.key, '?starting_after=gen_doesnotexist000000000000');
    expect(foreign.status).toBe(404);
    expect(unknown.status).toBe(404);
    expect(foreign.body.error).toMatchObject({ type: 'not_found_error', code: 'generation_not_found', param: null });
    expect(foreign.body.error.message).toBe(`No generation ${theirs}.`);
    expect(unknown.body.error.code).toBe(foreign.body.error.code);
  });

  it('refuses a bad parameter with 400 naming it', async () => {
    const c = await customer();
    for (const [query, param] of [
      ['limit=0', 'limit'],
      ['limit=101', 'limit'],
      ['limit=abc', 'limit'],
      ['limit=1e1', 'limit'],
      ['status=done', 'status'],
      ['status=', 'status'],
      ['starting_after=le_12', 'starting_after'],
      ['starting_after=', 'starting_after'],
      ['starting_after=%20gen_abc', 'starting_after'],
      [`starting_after=gen_${'a'.repeat(65)}`, 'starting_after'],
    ]) {
      const res = await list(c.key, `?${query}`);
      expect(res.status, query).toBe(400);
      expect(res.body.error, query).toMatchObject({ type: 'invalid_request_error', param });
      expect(res.body.error.message, query).toContain(`'${param}'`);
    }
  });

  it('needs a key; POST still starts a job and other methods answer 405', async () => {
    const c = await customer();
    expect((await getJson(`${api.url}/api/v1/generations`)).status).toBe(401);
    // POST reaches the use case (which names the missing field), not a 405.
    const post = await getJson(`${api.url}/api/v1/generations`, { method: 'POST', headers: { ...bearer(c.key), 'content-type': 'application/json' }, body: '{}' });
    expect(post.status).toBe(400);
    expect(post.body.error.param).toBe('model');
    for (const method of ['PUT', 'PATCH', 'DELETE']) {
      const res = await fetch(`${api.url}/api/v1/generations`, { method, headers: bearer(c.key) });
      expect(res.status, method).toBe(405);
      expect(res.headers.get('allow'), method).toBe('GET, POST, HEAD');
    }
    const head = await fetch(`${api.url}/api/v1/generations`, { method: 'HEAD', headers: bearer(c.key) });
    expect(head.status).toBe(200);
  });
});
