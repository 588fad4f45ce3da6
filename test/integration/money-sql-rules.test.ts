import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type { MikroORM } from '@mikro-orm/postgresql';
import pg from 'pg';
import { newId, randomBase62 } from '../../core/ids.ts';
import { createKey } from '../../core/keys/keys.ts';
import { makeAccount, makeKey, openTestOrm, uniqueEmail, walletInvariants } from '../support/db.ts';

/**
 * The rules of the SQL money functions (core/money/money.sql) at their edges, called directly:
 * exact fits, one micro-coin over, odd amounts split across pockets, the order of the pockets,
 * the checks a caller never trips through the TypeScript wrappers. Each rule here is one that a
 * mutant of scripts/sql-mutation.ts (`npm run test:mutation`) broke without another test noticing.
 */
let orm: MikroORM;
let db: pg.Client;
beforeAll(async () => {
  orm = await openTestOrm();
  db = new pg.Client({ connectionString: orm.config.get('clientUrl') });
  await db.connect();
});
afterAll(async () => {
  await db.end();
  await orm.close();
});

const inAnHour = () => new Date(Date.now() + 3_600_000).toISOString();
const holdId = () => `hold_rules_${randomBase62(12)}`;

/** An account with these micro-coins in its pockets (credited through mas_credit). */
async function account(sub: bigint, pur: bigint): Promise<string> {
  const id = (await makeAccount(orm)).id;
  if (sub > 0n) await db.query(`select * from mas_credit($1, 'subscription', 'subscription_grant', $2, 'rules', $3, 'Subscription coins')`, [id, sub.toString(), `rules-sub:${id}`]);
  if (pur > 0n) await db.query(`select * from mas_credit($1, 'purchased', 'topup', $2, 'rules', $3, 'Top-up')`, [id, pur.toString(), `rules-pur:${id}`]);
  return id;
}

async function wallet(accountId: string) {
  const { rows } = await db.query<{ sub: string; pur: string; held: string }>(
    'select subscription_micro::text as sub, purchased_micro::text as pur, held_micro::text as held from wallets where account_id = $1',
    [accountId],
  );
  return { sub: BigInt(rows[0]!.sub), pur: BigInt(rows[0]!.pur), held: BigInt(rows[0]!.held) };
}

async function reserve(id: string, accountId: string, amount: bigint, metadata: Record<string, unknown> = {}) {
  const { rows } = await db.query<{ status: string; available: string | null }>('select status, available::text from mas_reserve($1, $2, $3, $4, $5, $6)', [
    id,
    accountId,
    amount.toString(),
    'rules',
    inAnHour(),
    JSON.stringify(metadata),
  ]);
  return rows[0]!;
}

async function reserveMany(items: { hold: string; accountId: string; amount: bigint; metadata?: Record<string, unknown>; keyId?: string }[]) {
  const payload = items.map((x, i) => ({
    i,
    hold_id: x.hold,
    account_id: x.accountId,
    amount: x.amount.toString(),
    reference: 'rules',
    expires_at: inAnHour(),
    metadata: x.metadata ?? {},
    key_id: x.keyId ?? null,
  }));
  const { rows } = await db.query<{ i: number; status: string; available: string | null }>('select i, status, available::text from mas_reserve_many($1::jsonb) order by i', [
    JSON.stringify(payload),
  ]);
  return rows;
}

async function endHold(id: string, actual: bigint, outcome: string) {
  const { rows } = await db.query<{ status: string; captured: string | null; amount: string | null }>('select status, captured::text, amount::text from mas_end_hold($1, $2, $3)', [
    id,
    actual.toString(),
    outcome,
  ]);
  return rows[0]!;
}

async function adjust(accountId: string, kind: string, amount: bigint) {
  const { rows } = await db.query<{ status: string; available: string | null }>('select status, available::text from mas_adjust($1, $2, $3, $4, $5, $6)', [
    accountId,
    kind,
    amount.toString(),
    'rules',
    `rules-adjust:${randomBase62(12)}`,
    'Adjustment',
  ]);
  return rows[0]!;
}

/** The ledger still sums to the wallet, pocket by pocket. */
async function expectBalanced(accountId: string) {
  const s = await walletInvariants(orm, accountId);
  expect(s.ledgerByPocket).toEqual({ subscription: s.balance.subscription, purchased: s.balance.purchased, held: s.balance.held });
  expect(s.openHolds).toBe(s.balance.held);
}

/** An app connection with this spend cap (micro-coins), on a key of its own. */
async function appConnection(accountId: string, capMicro: bigint): Promise<{ id: string; keyId: string }> {
  const key = await makeKey(orm, accountId);
  const id = `app_rules_${randomBase62(12)}`;
  await db.query(
    `insert into app_connections (id, account_id, key_id, client_id, client_name, redirect_host, spend_cap_micro) values ($1, $2, $3, 'https://app.example/client', 'Rules app', 'app.example', $4)`,
    [id, accountId, key.id, capMicro.toString()],
  );
  return { id, keyId: key.id };
}

const spendRoom = async (connectionId: string) => BigInt((await db.query<{ room: string }>('select mas_app_spend_room($1)::text as room', [connectionId])).rows[0]!.room);

describe('reservations', () => {
  it('reserve exactly the spendable balance, one hold or in a batch; one micro-coin more is refused', async () => {
    const a = await account(2n, 3n);
    expect(await reserve(holdId(), a, 6n)).toEqual({ status: 'insufficient', available: '5' });
    expect(await reserve(holdId(), a, 5n)).toEqual({ status: 'reserved', available: '0' });
    expect(await wallet(a)).toEqual({ sub: 0n, pur: 0n, held: 5n });

    const b = await account(2n, 3n);
    expect((await reserveMany([{ hold: holdId(), accountId: b, amount: 6n }]))[0]).toMatchObject({ status: 'insufficient', available: '5' });
    expect((await reserveMany([{ hold: holdId(), accountId: b, amount: 5n }]))[0]).toMatchObject({ status: 'reserved', available: '0' });
    expect(await wallet(b)).toEqual({ sub: 0n, pur: 0n, held: 5n });
    await expectBalanced(a);
    await expectBalanced(b);
  });

  it('a repeated hold id is the same hold, even when the wallet could no longer pay for it', async () => {
    const a = await account(0n, 10n);
    const id = holdId();
    expect(await reserve(id, a, 8n)).toEqual({ status: 'reserved', available: '2' });
    expect(await reserve(id, a, 8n)).toEqual({ status: 'exists', available: '2' });
    expect((await reserveMany([{ hold: id, accountId: a, amount: 8n }]))[0]).toMatchObject({ status: 'exists' });
    expect(await wallet(a)).toEqual({ sub: 0n, pur: 2n, held: 8n });
    await expectBalanced(a);
  });

  it('a batched reservation with a revoked key holds nothing', async () => {
    const a = await account(0n, 10n);
    const key = await makeKey(orm, a);
    await db.query('update api_keys set revoked_at = now() where id = $1', [key.id]);
    expect((await reserveMany([{ hold: holdId(), accountId: a, amount: 1n, keyId: key.id }]))[0]).toMatchObject({ status: 'key_revoked', available: null });
    expect(await wallet(a)).toEqual({ sub: 0n, pur: 10n, held: 0n });
  });
});

describe('ending a hold', () => {
  it('an odd capture split across pockets: subscription first, each pocket to the micro-coin, one hold or in a batch', async () => {
    for (const batched of [false, true]) {
      const a = await account(3n, 10n);
      const id = holdId();
      expect(await reserve(id, a, 9n)).toMatchObject({ status: 'reserved' });
      // 3 from subscription, 6 from purchased; capture 8: 3 subscription + 5 purchased, 1 purchased back.
      const out = batched
        ? (await db.query('select status, captured::text, amount::text from mas_end_hold_many($1::jsonb)', [JSON.stringify([{ i: 0, hold_id: id, actual: '8', outcome: 'settled' }])])).rows[0]
        : await endHold(id, 8n, 'settled');
      expect(out).toEqual({ status: 'settled', captured: '8', amount: '9' });
      expect(await wallet(a)).toEqual({ sub: 0n, pur: 5n, held: 0n });
      const { rows } = await db.query('select pocket, kind, amount_micro::text as amount, balance_after_micro::text as after from ledger_entries where hold_id = $1 order by id', [id]);
      expect(rows.slice(3)).toEqual([
        { pocket: 'held', kind: 'capture', amount: '-8', after: '1' },
        { pocket: 'held', kind: 'release', amount: '-1', after: '0' },
        { pocket: 'purchased', kind: 'release', amount: '1', after: '5' },
      ]);
      await expectBalanced(a);
    }
  });

  it('a capture of the whole hold is allowed; one micro-coin more is refused and the hold stays open', async () => {
    const a = await account(0n, 10n);
    const id = holdId();
    await reserve(id, a, 7n);
    expect(await endHold(id, 8n, 'settled')).toEqual({ status: 'invalid_amount', captured: null, amount: '7' });
    expect(await endHold(id, 7n, 'settled')).toEqual({ status: 'settled', captured: '7', amount: '7' });
    const b = holdId();
    await reserve(b, a, 3n);
    const many = (actual: bigint) =>
      db.query('select status, captured::text, amount::text from mas_end_hold_many($1::jsonb)', [JSON.stringify([{ i: 0, hold_id: b, actual: actual.toString(), outcome: 'settled' }])]);
    expect((await many(4n)).rows[0]).toEqual({ status: 'invalid_amount', captured: null, amount: '3' });
    expect((await many(3n)).rows[0]).toEqual({ status: 'settled', captured: '3', amount: '3' });
    expect(await wallet(a)).toEqual({ sub: 0n, pur: 0n, held: 0n });
    await expectBalanced(a);
  });

  it('a release captures nothing: a release with an amount is refused', async () => {
    const a = await account(0n, 10n);
    const id = holdId();
    await reserve(id, a, 4n);
    expect(await endHold(id, 1n, 'released')).toEqual({ status: 'invalid_amount', captured: null, amount: '4' });
    const many = await db.query('select status from mas_end_hold_many($1::jsonb)', [JSON.stringify([{ i: 0, hold_id: id, actual: '1', outcome: 'released' }])]);
    expect(many.rows[0]).toEqual({ status: 'invalid_amount' });
    expect(await endHold(id, 0n, 'released')).toEqual({ status: 'released', captured: '0', amount: '4' });
    expect(await wallet(a)).toEqual({ sub: 0n, pur: 10n, held: 0n });
  });
});

describe('adjustments and refunds (mas_adjust)', () => {
  it('down: purchased coins first, then subscription coins; exactly the spendable balance may go, one micro-coin more is refused', async () => {
    const a = await account(4n, 3n);
    expect(await adjust(a, 'adjustment', -5n)).toMatchObject({ status: 'applied', available: '2' });
    expect(await wallet(a)).toEqual({ sub: 2n, pur: 0n, held: 0n });
    expect(await adjust(a, 'adjustment', -3n)).toMatchObject({ status: 'insufficient', available: '2' });
    expect(await adjust(a, 'adjustment', -2n)).toMatchObject({ status: 'applied', available: '0' });
    expect(await wallet(a)).toEqual({ sub: 0n, pur: 0n, held: 0n });
    await expectBalanced(a);
  });

  it('a refund is positive; an adjustment is never 0', async () => {
    const a = await account(0n, 5n);
    await expect(adjust(a, 'refund', -1n)).rejects.toThrow(/refund must be positive/);
    await expect(adjust(a, 'adjustment', 0n)).rejects.toThrow(/must not be 0/);
    expect(await adjust(a, 'refund', 2n)).toMatchObject({ status: 'applied', available: '7' });
    expect(await wallet(a)).toEqual({ sub: 0n, pur: 7n, held: 0n });
  });
});

describe("an app's spend cap", () => {
  it('counts open holds and what settled holds captured, not what they released', async () => {
    const a = await account(0n, 100n);
    const app = await appConnection(a, 50n);
    const open = holdId();
    expect(await reserve(open, a, 10n, { app_connection_id: app.id })).toMatchObject({ status: 'reserved' });
    expect(await spendRoom(app.id)).toBe(40n);
    const settled = holdId();
    expect(await reserve(settled, a, 20n, { app_connection_id: app.id })).toMatchObject({ status: 'reserved' });
    expect(await endHold(settled, 15n, 'settled')).toMatchObject({ status: 'settled' });
    expect(await spendRoom(app.id)).toBe(25n);
    const released = holdId();
    expect(await reserve(released, a, 5n, { app_connection_id: app.id })).toMatchObject({ status: 'reserved' });
    expect(await endHold(released, 0n, 'released')).toMatchObject({ status: 'released' });
    expect(await spendRoom(app.id)).toBe(25n);
  });

  it('a reservation that fits the room exactly is made; one micro-coin more is refused, one hold or in a batch', async () => {
    const a = await account(0n, 100n);
    const app = await appConnection(a, 30n);
    expect(await reserve(holdId(), a, 11n, { app_connection_id: app.id })).toMatchObject({ status: 'reserved' });
    expect(await reserve(holdId(), a, 20n, { app_connection_id: app.id })).toEqual({ status: 'spend_cap_reached', available: '19' });
    expect((await reserveMany([{ hold: holdId(), accountId: a, amount: 20n, metadata: { app_connection_id: app.id }, keyId: app.keyId }]))[0]).toMatchObject({
      status: 'spend_cap_reached',
      available: '19',
    });
    expect(await reserve(holdId(), a, 19n, { app_connection_id: app.id })).toMatchObject({ status: 'reserved' });
    expect(await spendRoom(app.id)).toBe(0n);

    const b = await account(0n, 100n);
    const batchApp = await appConnection(b, 30n);
    expect((await reserveMany([{ hold: holdId(), accountId: b, amount: 31n, metadata: { app_connection_id: batchApp.id }, keyId: batchApp.keyId }]))[0]).toMatchObject({
      status: 'spend_cap_reached',
      available: '30',
    });
    expect((await reserveMany([{ hold: holdId(), accountId: b, amount: 30n, metadata: { app_connection_id: batchApp.id }, keyId: batchApp.keyId }]))[0]).toMatchObject({
      status: 'reserved',
    });
    expect(await wallet(b)).toEqual({ sub: 0n, pur: 70n, held: 30n });
  });
});

/** A standard key with this spend limit (micro-coins) and period. */
async function limitedKey(accountId: string, limitMicro: bigint, period: 'total' | 'monthly' = 'total'): Promise<string> {
  const key = await makeKey(orm, accountId);
  await db.query('update api_keys set spend_limit_micro = $2, spend_limit_period = $3 where id = $1', [key.id, limitMicro.toString(), period]);
  return key.id;
}
const keyRoom = async (keyId: string) => {
  const room = (await db.query<{ room: string | null }>('select mas_key_spend_room($1)::text as room', [keyId])).rows[0]!.room;
  return room === null ? null : BigInt(room);
};

describe("a key's spend limit", () => {
  it('counts open holds and what settled holds captured, not what they released; no limit: no room to count', async () => {
    const a = await account(0n, 100n);
    const key = await limitedKey(a, 50n);
    const open = holdId();
    expect(await reserve(open, a, 10n, { key_id: key })).toMatchObject({ status: 'reserved' });
    expect(await keyRoom(key)).toBe(40n);
    const settled = holdId();
    expect(await reserve(settled, a, 20n, { key_id: key })).toMatchObject({ status: 'reserved' });
    expect(await endHold(settled, 15n, 'settled')).toMatchObject({ status: 'settled' });
    expect(await keyRoom(key)).toBe(25n);
    const released = holdId();
    expect(await reserve(released, a, 5n, { key_id: key })).toMatchObject({ status: 'reserved' });
    expect(await endHold(released, 0n, 'released')).toMatchObject({ status: 'released' });
    expect(await keyRoom(key)).toBe(25n);
    // Another key's holds do not count.
    const other = (await makeKey(orm, a)).id;
    expect(await reserve(holdId(), a, 60n, { key_id: other })).toMatchObject({ status: 'reserved' });
    expect(await keyRoom(key)).toBe(25n);
    expect(await keyRoom(other)).toBeNull();
    await expectBalanced(a);
  });

  it('a reservation that fits the room exactly is made; one micro-coin more is refused, one hold or in a batch', async () => {
    const a = await account(0n, 100n);
    const key = await limitedKey(a, 30n);
    expect(await reserve(holdId(), a, 11n, { key_id: key })).toMatchObject({ status: 'reserved' });
    expect(await reserve(holdId(), a, 20n, { key_id: key })).toEqual({ status: 'key_spend_limit_reached', available: '19' });
    expect((await reserveMany([{ hold: holdId(), accountId: a, amount: 20n, metadata: { key_id: key }, keyId: key }]))[0]).toMatchObject({
      status: 'key_spend_limit_reached',
      available: '19',
    });
    expect(await reserve(holdId(), a, 19n, { key_id: key })).toMatchObject({ status: 'reserved' });
    expect(await keyRoom(key)).toBe(0n);
    expect(await wallet(a)).toEqual({ sub: 0n, pur: 70n, held: 30n });
    await expectBalanced(a);
  });

  it('within one batch, each item sees the holds the items before it made', async () => {
    const a = await account(0n, 100n);
    const key = await limitedKey(a, 25n);
    const rows = await reserveMany([10n, 10n, 10n, 5n].map((amount) => ({ hold: holdId(), accountId: a, amount, metadata: { key_id: key }, keyId: key })));
    expect(rows.map((r) => r.status)).toEqual(['reserved', 'reserved', 'key_spend_limit_reached', 'reserved']);
    expect(rows[2]!.available).toBe('5');
    expect(await wallet(a)).toEqual({ sub: 0n, pur: 75n, held: 25n });
    await expectBalanced(a);
  });

  it('a repeated reservation of a hold already made answers exists, even with the limit reached', async () => {
    const a = await account(0n, 100n);
    const key = await limitedKey(a, 10n);
    const id = holdId();
    expect(await reserve(id, a, 10n, { key_id: key })).toMatchObject({ status: 'reserved' });
    expect(await reserve(id, a, 10n, { key_id: key })).toMatchObject({ status: 'exists' });
    expect(await wallet(a)).toEqual({ sub: 0n, pur: 90n, held: 10n });
  });

  it('monthly: only what settled since the first instant of this month (UTC) counts', async () => {
    const a = await account(0n, 100n);
    const key = await limitedKey(a, 50n, 'monthly');
    const insertSettled = (captured: bigint, endedAt: string) =>
      db.query(
        `insert into holds (id, account_id, amount_micro, from_subscription_micro, from_purchased_micro, status, captured_micro, reference, metadata, expires_at, created_at, ended_at)
         values ($1, $2, $3, 0, $3, 'settled', $3, 'rules', $4::jsonb, now(), ${endedAt}, ${endedAt})`,
        [holdId(), a, captured.toString(), JSON.stringify({ key_id: key })],
      );
    await insertSettled(40n, `date_trunc('month', now(), 'UTC') - interval '1 microsecond'`);
    expect(await keyRoom(key)).toBe(50n);
    await insertSettled(7n, `date_trunc('month', now(), 'UTC')`);
    expect(await keyRoom(key)).toBe(43n);
    await db.query(`update api_keys set spend_limit_period = 'total' where id = $1`, [key]);
    expect(await keyRoom(key)).toBe(3n);
    expect(await reserve(holdId(), a, 4n, { key_id: key })).toEqual({ status: 'key_spend_limit_reached', available: '3' });
  });

  it('an expired key reserves nothing in a batch (key_revoked)', async () => {
    const a = await account(0n, 100n);
    const key = (await makeKey(orm, a)).id;
    await db.query(`update api_keys set expires_at = now() + interval '1 hour' where id = $1`, [key]);
    expect((await reserveMany([{ hold: holdId(), accountId: a, amount: 1n, metadata: { key_id: key }, keyId: key }]))[0]).toMatchObject({ status: 'reserved' });
    await db.query(`update api_keys set expires_at = now() - interval '1 second' where id = $1`, [key]);
    expect((await reserveMany([{ hold: holdId(), accountId: a, amount: 1n, metadata: { key_id: key }, keyId: key }]))[0]).toMatchObject({ status: 'key_revoked' });
    expect(await wallet(a)).toEqual({ sub: 0n, pur: 99n, held: 1n });
  });
  it('a key without a limit: a reservation reads none of its past holds (one at a time or in a batch); with a limit it sums them', async () => {
    // The hot path's regression of issue 34 (bench/RESULTS.md, "Chat throughput after issue 34"):
    // every batched reservation summed all the settled holds of its key, limit or not.
    const a = await account(0n, 1000n);
    const free = (await makeKey(orm, a)).id;
    const limited = await limitedKey(a, 1000n);
    for (const key of [free, limited]) {
      await db.query(
        `insert into holds (id, account_id, amount_micro, from_subscription_micro, from_purchased_micro, status, captured_micro, reference, metadata, expires_at, created_at, ended_at)
         select 'hold_rules_past_' || $1 || '_' || n, $2, 1, 0, 1, 'settled', 1, 'rules', jsonb_build_object('key_id', $1::text), now(), now(), now() from generate_series(1, 40) n`,
        [key, a],
      );
    }
    /**
     * Rows of holds fetched through an index by this reservation: this session's counts not yet
     * reported (pg_stat_xact_user_tables), before and after it in one transaction, within which
     * they are not reported.
     */
    const holdsFetched = async (reservation: () => Promise<unknown>) => {
      const fetched = async () => Number((await db.query<{ n: string }>(`select idx_tup_fetch::text as n from pg_stat_xact_user_tables where relname = 'holds'`)).rows[0]!.n);
      await db.query('begin');
      try {
        const before = await fetched();
        await reservation();
        return (await fetched()) - before;
      } finally {
        await db.query('commit');
      }
    };
    expect(await holdsFetched(() => reserveMany([{ hold: holdId(), accountId: a, amount: 1n, metadata: { key_id: free }, keyId: free }]))).toBeLessThan(5);
    expect(await holdsFetched(() => reserve(holdId(), a, 1n, { key_id: free }))).toBeLessThan(5);
    expect(await holdsFetched(() => reserveMany([{ hold: holdId(), accountId: a, amount: 1n, metadata: { key_id: limited }, keyId: limited }]))).toBeGreaterThanOrEqual(40);
    expect(await keyRoom(limited)).toBe(1000n - 40n - 1n);
    expect(await keyRoom(free)).toBeNull();
    await expectBalanced(a);
  });
});

/** An organization (an account of kind organization) with these purchased micro-coins. */
async function organization(pur: bigint): Promise<string> {
  const id = newId('org');
  await db.query(`insert into accounts (id, email, kind, name, paid) values ($1, $2, 'organization', 'Rules org', false)`, [id, uniqueEmail('rules-org')]);
  await db.query('insert into wallets (account_id) values ($1)', [id]);
  if (pur > 0n) await db.query(`select * from mas_credit($1, 'purchased', 'topup', $2, 'rules', $3, 'Top-up')`, [id, pur.toString(), `rules-pur:${id}`]);
  return id;
}
/** A person who is a member of the organization, with this spend limit (micro-coins) and period, or none. */
async function member(org: string, limitMicro: bigint | null, period: 'total' | 'monthly' = 'total', person?: string): Promise<string> {
  const id = person ?? (await makeAccount(orm)).id;
  await db.query(`insert into organization_members (organization_id, account_id, role, spend_limit_micro, spend_limit_period) values ($1, $2, 'member', $3, $4)`, [
    org,
    id,
    limitMicro === null ? null : limitMicro.toString(),
    limitMicro === null ? null : period,
  ]);
  return id;
}
/** A key of the organization's wallet owned by the member (with its own spend limit, if given). */
async function memberKey(org: string, person: string, keyLimitMicro?: bigint): Promise<string> {
  const key = await createKey(orm.em.fork(), org, {}, undefined, { memberId: person });
  if (keyLimitMicro !== undefined) await db.query(`update api_keys set spend_limit_micro = $2, spend_limit_period = 'total' where id = $1`, [key.id, keyLimitMicro.toString()]);
  return key.id;
}
const memberRoom = async (keyId: string) => {
  const room = (await db.query<{ room: string | null }>('select mas_member_spend_room($1)::text as room', [keyId])).rows[0]!.room;
  return room === null ? null : BigInt(room);
};
/** A reservation through this key of the organization's wallet, one hold (single) or in a batch (batched), as chat and media make them. */
async function reserveBy(path: 'single' | 'batched', org: string, keyId: string, amount: bigint, id = holdId()) {
  if (path === 'single') return reserve(id, org, amount, { key_id: keyId });
  const [row] = await reserveMany([{ hold: id, accountId: org, amount, metadata: { key_id: keyId }, keyId }]);
  return { status: row!.status, available: row!.available };
}
/** A settled hold of this key that ended at `endedAt` (an SQL expression), as mas_end_hold leaves one. */
const insertSettled = (org: string, keyId: string, captured: bigint, endedAt: string) =>
  db.query(
    `insert into holds (id, account_id, amount_micro, from_subscription_micro, from_purchased_micro, status, captured_micro, reference, metadata, expires_at, created_at, ended_at)
     values ($1, $2, $3, 0, $3, 'settled', $3, 'rules', $4::jsonb, now(), ${endedAt}, ${endedAt})`,
    [holdId(), org, captured.toString(), JSON.stringify({ key_id: keyId })],
  );

describe("an organization member's spend limit", () => {
  it('refuses at the boundary: room < amount is refused, room == amount is reserved, one hold or in a batch, both paths alike', async () => {
    for (const path of ['single', 'batched'] as const) {
      const org = await organization(1000n);
      const person = await member(org, 30n);
      const key = await memberKey(org, person);
      expect(await reserveBy(path, org, key, 11n)).toMatchObject({ status: 'reserved' });
      expect(await memberRoom(key)).toBe(19n);
      expect(await reserveBy(path, org, key, 20n), path).toEqual({ status: 'member_spend_limit_reached', available: '19' });
      expect(await reserveBy(path, org, key, 19n), path).toMatchObject({ status: 'reserved' });
      expect(await memberRoom(key)).toBe(0n);
      expect(await reserveBy(path, org, key, 1n), path).toEqual({ status: 'member_spend_limit_reached', available: '0' });
      // A reservation of nothing fits an exhausted limit.
      expect(await reserveBy(path, org, key, 0n), path).toMatchObject({ status: 'reserved' });
      expect(await wallet(org)).toEqual({ sub: 0n, pur: 970n, held: 30n });
      await expectBalanced(org);
    }
  });

  it("counts all the member's keys of the organization: not another member's, not the member's personal keys, not another organization's", async () => {
    const org = await organization(10_000n);
    const person = await member(org, 100n);
    const [k1, k2] = [await memberKey(org, person), await memberKey(org, person)];
    expect(await reserve(holdId(), org, 30n, { key_id: k1 })).toMatchObject({ status: 'reserved' });
    expect(await reserve(holdId(), org, 30n, { key_id: k2 })).toMatchObject({ status: 'reserved' });
    expect(await memberRoom(k1)).toBe(40n);
    expect(await memberRoom(k2)).toBe(40n);
    // Another member's spend (limited or not) does not count.
    const other = await member(org, 1000n);
    const otherKey = await memberKey(org, other);
    expect(await reserve(holdId(), org, 500n, { key_id: otherKey })).toMatchObject({ status: 'reserved' });
    const free = await member(org, null);
    const freeKey = await memberKey(org, free);
    expect(await reserve(holdId(), org, 700n, { key_id: freeKey })).toMatchObject({ status: 'reserved' });
    expect(await memberRoom(freeKey)).toBeNull();
    // The person's personal key, and their key of another organization, do not count either.
    const personal = (await makeKey(orm, person)).id;
    await db.query(`select * from mas_credit($1, 'purchased', 'topup', 1000, 'rules', $2, 'Top-up')`, [person, `rules-personal:${person}`]);
    expect(await reserve(holdId(), person, 200n, { key_id: personal })).toMatchObject({ status: 'reserved' });
    const elsewhere = await organization(1000n);
    await member(elsewhere, 500n, 'total', person);
    const elsewhereKey = await memberKey(elsewhere, person);
    expect(await reserve(holdId(), elsewhere, 300n, { key_id: elsewhereKey })).toMatchObject({ status: 'reserved' });
    expect(await memberRoom(elsewhereKey)).toBe(200n);
    expect(await memberRoom(k1)).toBe(40n);
    // So 40 fit through either key, and 41 through neither, one hold or in a batch.
    expect(await reserve(holdId(), org, 41n, { key_id: k2 })).toEqual({ status: 'member_spend_limit_reached', available: '40' });
    expect((await reserveMany([{ hold: holdId(), accountId: org, amount: 41n, metadata: { key_id: k1 }, keyId: k1 }]))[0]).toMatchObject({ status: 'member_spend_limit_reached', available: '40' });
    expect(await reserve(holdId(), org, 40n, { key_id: k2 })).toMatchObject({ status: 'reserved' });
    await expectBalanced(org);
  });

  it('counts open holds and what settled holds captured, not what they released; the key’s own limit still applies under it', async () => {
    const org = await organization(1000n);
    const person = await member(org, 100n);
    const key = await memberKey(org, person, 60n);
    const open = holdId();
    expect(await reserve(open, org, 10n, { key_id: key })).toMatchObject({ status: 'reserved' });
    expect(await memberRoom(key)).toBe(90n);
    const settled = holdId();
    expect(await reserve(settled, org, 20n, { key_id: key })).toMatchObject({ status: 'reserved' });
    expect(await endHold(settled, 15n, 'settled')).toMatchObject({ status: 'settled' });
    expect(await memberRoom(key)).toBe(75n);
    const released = holdId();
    expect(await reserve(released, org, 5n, { key_id: key })).toMatchObject({ status: 'reserved' });
    expect(await endHold(released, 0n, 'released')).toMatchObject({ status: 'released' });
    expect(await memberRoom(key)).toBe(75n);
    // The key's limit (60, 25 used) is the tighter one: it refuses first, on both paths.
    expect(await reserve(holdId(), org, 36n, { key_id: key })).toEqual({ status: 'key_spend_limit_reached', available: '35' });
    expect((await reserveMany([{ hold: holdId(), accountId: org, amount: 36n, metadata: { key_id: key }, keyId: key }]))[0]).toMatchObject({ status: 'key_spend_limit_reached' });
    // A second key without a limit of its own meets the member's.
    const second = await memberKey(org, person);
    expect(await reserve(holdId(), org, 76n, { key_id: second })).toEqual({ status: 'member_spend_limit_reached', available: '75' });
    await expectBalanced(org);
  });

  it('monthly: only what settled since the first instant of this month (UTC) counts; open holds always count', async () => {
    const org = await organization(1000n);
    const person = await member(org, 50n, 'monthly');
    const [k1, k2] = [await memberKey(org, person), await memberKey(org, person)];
    await insertSettled(org, k1, 40n, `date_trunc('month', now(), 'UTC') - interval '1 microsecond'`);
    await insertSettled(org, k2, 9n, `date_trunc('month', now(), 'UTC') - interval '20 days'`);
    expect(await memberRoom(k1)).toBe(50n);
    await insertSettled(org, k2, 7n, `date_trunc('month', now(), 'UTC')`);
    expect(await memberRoom(k1)).toBe(43n);
    expect(await reserve(holdId(), org, 3n, { key_id: k2 })).toMatchObject({ status: 'reserved' });
    expect(await memberRoom(k1)).toBe(40n);
    expect((await reserveMany([{ hold: holdId(), accountId: org, amount: 41n, metadata: { key_id: k1 }, keyId: k1 }]))[0]).toMatchObject({ status: 'member_spend_limit_reached', available: '40' });
    // The same limit over the whole time: last month's spend counts.
    await db.query(`update organization_members set spend_limit_period = 'total' where organization_id = $1 and account_id = $2`, [org, person]);
    expect(await memberRoom(k1)).toBe(50n - 40n - 9n - 7n - 3n);
    expect(await reserve(holdId(), org, 2n, { key_id: k1 })).toEqual({ status: 'member_spend_limit_reached', available: '0' });
  });

  it('a key with no member, or a member without a limit, is not limited by it', async () => {
    const org = await organization(1000n);
    const person = await member(org, null);
    const key = await memberKey(org, person);
    expect(await memberRoom(key)).toBeNull();
    expect(await reserve(holdId(), org, 900n, { key_id: key })).toMatchObject({ status: 'reserved' });
    // A personal key of a person who is a limited member elsewhere: the personal wallet only.
    const limited = await member(org, 1n);
    await db.query(`select * from mas_credit($1, 'purchased', 'topup', 100, 'rules', $2, 'Top-up')`, [limited, `rules-personal:${limited}`]);
    const personal = (await makeKey(orm, limited)).id;
    expect(await memberRoom(personal)).toBeNull();
    expect(await reserve(holdId(), limited, 100n, { key_id: personal })).toMatchObject({ status: 'reserved' });
    expect((await reserveMany([{ hold: holdId(), accountId: org, amount: 100n, metadata: { key_id: key }, keyId: key }]))[0]).toMatchObject({ status: 'reserved' });
    expect(await wallet(org)).toEqual({ sub: 0n, pur: 0n, held: 1000n });
    await expectBalanced(org);
  });

  it("a replayed hold id answers exists, not refused, though the member's limit is reached", async () => {
    const org = await organization(1000n);
    const person = await member(org, 10n);
    const key = await memberKey(org, person);
    const id = holdId();
    expect(await reserve(id, org, 10n, { key_id: key })).toMatchObject({ status: 'reserved' });
    expect(await reserve(id, org, 10n, { key_id: key })).toMatchObject({ status: 'exists' });
    // The batched path answers exists for a repeated id while the limit has room for it (as for a key's limit).
    const b = holdId();
    const other = await member(org, 100n);
    const otherKey = await memberKey(org, other);
    expect(await reserveBy('batched', org, otherKey, 10n, b)).toMatchObject({ status: 'reserved' });
    expect(await reserveBy('batched', org, otherKey, 10n, b)).toMatchObject({ status: 'exists' });
    expect(await wallet(org)).toEqual({ sub: 0n, pur: 980n, held: 20n });
    await expectBalanced(org);
  });

  it('within one batch, each item of the member (through any of their keys) sees the holds the items before it made', async () => {
    const org = await organization(1000n);
    const person = await member(org, 25n);
    const [k1, k2] = [await memberKey(org, person), await memberKey(org, person)];
    const rows = await reserveMany([10n, 10n, 10n, 5n].map((amount, i) => ({ hold: holdId(), accountId: org, amount, metadata: { key_id: i % 2 ? k2 : k1 }, keyId: i % 2 ? k2 : k1 })));
    expect(rows.map((r) => r.status)).toEqual(['reserved', 'reserved', 'member_spend_limit_reached', 'reserved']);
    expect(rows[2]!.available).toBe('5');
    expect(await wallet(org)).toEqual({ sub: 0n, pur: 975n, held: 25n });
    await expectBalanced(org);
  });

  it('a disabled key reserves nothing in a batch (key_revoked); enabled again, it does', async () => {
    const org = await organization(100n);
    const person = await member(org, 50n);
    const key = await memberKey(org, person);
    await db.query('update api_keys set disabled_at = now() where id = $1', [key]);
    expect(await reserveBy('batched', org, key, 1n)).toEqual({ status: 'key_revoked', available: null });
    await db.query('update api_keys set disabled_at = null where id = $1', [key]);
    expect(await reserveBy('batched', org, key, 1n)).toMatchObject({ status: 'reserved' });
    expect(await wallet(org)).toEqual({ sub: 0n, pur: 99n, held: 1n });
  });

  it.each(['single', 'batched'] as const)(
    '%s: reservations through different keys of one member, all at once, never pass the limit (the member row is locked before the wallet)',
    async (path) => {
      const org = await organization(10_000n);
      const person = await member(org, 10n);
      const keys = await Promise.all(Array.from({ length: 6 }, () => memberKey(org, person)));
      // Hold the organization's wallet so that every reservation is under way at once, then let them go.
      const holder = new pg.Client({ connectionString: orm.config.get('clientUrl') });
      const clients = keys.map(() => new pg.Client({ connectionString: orm.config.get('clientUrl') }));
      await Promise.all([holder, ...clients].map((c) => c.connect()));
      try {
        await holder.query('begin');
        await holder.query('select 1 from wallets where account_id = $1 for update', [org]);
        const pids = await Promise.all(clients.map(async (c) => (await c.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0]!.pid));
        const running = clients.map((c, i) =>
          path === 'single'
            ? c.query<{ status: string }>('select status from mas_reserve($1, $2, 10, $3, $4, $5)', [holdId(), org, 'rules', inAnHour(), JSON.stringify({ key_id: keys[i] })])
            : c.query<{ status: string }>('select status from mas_reserve_many($1::jsonb)', [
                JSON.stringify([{ i: 0, hold_id: holdId(), account_id: org, amount: '10', reference: 'rules', expires_at: inAnHour(), metadata: { key_id: keys[i] }, key_id: keys[i] }]),
              ]),
        );
        // Every reservation waits on a lock (the member's row or the wallet) before the wallet is let go.
        await vi.waitFor(
          async () => {
            const { rows } = await db.query<{ n: number }>(`select count(*)::int as n from pg_stat_activity where pid = any($1::int[]) and wait_event_type = 'Lock'`, [pids]);
            expect(rows[0]!.n).toBe(clients.length);
          },
          { timeout: 30_000, interval: 10 },
        );
        await holder.query('commit');
        const statuses = (await Promise.all(running)).map((r) => r.rows[0]!.status).sort();
        expect(statuses).toEqual(['member_spend_limit_reached', 'member_spend_limit_reached', 'member_spend_limit_reached', 'member_spend_limit_reached', 'member_spend_limit_reached', 'reserved']);
      } finally {
        await Promise.all([holder, ...clients].map((c) => c.end()));
      }
      expect(await wallet(org)).toEqual({ sub: 0n, pur: 9_990n, held: 10n });
      await expectBalanced(org);
    },
  );
});
