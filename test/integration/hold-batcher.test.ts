import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { MikroORM } from '@mikro-orm/postgresql';
import pg from 'pg';
import { statementPool } from '../../adapters/db/statement-pool.ts';
import type { Execute } from '../../core/db/batch.ts';
import { KEY_LOOKUP_SQL, KeyLookup } from '../../core/auth/api-keys.ts';
import { hashKey } from '../../core/keys/key-secret.ts';
import { parseCoins } from '../../core/money/coins.ts';
import { HoldBatcher } from '../../core/money/hold-batcher.ts';
import { isCoreError } from '../../core/errors.ts';
import { toCoreError } from '../../core/trpc.ts';
import { makeAccount, makeKey, openTestOrm, walletInvariants } from '../support/db.ts';

/** Thrown to roll a transaction back on purpose. */
class Rollback extends Error {}

let orm: MikroORM;
let sql: Execute;
beforeAll(async () => {
  orm = await openTestOrm(12);
  sql = statementPool(orm, { max: 8 }).execute;
});
afterAll(() => orm.close());
const soon = () => new Date(Date.now() + 60_000);

/** The executor core uses, counting the statements it sends. */
function countingExecute(): { execute: Execute; statements: string[] } {
  const statements: string[] = [];
  const execute: Execute = (text, params) => {
    statements.push(text);
    return sql(text, params);
  };
  return { execute, statements };
}

describe('batched holds (the chat path)', () => {
  it('sends the calls of one turn as one statement, each item with its own outcome', async () => {
    const { execute, statements } = countingExecute();
    const holds = new HoldBatcher(execute);
    // 5 coins: exactly five of eight reservations of 1 coin fit, whatever order they come in.
    const a = await makeAccount(orm, { coins: '5' });
    const results = await Promise.allSettled(
      Array.from({ length: 8 }, (_, i) => holds.reserve({ accountId: a.id, amount: parseCoins('1'), reference: `r${i}`, expiresAt: soon() })),
    );
    expect(statements.filter((s) => s.includes('mas_reserve_many'))).toHaveLength(1);
    const ok = results.filter((r) => r.status === 'fulfilled').map((r) => r.value.holdId);
    const refused = results.filter((r) => r.status === 'rejected').map((r) => r.reason as unknown);
    expect(ok).toHaveLength(5);
    expect(refused).toHaveLength(3);
    for (const err of refused) expect(isCoreError(err) && err.code === 'insufficient_balance').toBe(true);

    // Settle two for part, release the rest, and end one of them twice: once only counts.
    const endings = await Promise.all([
      holds.settle(ok[0]!, parseCoins('0.25')),
      holds.settle(ok[1]!, parseCoins('1')),
      holds.release(ok[2]!),
      holds.release(ok[3]!),
      holds.release(ok[4]!),
      holds.settle(ok[4]!, parseCoins('1')),
    ]);
    expect(statements.filter((s) => s.includes('mas_end_hold_many'))).toHaveLength(1);
    expect(endings.map((e) => [e.status, e.captured])).toEqual([
      ['settled', parseCoins('0.25')],
      ['settled', parseCoins('1')],
      ['released', 0n],
      ['released', 0n],
      ['released', 0n],
      ['released', 0n],
    ]);
    const w = await walletInvariants(orm, a.id);
    expect(w.balance.purchased).toBe(parseCoins('3.75'));
    expect(w.balance.held).toBe(0n);
    expect(w.ledgerTotal).toBe(w.balance.purchased + w.balance.subscription + w.balance.held);
    expect(w.openHolds).toBe(0n);
  });

  it('reports a refused item without failing the others in its statement', async () => {
    const holds = new HoldBatcher(sql);
    const a = await makeAccount(orm, { coins: '2' });
    const { holdId } = await holds.reserve({ accountId: a.id, amount: parseCoins('1'), reference: 'r', expiresAt: soon() });
    const [unknown, over, fine] = await Promise.allSettled([
      holds.settle('hold_doesnotexist', 0n),
      holds.settle(holdId, parseCoins('2')),
      holds.reserve({ accountId: a.id, amount: parseCoins('1'), reference: 'r2', expiresAt: soon() }),
    ]);
    expect(unknown.status === 'rejected' && isCoreError(unknown.reason) && unknown.reason.code).toBe('not_found');
    expect(over.status === 'rejected' && over.reason).toBeInstanceOf(RangeError);
    expect(fine.status).toBe('fulfilled');
    expect((await walletInvariants(orm, a.id)).balance.held).toBe(parseCoins('2'));
  });

  it('never deadlocks or overspends when batches over the same accounts run at once', async () => {
    // Four batchers (as four API instances would be) hit the same six wallets in different
    // orders; each wallet can pay for exactly 10 holds of 1 coin.
    const batchers = Array.from({ length: 4 }, () => new HoldBatcher(sql));
    const accounts = await Promise.all(Array.from({ length: 6 }, () => makeAccount(orm, { coins: '10' })));
    const attempts = batchers.flatMap((b, n) =>
      Array.from({ length: 30 }, (_, i) => {
        const account = accounts[(n % 2 === 0 ? i : 29 - i) % accounts.length]!;
        return b
          .reserve({ accountId: account.id, amount: parseCoins('1'), reference: `r${n}-${i}`, expiresAt: soon() })
          .then(({ holdId }) => b.settle(holdId, parseCoins('1')).then(() => 'paid' as const))
          .catch((err: unknown) => {
            if (isCoreError(err) && err.code === 'insufficient_balance') return 'refused' as const;
            throw err;
          });
      }),
    );
    const outcomes = await Promise.all(attempts);
    expect(outcomes.filter((o) => o === 'paid')).toHaveLength(60);
    for (const account of accounts) {
      const w = await walletInvariants(orm, account.id);
      expect(w.balance).toMatchObject({ purchased: 0n, subscription: 0n, held: 0n });
      expect(w.ledgerTotal).toBe(0n);
      expect(w.openHolds).toBe(0n);
    }
  });

  it('gives up on a statement stuck behind a lock after the statement timeout, as 503 database_timeout', async () => {
    const holds = new HoldBatcher(statementPool(orm, { statementTimeoutMs: 300 }).execute);
    const a = await makeAccount(orm, { coins: '5' });
    const locker = orm.em.fork();
    await locker.begin();
    try {
      await locker.execute('select 1 from wallets where account_id = ? for update', [a.id]);
      const err = await holds.reserve({ accountId: a.id, amount: parseCoins('1'), reference: 'stuck', expiresAt: soon() }).catch((e: unknown) => e);
      expect(toCoreError(err)).toMatchObject({ code: 'unavailable', reason: 'database_timeout' });
    } finally {
      await locker.rollback();
    }
    // Nothing was reserved, and the next statement goes through.
    expect((await walletInvariants(orm, a.id)).balance.held).toBe(0n);
    await holds.reserve({ accountId: a.id, amount: parseCoins('1'), reference: 'after', expiresAt: soon() });
  });

  it('finds the holds of a batch of endings by index, however small the table was when the plan was made', async () => {
    // PL/pgSQL keeps a statement's plan for the life of the connection. A join of the items to
    // `holds` planned while the table was small scans the whole table on every later settle.
    const client = new pg.Client({ connectionString: orm.config.get('clientUrl') });
    await client.connect();
    try {
      const a = await makeAccount(orm, { coins: '5' });
      const hold = (n: number) => `hold_probe_${a.id}_${n}`;
      for (const n of [1, 2]) {
        await client.query(`select * from mas_reserve($1, $2, 1000, 'probe', now() + interval '1 hour', '{}')`, [hold(n), a.id]);
      }
      const holdScans = async (n: number) => {
        await client.query('begin');
        try {
          const [row] = (await client.query(`select status from mas_end_hold_many($1::jsonb)`, [JSON.stringify([{ i: 0, hold_id: hold(n), actual: '1', outcome: 'settled' }])])).rows;
          expect(row).toMatchObject({ status: 'settled' });
          return Number((await client.query(`select seq_scan from pg_stat_xact_user_tables where relname = 'holds'`)).rows[0].seq_scan);
        } finally {
          await client.query('commit');
        }
      };
      expect(await holdScans(1)).toBe(0);
      await client.query(
        `insert into holds (id, account_id, amount_micro, from_subscription_micro, from_purchased_micro, status, captured_micro, reference, expires_at, ended_at)
         select $2 || g, $1, 1, 0, 1, 'settled', 1, 'filler', now(), now() from generate_series(1, 5000) g`,
        [a.id, `hold_filler_${a.id}_`],
      );
      expect(await holdScans(2)).toBe(0);
    } finally {
      await client.end();
    }
  });

  it('commits reservations without waiting for the disk, and settles with it', async () => {
    // The settle's synchronous commit flushes the WAL up to the reservation it charges (see the
    // migration reserve_commits_async): only a reservation nothing was charged against can be lost.
    const client = new pg.Client({ connectionString: orm.config.get('clientUrl') });
    await client.connect();
    try {
      const a = await makeAccount(orm, { coins: '5' });
      const commitMode = async (sql: string, items: unknown[]) => {
        await client.query('begin');
        try {
          await client.query(sql, [JSON.stringify(items)]);
          return (await client.query('show synchronous_commit')).rows[0].synchronous_commit as string;
        } finally {
          await client.query('commit');
        }
      };
      const hold = `hold_async_${a.id}`;
      const expires = new Date(Date.now() + 60_000).toISOString();
      expect(await commitMode('select * from mas_reserve_many($1::jsonb)', [{ i: 0, hold_id: hold, account_id: a.id, amount: '1000', reference: 'r', expires_at: expires, metadata: {} }])).toBe('off');
      expect(await commitMode('select * from mas_end_hold_many($1::jsonb)', [{ i: 0, hold_id: hold, actual: '10', outcome: 'settled' }])).toBe('on');
      expect((await client.query(`select current_setting('synchronous_commit') as s`)).rows[0].s).toBe('on');
    } finally {
      await client.end();
    }
  });

  it('gives every item the error of a statement that failed', async () => {
    const holds = new HoldBatcher(() => Promise.reject(new Error('connection lost')));
    const results = await Promise.allSettled([holds.release('hold_a'), holds.release('hold_b')]);
    expect(results.map((r) => r.status === 'rejected' && (r.reason as Error).message)).toEqual(['connection lost', 'connection lost']);
  });
});

describe('batched key look-ups', () => {
  it('finds the keys of one turn with one query, and finds no revoked or unknown key', async () => {
    const { execute, statements } = countingExecute();
    const keys = new KeyLookup(execute);
    const a = await makeAccount(orm, { coins: '1' });
    const k1 = await makeKey(orm, a.id);
    const k2 = await makeKey(orm, a.id);
    const revoked = await makeKey(orm, a.id);
    await orm.em.fork().execute('update api_keys set revoked_at = now() where id = ?', [revoked.id]);
    const found = await Promise.all([k1.key, k2.key, k1.key, revoked.key, 'mas_unknown'].map((s) => keys.find(hashKey(s))));
    expect(statements).toHaveLength(1);
    expect(found.map((r) => r?.key_id ?? null)).toEqual([k1.id, k2.id, k1.id, null, null]);
    expect(found[0]).toMatchObject({ account_id: a.id, paid: expect.any(Boolean) });
  });

  it('remembers keys of paid accounts for findRecent; find always asks the database and refreshes the cache', async () => {
    const { execute, statements } = countingExecute();
    const keys = new KeyLookup(execute);
    const paid = await makeAccount(orm, { coins: '1' });
    const unpaid = await makeAccount(orm);
    const kp = await makeKey(orm, paid.id);
    const ku = await makeKey(orm, unpaid.id);
    const lookups = () => statements.filter((s) => s === KEY_LOOKUP_SQL).length;

    expect(await keys.findRecent(hashKey(kp.key))).toMatchObject({ fromCache: false, row: { key_id: kp.id } });
    expect(await keys.findRecent(hashKey(kp.key))).toMatchObject({ fromCache: true, row: { key_id: kp.id, account_id: paid.id, paid: true } });
    expect(lookups()).toBe(1);
    // An unpaid account's key is looked up every time, so that its first top-up counts at once.
    await keys.findRecent(hashKey(ku.key));
    expect(await keys.findRecent(hashKey(ku.key))).toMatchObject({ fromCache: false, row: { key_id: ku.id, paid: false } });
    expect(lookups()).toBe(3);
    // `find` never answers from the cache, and a key it no longer finds leaves the cache.
    await orm.em.fork().execute('update api_keys set revoked_at = now() where id = ?', [kp.id]);
    expect(await keys.find(hashKey(kp.key))).toBeNull();
    expect(await keys.findRecent(hashKey(kp.key))).toEqual({ fromCache: false, row: null });
    expect(lookups()).toBe(5);
  });

  it('refuses to reserve for a key that is no longer active, in the same statement', async () => {
    const { execute, statements } = countingExecute();
    const holds = new HoldBatcher(execute);
    const a = await makeAccount(orm, { coins: '2' });
    const active = await makeKey(orm, a.id);
    const revoked = await makeKey(orm, a.id);
    const other = await makeKey(orm, (await makeAccount(orm, { coins: '2' })).id);
    await orm.em.fork().execute('update api_keys set revoked_at = now() where id = ?', [revoked.id]);
    const input = (activeKeyId: string) => ({ accountId: a.id, activeKeyId, amount: parseCoins('1'), reference: 'r', expiresAt: soon() });
    const [ok, refused, foreign] = await Promise.allSettled([holds.reserve(input(active.id)), holds.reserve(input(revoked.id)), holds.reserve(input(other.id))]);
    expect(statements).toHaveLength(1);
    expect(ok.status).toBe('fulfilled');
    for (const r of [refused, foreign]) expect(r.status === 'rejected' && isCoreError(r.reason) && r.reason.code).toBe('unauthorized');
    expect((await walletInvariants(orm, a.id)).balance.held).toBe(parseCoins('1'));
  });

  it('probes the unique index on key_hash, not every active key', async () => {
    // On a small test table the planner may scan anyway; with scans discouraged the plan
    // shows which index the statement can use (a lookup through `in (select …)` could not).
    // The table gets a thousand active keys and statistics first (rolled back): on a nearly empty,
    // never analyzed table the planner's guess of its size comes from the row width, and scanning
    // the small partial index of active keys looked as cheap as the probe.
    const account = await makeAccount(orm);
    const em = orm.em.fork();
    await em.transactional(async (tx) => {
      await tx.execute(
        `insert into api_keys (id, account_id, name, prefix, key_hash)
         select 'key_plan' || g || '_' || md5(random()::text), ?, 'plan', 'mas_plan', md5(random()::text) || md5(random()::text) from generate_series(1, 1000) g`,
        [account.id],
      );
      await tx.execute('analyze api_keys');
      await tx.execute('set local enable_seqscan = off');
      const plan = await tx.execute<{ 'QUERY PLAN': string }[]>(`explain ${KEY_LOOKUP_SQL.replace('$1', '?')}`, [`{${hashKey('mas_x')}}`]);
      expect(plan.map((r) => r['QUERY PLAN']).join('\n')).toMatch(/api_keys_key_hash_key/);
      throw new Rollback();
    }).catch((err: unknown) => {
      if (!(err instanceof Rollback)) throw err;
    });
  });
});
