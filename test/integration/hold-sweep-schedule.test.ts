import { randomBytes } from 'node:crypto';
import { Client, Connection } from '@temporalio/client';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { inject } from 'vitest';
import type { MikroORM } from '@mikro-orm/postgresql';
import { ensureHoldSweepSchedule } from '../../config/temporal.ts';
import { parseCoins } from '../../core/money/coins.ts';
import { reserve } from '../../core/money/holds.ts';
import type { RunningWorker } from '../../workflows/worker.ts';
import { failJob } from '../../core/generations/end-job.ts';
import { makeAccount, makeKey, openTestOrm, testDeps, walletInvariants } from '../support/db.ts';
import { expectReplays, startTestWorker } from '../support/jobs.ts';
import { expectSettledWallet } from '../support/ledger.ts';

/** The expired-hold sweep as a Temporal Schedule, on a real Temporal dev server and a real worker. */
let orm: MikroORM;
let connection: Connection;
let client: Client;
let worker: RunningWorker;
const taskQueue = `test-sweep-${randomBytes(4).toString('hex')}`;
const scheduleId = `test-sweep-${randomBytes(4).toString('hex')}`;

beforeAll(async () => {
  orm = await openTestOrm();
  connection = await Connection.connect({ address: inject('temporalAddress') });
  client = new Client({ connection });
  worker = await startTestWorker({ deps: testDeps(orm), taskQueue });
});
afterAll(async () => {
  await client.schedule.getHandle(scheduleId).delete().catch(() => undefined);
  await worker.shutdown();
  await connection.close();
  await orm.close();
});

describe('hold sweep schedule', () => {
  it('releases a reservation left open by a process that died, and its workflow histories replay', async () => {
    const account = await makeAccount(orm, { coins: '4' });
    await reserve(orm.em.fork(), { accountId: account.id, amount: parseCoins('2'), reference: 'crashed-request', expiresAt: new Date(Date.now() - 1000) });
    // A job left queued that this worker cannot start (it has no job runner): restarting it
    // fails, and that must not keep the expired hold open.
    const key = await makeKey(orm, account.id);
    const stale = `gen_stale${randomBytes(8).toString('hex')}`;
    await reserve(orm.em.fork(), { accountId: account.id, amount: parseCoins('1'), reference: stale, holdId: `hold_${stale}`, expiresAt: new Date(Date.now() + 3_600_000) });
    await orm.em.fork().execute(
      `insert into generations (id, account_id, key_id, model_id, prompt, settings, inputs, price_micro, hold_id, created_at)
       values (?, ?, ?, 'mas/image-demo', '', '{}', '{}', 1000000, ?, now() - interval '1 minute')`,
      [stale, account.id, key.id, `hold_${stale}`],
    );

    await ensureHoldSweepSchedule(client, 1, { scheduleId, taskQueue });
    // Created twice (a second instance starting): still one schedule, updated in place.
    await ensureHoldSweepSchedule(client, 1, { scheduleId, taskQueue });

    await vi.waitFor(async () => {
      const state = await walletInvariants(orm, account.id);
      expect(state.openHolds).toBe(parseCoins('1'));
      expect(state.balance.purchased).toBe(parseCoins('3'));
    }, { timeout: 20_000, interval: 250 });
    await failJob(orm.em.fork(), stale, { message: 'test fixture', code: 'fixture' });
    const state = await expectSettledWallet(orm, account.id);
    expect(state.balance.purchased).toBe(parseCoins('4'));

    const description = await client.schedule.getHandle(scheduleId).describe();
    const runs = description.info.recentActions.map((a) => a.action.workflow.workflowId);
    expect(runs.length).toBeGreaterThan(0);
    await expectReplays(await Promise.all(runs.map(async (workflowId) => ({ workflowId, history: await client.workflow.getHandle(workflowId).fetchHistory() }))));
  });
});
