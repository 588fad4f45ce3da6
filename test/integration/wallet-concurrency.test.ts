import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { MikroORM } from '@mikro-orm/postgresql';
import { isCoreError } from '../../core/errors.ts';
import { parseCoins } from '../../core/money/coins.ts';
import { release, reserve, settle } from '../../core/money/holds.ts';
import { makeAccount, openTestOrm, walletInvariants } from '../support/db.ts';

let orm: MikroORM;
beforeAll(async () => {
  orm = await openTestOrm(40);
});
afterAll(() => orm.close());

const inAnHour = () => new Date(Date.now() + 3_600_000);

describe('reservations under concurrency', () => {
  // 200 parallel reservations of 1.5 coins against 100 coins split over both pockets:
  // exactly 66 fit. Repeated, with a fresh account each round.
  for (let round = 1; round <= 5; round++) {
    it(`round ${round}: exactly the covered number succeed and nothing is lost`, async () => {
      const account = await makeAccount(orm, { coins: '60', subscriptionCoins: '40' });
      const amount = parseCoins('1.5');
      const results = await Promise.allSettled(
        Array.from({ length: 200 }, (_, i) =>
          reserve(orm.em.fork(), { accountId: account.id, amount, reference: `req-${round}-${i}`, expiresAt: inAnHour() }),
        ),
      );
      const ok = results.filter((r) => r.status === 'fulfilled');
      const refused = results.filter((r) => r.status === 'rejected');
      expect(ok).toHaveLength(66);
      for (const r of refused) {
        expect(isCoreError(r.reason) && r.reason.code).toBe('insufficient_balance');
      }

      const state = await walletInvariants(orm, account.id);
      expect(state.balance.subscription).toBe(0n);
      expect(state.balance.purchased).toBe(parseCoins('1')); // 100 - 66 * 1.5
      expect(state.balance.held).toBe(66n * amount);
      expect(state.openHolds).toBe(state.balance.held);
      expect(state.ledgerTotal).toBe(state.balance.subscription + state.balance.purchased + state.balance.held);

      // End every hold in parallel, half settled, half released, each twice at once.
      const holds = ok.map((r) => (r as PromiseFulfilledResult<{ holdId: string }>).value.holdId);
      await Promise.all(
        holds.flatMap((id, i) =>
          i % 2 === 0
            ? [settle(orm.em.fork(), id, parseCoins('1')), settle(orm.em.fork(), id, parseCoins('1'))]
            : [release(orm.em.fork(), id), settle(orm.em.fork(), id, parseCoins('0.5'))],
        ),
      );
      const after = await walletInvariants(orm, account.id);
      expect(after.balance.held).toBe(0n);
      expect(after.openHolds).toBe(0n);
      expect(after.ledgerTotal).toBe(after.balance.subscription + after.balance.purchased);
      const [captured] = await orm.em.fork().execute<{ total: string }[]>(
        `select coalesce(-sum(amount_micro), 0)::text as total from ledger_entries where account_id = ? and kind = 'capture'`,
        [account.id],
      );
      const settledCount = BigInt(Math.ceil(holds.length / 2));
      // Each odd hold was either released (0) or settled at 0.5, whichever came first.
      const capturedTotal = BigInt(captured!.total);
      expect(capturedTotal).toBeGreaterThanOrEqual(settledCount * parseCoins('1'));
      expect(capturedTotal).toBeLessThanOrEqual(settledCount * parseCoins('1') + BigInt(holds.length - Number(settledCount)) * parseCoins('0.5'));
      expect(after.balance.subscription + after.balance.purchased).toBe(parseCoins('100') - capturedTotal);
    });
  }
});
