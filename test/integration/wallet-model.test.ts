import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { MikroORM } from '@mikro-orm/postgresql';
import { isCoreError } from '../../core/errors.ts';
import { release, reserve, settle } from '../../core/money/holds.ts';
import { credit } from '../../core/money/wallet.ts';
import { makeAccount, openTestOrm, walletInvariants } from '../support/db.ts';

/**
 * Random sequences of top-up, grant, reserve, settle, release and repeated endings, run against
 * the real database and against a small model of the wallet (in the style of pgledger's model
 * test): after every step the two agree and the ledger invariants hold.
 */
type Op =
  | { op: 'topup'; amount: bigint }
  | { op: 'grant'; amount: bigint }
  | { op: 'reserve'; amount: bigint }
  | { op: 'settle'; hold: number; fraction: number }
  | { op: 'release'; hold: number };

interface ModelHold { id: string; amount: bigint; fromSub: bigint; ended?: { status: 'settled' | 'released'; captured: bigint } }

const amount = fc.bigInt({ min: 1n, max: 5_000_000n });
const opArb: fc.Arbitrary<Op> = fc.oneof(
  fc.record({ op: fc.constant('topup' as const), amount }),
  fc.record({ op: fc.constant('grant' as const), amount }),
  fc.record({ op: fc.constant('reserve' as const), amount: fc.bigInt({ min: 0n, max: 8_000_000n }) }),
  fc.record({ op: fc.constant('settle' as const), hold: fc.nat(20), fraction: fc.integer({ min: 0, max: 100 }) }),
  fc.record({ op: fc.constant('release' as const), hold: fc.nat(20) }),
);

let orm: MikroORM;
beforeAll(async () => {
  orm = await openTestOrm();
});
afterAll(() => orm.close());

describe('wallet model', () => {
  it('matches a simple model after every step of random operation sequences', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(opArb, { minLength: 1, maxLength: 25 }), async (ops) => {
        const account = await makeAccount(orm);
        const model = { sub: 0n, pur: 0n, held: 0n, captured: 0n, paid: false };
        const holds: ModelHold[] = [];
        let step = 0;
        for (const o of ops) {
          const em = orm.em.fork();
          step++;
          if (o.op === 'topup' || o.op === 'grant') {
            await credit(em, { accountId: account.id, kind: o.op === 'topup' ? 'topup' : 'subscription_grant', amount: o.amount, reference: 'model', idempotencyKey: `model:${account.id}:${step}`, description: 'model' });
            if (o.op === 'topup') model.pur += o.amount;
            else model.sub += o.amount;
            model.paid = true;
          } else if (o.op === 'reserve') {
            const fits = model.sub + model.pur >= o.amount;
            try {
              const { holdId } = await reserve(em, { accountId: account.id, amount: o.amount, reference: `model-${step}`, expiresAt: new Date(Date.now() + 60_000) });
              expect(fits).toBe(true);
              const fromSub = model.sub < o.amount ? model.sub : o.amount;
              model.sub -= fromSub;
              model.pur -= o.amount - fromSub;
              model.held += o.amount;
              holds.push({ id: holdId, amount: o.amount, fromSub });
            } catch (err) {
              expect(isCoreError(err) && err.code).toBe('insufficient_balance');
              expect(fits).toBe(false);
            }
          } else if (holds.length > 0) {
            const h = holds[o.hold % holds.length]!;
            const actual = o.op === 'settle' ? (h.amount * BigInt(o.fraction)) / 100n : 0n;
            const outcome = o.op === 'settle' ? await settle(em, h.id, actual) : await release(em, h.id);
            if (h.ended) {
              // Ending again returns the first outcome and moves nothing.
              expect({ status: outcome.status, captured: outcome.captured }).toEqual(h.ended);
            } else {
              h.ended = { status: o.op === 'settle' ? 'settled' : 'released', captured: actual };
              expect({ status: outcome.status, captured: outcome.captured }).toEqual(h.ended);
              const capSub = h.fromSub < actual ? h.fromSub : actual;
              model.held -= h.amount;
              model.sub += h.fromSub - capSub;
              model.pur += h.amount - h.fromSub - (actual - capSub);
              model.captured += actual;
            }
          }
          const state = await walletInvariants(orm, account.id);
          expect(state.balance).toEqual({ subscription: model.sub, purchased: model.pur, held: model.held, paid: model.paid });
          expect(state.ledgerByPocket).toEqual({ subscription: model.sub, purchased: model.pur, held: model.held });
          expect(state.openHolds).toBe(model.held);
        }
      }),
      { numRuns: 40 },
    );
  });
});
