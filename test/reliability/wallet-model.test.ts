import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { MikroORM } from '@mikro-orm/postgresql';
import { openTestOrm } from '../support/db.ts';
import { checkWalletModel, RELIABILITY_FACTOR, walletModelRuns } from '../support/wallet-model-run.ts';
import { reportSection, scale, table } from './support/results.ts';

/**
 * Issue 30: the wallet model property of test/integration/wallet-model.test.ts (every money
 * function against an independent bigint model, after every step), with RELIABILITY_FACTOR
 * times as many runs (five times that with --full); WALLET_MODEL_RUNS overrides the number.
 */
let orm: MikroORM;
beforeAll(async () => {
  orm = await openTestOrm(12);
});
afterAll(() => orm.close());

describe('wallet model, long run', () => {
  // WALLET_MODEL_SHORT=1 (scripts/reliability.ts --if-changed, when nothing it guards changed since its long run): 2 × the default.
  const numRuns = walletModelRuns(process.env.WALLET_MODEL_SHORT === '1' ? 2 : scale(RELIABILITY_FACTOR, 5 * RELIABILITY_FACTOR));
  it(`matches the model after every step of ${numRuns} random command sequences`, async () => {
    const report = await checkWalletModel(orm, { numRuns });
    expect(report.commands).toBeGreaterThan(0);
    const rows = [...report.stats].filter(([k]) => k.includes(':')).sort(([a], [b]) => (a < b ? -1 : 1));
    await reportSection(
      'wallet-model',
      9,
      [
        '## Wallet model',
        '',
        `fast-check seed ${report.seed}: ${report.runs} random command sequences (${report.commands} commands) over the money functions, each compared with the bigint model of test/support/wallet-model.ts after every step, in ${(report.ms / 1000).toFixed(1)} s. No disagreement.`,
        '',
        table(['Command: outcome', 'Times'], rows),
      ].join('\n'),
    );
  }, 3_600_000);
});
