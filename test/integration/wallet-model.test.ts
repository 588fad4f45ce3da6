import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { MikroORM } from '@mikro-orm/postgresql';
import { openTestOrm } from '../support/db.ts';
import { checkWalletModel, walletModelRuns } from '../support/wallet-model-run.ts';

/**
 * The wallet model (issue 30): random command sequences over every money function (credits,
 * mas_adjust, reserve on both paths, settle and release with captures in and above the hold,
 * spend caps, keys' spend limits, organization members' spend limits (total and monthly, over all
 * their keys), revoked keys, the expired-hold sweep, races between endings, batched and parallel
 * reservations), run against the real database and an independent bigint model, compared after
 * every step. The property and its commands: test/support/wallet-model-run.ts; the model:
 * test/support/wallet-model.ts. `npm run test:reliability` runs it 20 times as long
 * (test/reliability/wallet-model.test.ts); WALLET_MODEL_RUNS sets the number of runs.
 */
let orm: MikroORM;
beforeAll(async () => {
  orm = await openTestOrm(12);
});
afterAll(() => orm.close());

describe('wallet model', () => {
  const numRuns = walletModelRuns();
  it(`matches the model after every step of ${numRuns} random command sequences`, async () => {
    const report = await checkWalletModel(orm, { numRuns });
    expect(report.commands).toBeGreaterThan(0);
  }, 600_000);
});
