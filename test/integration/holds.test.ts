import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { MikroORM } from '@mikro-orm/postgresql';
import { parseCoins } from '../../core/money/coins.ts';
import { release, reserve, settle } from '../../core/money/holds.ts';
import { credit, getBalance } from '../../core/money/wallet.ts';
import { makeAccount, openTestOrm, walletInvariants } from '../support/db.ts';

let orm: MikroORM;
beforeAll(async () => {
  orm = await openTestOrm();
});
afterAll(() => orm.close());
const soon = () => new Date(Date.now() + 60_000);

describe('holds', () => {
  it('spends subscription coins first and returns the unused part to the pockets it came from', async () => {
    const a = await makeAccount(orm, { coins: '10', subscriptionCoins: '3' });
    const em = orm.em.fork();
    const { holdId } = await reserve(em, { accountId: a.id, amount: parseCoins('5'), reference: 'r1', expiresAt: soon() });
    expect(await getBalance(em, a.id)).toMatchObject({ subscription: 0n, purchased: parseCoins('8'), held: parseCoins('5') });

    const out = await settle(em, holdId, parseCoins('4'));
    expect(out).toMatchObject({ status: 'settled', captured: parseCoins('4') });
    // 3 subscription + 1 purchased were used; 1 purchased comes back.
    expect(await getBalance(em, a.id)).toMatchObject({ subscription: 0n, purchased: parseCoins('9'), held: 0n });

    const entries = await em.execute<{ kind: string; pocket: string; amount: string; description: string }[]>(
      'select kind, pocket, amount_micro::text as amount, description from ledger_entries where hold_id = ? order by id',
      [holdId],
    );
    expect(entries).toEqual([
      { kind: 'reservation', pocket: 'subscription', amount: '-3000000', description: 'Reservation' },
      { kind: 'reservation', pocket: 'purchased', amount: '-2000000', description: 'Reservation' },
      { kind: 'reservation', pocket: 'held', amount: '5000000', description: 'Reservation' },
      { kind: 'capture', pocket: 'held', amount: '-4000000', description: 'API usage' },
      { kind: 'release', pocket: 'held', amount: '-1000000', description: 'Release of unused reservation' },
      { kind: 'release', pocket: 'purchased', amount: '1000000', description: 'Release of unused reservation' },
    ]);
  });

  it('ends a hold exactly once: a later settle or release returns the first outcome and moves nothing', async () => {
    const a = await makeAccount(orm, { coins: '10' });
    const em = orm.em.fork();
    const { holdId } = await reserve(em, { accountId: a.id, amount: parseCoins('2'), reference: 'r', expiresAt: soon() });
    await release(em, holdId);
    const before = await walletInvariants(orm, a.id);
    expect(await settle(em, holdId, parseCoins('2'))).toMatchObject({ status: 'released', captured: 0n });
    expect(await release(em, holdId)).toMatchObject({ status: 'released', captured: 0n });
    expect(await walletInvariants(orm, a.id)).toEqual(before);
    expect(before.balance.purchased).toBe(parseCoins('10'));
  });

  it('refuses to capture more than is held, and keeps the hold open', async () => {
    const a = await makeAccount(orm, { coins: '10' });
    const em = orm.em.fork();
    const { holdId } = await reserve(em, { accountId: a.id, amount: parseCoins('1'), reference: 'r', expiresAt: soon() });
    await expect(settle(em, holdId, parseCoins('1.000001'))).rejects.toThrow(RangeError);
    expect(await settle(em, holdId, parseCoins('1'))).toMatchObject({ status: 'settled', captured: parseCoins('1') });
  });

  it('makes a reservation idempotent on a caller-chosen hold id', async () => {
    const a = await makeAccount(orm, { coins: '10' });
    const em = orm.em.fork();
    const holdId = `hold_job_${a.id}`;
    await reserve(em, { accountId: a.id, amount: parseCoins('4'), reference: 'job', holdId, expiresAt: soon() });
    await reserve(em, { accountId: a.id, amount: parseCoins('4'), reference: 'job', holdId, expiresAt: soon() });
    expect((await getBalance(em, a.id)).held).toBe(parseCoins('4'));
  });

  it('counts a repeated top-up idempotency key once, even in parallel', async () => {
    const a = await makeAccount(orm);
    const results = await Promise.all(
      Array.from({ length: 10 }, () =>
        credit(orm.em.fork(), { accountId: a.id, kind: 'topup', amount: parseCoins('7'), reference: 'pay_1', idempotencyKey: `pay_1:${a.id}`, description: 'Top-up' }),
      ),
    );
    expect(results.filter((r) => r.applied)).toHaveLength(1);
    expect(new Set(results.map((r) => r.entryId)).size).toBe(1);
    expect(await getBalance(orm.em.fork(), a.id)).toMatchObject({ purchased: parseCoins('7'), paid: true });
  });

  it('keeps the ledger append-only', async () => {
    const a = await makeAccount(orm, { coins: '1' });
    const em = orm.em.fork();
    await expect(em.execute('update ledger_entries set amount_micro = 1 where account_id = ?', [a.id])).rejects.toThrow(/append-only/);
    await expect(em.execute('delete from ledger_entries where account_id = ?', [a.id])).rejects.toThrow(/append-only/);
  });

  it('refuses a reservation that does not fit, and an unpaid account starts unpaid', async () => {
    const a = await makeAccount(orm);
    const em = orm.em.fork();
    expect((await getBalance(em, a.id)).paid).toBe(false);
    await expect(reserve(em, { accountId: a.id, amount: 1n, reference: 'r', expiresAt: soon() })).rejects.toMatchObject({ code: 'insufficient_balance' });
  });
});
