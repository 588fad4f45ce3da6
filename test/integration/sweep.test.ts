import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { MikroORM } from '@mikro-orm/postgresql';
import { parseCoins } from '../../core/money/coins.ts';
import { reserve, settle } from '../../core/money/holds.ts';
import { releaseExpiredHolds } from '../../core/money/sweep.ts';
import { makeAccount, openTestOrm } from '../support/db.ts';
import { expectSettledWallet } from '../support/ledger.ts';

let orm: MikroORM;
beforeAll(async () => {
  orm = await openTestOrm();
});
afterAll(() => orm.close());

describe('expired hold sweep', () => {
  it('releases holds past their expiry, leaves the others, and a late settle sees the release', async () => {
    const account = await makeAccount(orm, { coins: '5' });
    const em = orm.em.fork();
    const past = await reserve(em, { accountId: account.id, amount: parseCoins('2'), reference: 'died', expiresAt: new Date(Date.now() - 1000) });
    const live = await reserve(em, { accountId: account.id, amount: parseCoins('1'), reference: 'alive', expiresAt: new Date(Date.now() + 60_000) });

    // Two instances sweeping at once: each hold still ends once.
    const [a, b] = await Promise.all([releaseExpiredHolds(orm.em.fork(), new Date()), releaseExpiredHolds(orm.em.fork(), new Date())]);
    expect(a + b).toBeGreaterThanOrEqual(1);
    expect(await settle(em, past.holdId, parseCoins('2'))).toMatchObject({ status: 'released', captured: 0n });
    expect(await settle(em, live.holdId, parseCoins('1'))).toMatchObject({ status: 'settled' });
    const state = await expectSettledWallet(orm, account.id);
    expect(state.balance.purchased).toBe(parseCoins('4'));
  });
});
