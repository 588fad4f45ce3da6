import { randomBytes } from 'node:crypto';
import { Client, Connection } from '@temporalio/client';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { inject } from 'vitest';
import type { MikroORM } from '@mikro-orm/postgresql';
import { ensureHoldSweepSchedule } from '../../config/temporal.ts';
import { parseCoins } from '../../core/money/coins.ts';
import { reserve } from '../../core/money/holds.ts';
import { startWorker, type RunningWorker } from '../../workflows/worker.ts';
import { makeAccount, openTestOrm, silentLogger, testDeps } from '../support/db.ts';
import { expectReplays } from '../support/jobs.ts';
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
  worker = await startWorker({ deps: testDeps(orm), address: inject('temporalAddress'), namespace: 'default', logger: silentLogger, taskQueue });
});
afterAll(async () => {
  await client.schedule.getHandle(scheduleId).delete().catch(() => undefined);
  await worker.shutdown();
  await connection.close();
  await orm.close();
});

describe('hold sweep schedule', () => {
  it('releases a reservation left open by a process that died, and its workflow histories replay', async () => {
    const account = await makeAccount(orm, { coins: '3' });
    await reserve(orm.em.fork(), { accountId: account.id, amount: parseCoins('2'), reference: 'crashed-request', expiresAt: new Date(Date.now() - 1000) });

    await ensureHoldSweepSchedule(client, 1, { scheduleId, taskQueue });
    // Created twice (a second instance starting): still one schedule, updated in place.
    await ensureHoldSweepSchedule(client, 1, { scheduleId, taskQueue });

    await vi.waitFor(async () => {
      const state = await expectSettledWallet(orm, account.id);
      expect(state.balance.purchased).toBe(parseCoins('3'));
    }, { timeout: 20_000, interval: 250 });

    const description = await client.schedule.getHandle(scheduleId).describe();
    const runs = description.info.recentActions.map((a) => a.action.workflow.workflowId);
    expect(runs.length).toBeGreaterThan(0);
    await expectReplays(await Promise.all(runs.map(async (workflowId) => ({ workflowId, history: await client.workflow.getHandle(workflowId).fetchHistory() }))));
  });
});
