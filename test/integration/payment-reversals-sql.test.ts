import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { MikroORM } from '@mikro-orm/postgresql';
import pg from 'pg';
import { randomBase62 } from '../../core/ids.ts';
import { makeAccount, openTestOrm, walletInvariants } from '../support/db.ts';

/**
 * The SQL of refunds and disputes (core/money/money.sql, migration payment_reversals), called
 * directly: mas_reverse_payment takes a payment back from the purchased pocket, below zero if
 * need be, once per key; while that pocket is negative mas_reserve and mas_reserve_many refuse
 * everything (subscription coins do not hide the debt), and mas_adjust never takes from it.
 * The mutants `reversal-*` of scripts/sql-mutation.ts are killed here.
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

const COIN = 1_000_000n;
const inAnHour = () => new Date(Date.now() + 3_600_000).toISOString();

async function account(sub: bigint, pur: bigint): Promise<string> {
  const id = (await makeAccount(orm)).id;
  if (sub > 0n) await db.query(`select * from mas_credit($1, 'subscription', 'subscription_grant', $2, 'rules', $3, 'Subscription coins')`, [id, sub.toString(), `rev-sub:${id}`]);
  if (pur > 0n) await db.query(`select * from mas_credit($1, 'purchased', 'topup', $2, 'rules', $3, 'Top-up')`, [id, pur.toString(), `rev-pur:${id}`]);
  return id;
}

async function wallet(accountId: string) {
  const { rows } = await db.query<{ sub: string; pur: string; held: string }>(
    'select subscription_micro::text as sub, purchased_micro::text as pur, held_micro::text as held from wallets where account_id = $1',
    [accountId],
  );
  return { sub: BigInt(rows[0]!.sub), pur: BigInt(rows[0]!.pur), held: BigInt(rows[0]!.held) };
}

async function reverse(accountId: string, amount: bigint, key: string, description = 'Refund (Stripe)') {
  const { rows } = await db.query<{ status: string; entry_id: string | null; balance_after: string | null }>(
    'select status, entry_id::text, balance_after::text from mas_reverse_payment($1, $2, $3, $4, $5)',
    [accountId, amount.toString(), 'ch_rules', key, description],
  );
  return rows[0]!;
}

async function entries(accountId: string) {
  const { rows } = await db.query<{ pocket: string; kind: string; amount: string; after: string; key: string; description: string }>(
    `select pocket, kind, amount_micro::text as amount, balance_after_micro::text as after, idempotency_key as key, description
     from ledger_entries where account_id = $1 and kind = 'payment_reversal' order by id`,
    [accountId],
  );
  return rows;
}

describe('mas_reverse_payment', () => {
  it('takes coins back from the purchased pocket, below zero, with one ledger entry; the same key again moves nothing', async () => {
    const id = await account(3n * COIN, 5n * COIN);
    const key = `rev:${randomBase62(10)}`;
    const first = await reverse(id, -8n * COIN, key);
    expect(first).toMatchObject({ status: 'applied', balance_after: (-3n * COIN).toString() });
    expect(await wallet(id)).toEqual({ sub: 3n * COIN, pur: -3n * COIN, held: 0n });
    expect(await entries(id)).toEqual([{ pocket: 'purchased', kind: 'payment_reversal', amount: (-8n * COIN).toString(), after: (-3n * COIN).toString(), key, description: 'Refund (Stripe)' }]);

    const again = await reverse(id, -8n * COIN, key);
    expect(again).toEqual({ status: 'duplicate', entry_id: first.entry_id, balance_after: (-3n * COIN).toString() });
    expect(await wallet(id)).toEqual({ sub: 3n * COIN, pur: -3n * COIN, held: 0n });
    expect(await entries(id)).toHaveLength(1);

    const back = await reverse(id, 8n * COIN, `${key}:won`, 'Dispute won');
    expect(back.status).toBe('applied');
    expect(await wallet(id)).toEqual({ sub: 3n * COIN, pur: 5n * COIN, held: 0n });
    const state = await walletInvariants(orm, id);
    expect(state.ledgerByPocket).toEqual({ subscription: 3n * COIN, purchased: 5n * COIN, held: 0n });
  });

  it('no_wallet for an unknown account; 0 is refused', async () => {
    expect(await reverse(`acct_${randomBase62(10)}`, -1n, `rev:${randomBase62(10)}`)).toEqual({ status: 'no_wallet', entry_id: null, balance_after: null });
    const id = await account(0n, COIN);
    await expect(reverse(id, 0n, `rev:${randomBase62(10)}`)).rejects.toThrow(/must not be 0/);
  });
});

describe('a negative purchased pocket', () => {
  it('refuses every reservation, single or batched, even when subscription coins would cover it; nothing is held', async () => {
    const id = await account(100n * COIN, 0n);
    await reverse(id, -1n, `rev:${randomBase62(10)}`);
    for (const amount of [1n, 0n]) {
      const { rows } = await db.query<{ status: string; available: string | null }>('select status, available::text from mas_reserve($1, $2, $3, $4, $5, $6)', [
        `hold_rev_${randomBase62(10)}`,
        id,
        amount.toString(),
        'rules',
        inAnHour(),
        '{}',
      ]);
      expect(rows[0]).toEqual({ status: 'negative_balance', available: '-1' });
      const many = await db.query<{ i: number; status: string; available: string | null }>('select i, status, available::text from mas_reserve_many($1::jsonb)', [
        JSON.stringify([{ i: 0, hold_id: `hold_rev_${randomBase62(10)}`, account_id: id, amount: amount.toString(), reference: 'rules', expires_at: inAnHour(), metadata: {}, key_id: null }]),
      ]);
      expect(many.rows).toEqual([{ i: 0, status: 'negative_balance', available: '-1' }]);
    }
    expect(await wallet(id)).toEqual({ sub: 100n * COIN, pur: -1n, held: 0n });
    // Back at zero, spending works again.
    await db.query(`select * from mas_credit($1, 'purchased', 'topup', 1, 'rules', $2, 'Top-up')`, [id, `rev-repay:${id}`]);
    const { rows } = await db.query<{ status: string }>('select status from mas_reserve($1, $2, $3, $4, $5, $6)', [`hold_rev_${randomBase62(10)}`, id, (2n * COIN).toString(), 'rules', inAnHour(), '{}']);
    expect(rows[0]!.status).toBe('reserved');
  });

  it('mas_adjust down takes from the subscription pocket only, never deeper into the negative purchased pocket', async () => {
    const id = await account(10n * COIN, 0n);
    await reverse(id, -2n * COIN, `rev:${randomBase62(10)}`);
    const adjust = (amount: bigint) =>
      db.query<{ status: string }>('select status from mas_adjust($1, $2, $3, $4, $5, $6)', [id, 'adjustment', amount.toString(), 'rules', `rev-adj:${randomBase62(10)}`, 'Adjustment']);
    expect((await adjust(-11n * COIN)).rows[0]!.status).toBe('insufficient');
    expect((await adjust(-4n * COIN)).rows[0]!.status).toBe('applied');
    expect(await wallet(id)).toEqual({ sub: 6n * COIN, pur: -2n * COIN, held: 0n });
    expect((await adjust(-6n * COIN)).rows[0]!.status).toBe('applied');
    expect(await wallet(id)).toEqual({ sub: 0n, pur: -2n * COIN, held: 0n });
  });
});
