import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { MikroORM } from '@mikro-orm/postgresql';
import pg from 'pg';
import { makeAccount, makeKey, openTestOrm } from '../support/db.ts';

/**
 * The batched functions (chat) and the single-hold functions (jobs, the sweep) must move money
 * the same way. Random batches run through mas_reserve_many / mas_end_hold_many for one pair of
 * accounts, and one item at a time through mas_reserve / mas_end_hold, in the order the batched
 * functions take them, for a twin pair; every answer, wallet, hold and ledger entry must agree.
 */
type KeyChoice = 'none' | 'active' | 'revoked' | 'foreign';
type ReserveItem = { account: 0 | 1; amount: bigint; key: KeyChoice; reuse: number | null };
type EndItem = { hold: number; fraction: number; outcome: 'settled' | 'released'; over: boolean };
type Batch = { kind: 'reserve'; items: ReserveItem[] } | { kind: 'end'; items: EndItem[] };

const reserveItem: fc.Arbitrary<ReserveItem> = fc.record({
  account: fc.constantFrom(0 as const, 1 as const),
  amount: fc.oneof(fc.constant(0n), fc.bigInt({ min: 1n, max: 4_000_000n })),
  key: fc.constantFrom<KeyChoice>('none', 'active', 'active', 'revoked', 'foreign'),
  // Now and then the id of a hold made before (or earlier in the same batch): `exists`.
  reuse: fc.option(fc.nat(30), { freq: 8 }),
});
const endItem: fc.Arbitrary<EndItem> = fc.record({
  hold: fc.nat(30),
  fraction: fc.integer({ min: 0, max: 100 }),
  outcome: fc.constantFrom('settled' as const, 'released' as const),
  over: fc.oneof({ weight: 4, arbitrary: fc.constant(false) }, { weight: 1, arbitrary: fc.constant(true) }),
});
const batch: fc.Arbitrary<Batch> = fc.oneof(
  fc.record({ kind: fc.constant('reserve' as const), items: fc.array(reserveItem, { minLength: 1, maxLength: 8 }) }),
  fc.record({ kind: fc.constant('end' as const), items: fc.array(endItem, { minLength: 1, maxLength: 8 }) }),
);
const pockets = fc.record({ sub: fc.bigInt({ min: 0n, max: 6_000_000n }), pur: fc.bigInt({ min: 0n, max: 6_000_000n }) });

interface Side {
  accounts: [string, string];
  keys: { active: [string, string]; revoked: [string, string] };
  prefix: string;
  holds: { id: string; amount: bigint }[];
}

let orm: MikroORM;
let client: pg.Client;
beforeAll(async () => {
  orm = await openTestOrm();
  client = new pg.Client({ connectionString: orm.config.get('clientUrl') });
  await client.connect();
});
afterAll(async () => {
  await client.end();
  await orm.close();
});

let run = 0;
async function makeSide(tag: string, start: [{ sub: bigint; pur: bigint }, { sub: bigint; pur: bigint }]): Promise<Side> {
  const accounts = [(await makeAccount(orm)).id, (await makeAccount(orm)).id] as [string, string];
  const keys = { active: ['', ''] as [string, string], revoked: ['', ''] as [string, string] };
  for (const n of [0, 1] as const) {
    for (const [pocket, amount] of [['subscription', start[n].sub], ['purchased', start[n].pur]] as const) {
      if (amount > 0n) {
        await client.query(`select * from mas_credit($1, $2, $3, $4, 'eq', $5, 'eq')`, [accounts[n], pocket, pocket === 'purchased' ? 'topup' : 'subscription_grant', amount.toString(), `eq:${accounts[n]}:${pocket}`]);
      }
    }
    keys.active[n] = (await makeKey(orm, accounts[n])).id;
    keys.revoked[n] = (await makeKey(orm, accounts[n])).id;
    await client.query('update api_keys set revoked_at = now() where id = $1', [keys.revoked[n]]);
  }
  // Same length on both sides, so hold ids sort the same way.
  return { accounts, keys, prefix: `hold_eq${tag}_${String(run).padStart(4, '0')}_`, holds: [] };
}

const holdId = (side: Side, n: number) => side.prefix + String(n).padStart(3, '0');

async function reservePayload(side: Side, items: ReserveItem[]) {
  const expires = new Date(Date.now() + 3_600_000).toISOString();
  // Only ids of holds that exist before the batch are reused: within a batch, which of the two
  // accounts comes first depends on their ids, which do not sort alike on the two sides.
  const existing = (await client.query('select id from holds where id like $1 order by id', [`${side.prefix}%`])).rows.map((r) => r.id as string);
  return items.map((x, i) => {
    const reusedId = x.reuse !== null && existing.length > 0 ? existing[x.reuse % existing.length] : undefined;
    const reused = reusedId ? side.holds.find((h) => h.id === reusedId) : undefined;
    const id = reused?.id ?? holdId(side, side.holds.length);
    if (!reused) side.holds.push({ id, amount: x.amount });
    const key = { none: null, active: side.keys.active[x.account], revoked: side.keys.revoked[x.account], foreign: side.keys.active[1 - x.account] }[x.key];
    return { i, hold_id: id, account_id: side.accounts[x.account], account: x.account, amount: x.amount.toString(), reference: `ref-${id.slice(-3)}`, expires_at: expires, metadata: { n: i }, key_id: key };
  });
}

function endPayload(side: Side, items: EndItem[]) {
  return items.map((x, i) => {
    const known = side.holds[x.hold];
    const amount = known?.amount ?? 1000n;
    const actual = x.outcome === 'released' ? 0n : x.over ? amount + 1n : (amount * BigInt(x.fraction)) / 100n;
    return { i, hold_id: known?.id ?? holdId(side, 900 + x.hold), actual: actual.toString(), outcome: x.outcome };
  });
}

type Row = Record<string, string | number | null>;
const norm = (rows: Row[]) => rows.map((r) => Object.fromEntries(Object.entries(r).map(([k, v]) => [k, v === null ? null : String(v)]))).sort((a, b) => Number(a.i) - Number(b.i));

async function viaBatch(side: Side, b: Batch): Promise<Row[]> {
  if (b.kind === 'reserve') {
    const payload = (await reservePayload(side, b.items)).map(({ account: _a, ...rest }) => rest);
    return (await client.query('select i, status, available from mas_reserve_many($1::jsonb)', [JSON.stringify(payload)])).rows;
  }
  const payload = endPayload(side, b.items);
  return (await client.query('select i, status, captured, amount from mas_end_hold_many($1::jsonb)', [JSON.stringify(payload)])).rows;
}

/**
 * One item at a time, in the order the batched functions take them within an account: by i
 * (reserve), or by hold id, then i (end). The order between the two accounts does not matter
 * (they share nothing), and it may differ, since the sides' account ids do not sort alike.
 */
async function viaSingles(side: Side, b: Batch): Promise<Row[]> {
  const out: Row[] = [];
  if (b.kind === 'reserve') {
    const items = (await reservePayload(side, b.items)).sort((p, q) => p.account - q.account || p.i - q.i);
    for (const x of items) {
      if (x.key_id !== null) {
        const active = await client.query('select 1 from api_keys where id = $1 and account_id = $2 and revoked_at is null', [x.key_id, x.account_id]);
        if (active.rowCount === 0) {
          out.push({ i: x.i, status: 'key_revoked', available: null });
          continue;
        }
      }
      const [r] = (await client.query('select status, available from mas_reserve($1, $2, $3, $4, $5, $6)', [x.hold_id, x.account_id, x.amount, x.reference, x.expires_at, JSON.stringify(x.metadata)])).rows;
      out.push({ i: x.i, ...r });
    }
    return out;
  }
  const payload = endPayload(side, b.items);
  const owners = new Map<string, string>(
    (await client.query('select id, account_id from holds where id = any($1)', [payload.map((x) => x.hold_id)])).rows.map((r) => [r.id, r.account_id]),
  );
  const key = (x: (typeof payload)[number]) => `${owners.get(x.hold_id) ?? '~'}|${x.hold_id}`;
  const items = payload.sort((p, q) => (key(p) < key(q) ? -1 : key(p) > key(q) ? 1 : p.i - q.i));
  for (const x of items) {
    const [r] = (await client.query('select status, captured, amount from mas_end_hold($1, $2, $3)', [x.hold_id, x.actual, x.outcome])).rows;
    out.push({ i: x.i, ...r });
  }
  return out;
}

async function state(side: Side) {
  const per = [];
  for (const account of side.accounts) {
    const wallet = (await client.query('select subscription_micro::text, purchased_micro::text, held_micro::text from wallets where account_id = $1', [account])).rows[0];
    const holds = (await client.query(
      `select right(id, 3) as n, status, amount_micro::text, from_subscription_micro::text, from_purchased_micro::text, captured_micro::text, reference, metadata, (ended_at is null) as open
       from holds where account_id = $1 order by id`, [account])).rows;
    const ledger = (await client.query(
      `select pocket, kind, amount_micro::text, balance_after_micro::text, reference, right(hold_id, 3) as hold, right(idempotency_key, length(idempotency_key) - length(coalesce(hold_id, ''))) as key, description
       from ledger_entries where account_id = $1 and hold_id is not null order by id`, [account])).rows;
    per.push({ wallet, holds, ledger });
  }
  return per;
}

describe('batched and single-hold functions', () => {
  it('give the same answers and write the same rows for random batches', async () => {
    await fc.assert(
      fc.asyncProperty(fc.tuple(pockets, pockets), fc.array(batch, { minLength: 1, maxLength: 8 }), async (start, batches) => {
        run++;
        const batched = await makeSide('B', start);
        const single = await makeSide('S', start);
        for (const b of batches) {
          const a = norm(await viaBatch(batched, b));
          const s = norm(await viaSingles(single, b));
          expect(a).toEqual(s);
        }
        expect(await state(batched)).toEqual(await state(single));
      }),
      { numRuns: 60 },
    );
  });
});
