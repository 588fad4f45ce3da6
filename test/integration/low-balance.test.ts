import { startTestWorker } from '../support/jobs.ts';
import { randomBytes } from 'node:crypto';
import { Client, Connection } from '@temporalio/client';
import type { MikroORM } from '@mikro-orm/postgresql';
import { afterAll, beforeAll, describe, expect, inject, it, vi } from 'vitest';
import { ensureLowBalanceSchedule } from '../../config/temporal.ts';
import type { RunningWorker } from '../../workflows/worker.ts';
import { createContext, type CoreDeps } from '../../core/context.ts';
import { createInternalCaller } from '../../core/internal/router.ts';
import { parseCoins } from '../../core/money/coins.ts';
import { release, reserve } from '../../core/money/holds.ts';
import { credit } from '../../core/money/wallet.ts';
import { createCaller } from '../../core/router.ts';
import { openTestOrm, testDeps, uniqueEmail } from '../support/db.ts';
import { refusal } from '../support/refusal.ts';
import { mailboxOf, signUpVerified } from '../support/sign-up.ts';

/**
 * The low-balance notice (docs/accounts.md): the schedule's step (`notices.lowBalance`, what the
 * mas-low-balance Schedule's activity calls) against real PostgreSQL: one mail per crossing of the
 * threshold, even with runs at once, and the next crossing mails again; then the Schedule itself
 * on the real Temporal dev server with two workers. One file, so that no other file's runs claim
 * these accounts (every run scans every account).
 */
let orm: MikroORM;
let deps: CoreDeps;
beforeAll(async () => {
  orm = await openTestOrm();
  deps = testDeps(orm);
});
afterAll(() => orm.close());

const run = () => createInternalCaller(createContext(deps, { kind: 'internal' })).notices.lowBalance();
const PASSWORD = 'a sound password for tests';

async function person(coins: string) {
  const email = uniqueEmail('low');
  const signedIn = await signUpVerified(deps, { email, password: PASSWORD });
  const accountId = signedIn.account.id;
  await credit(orm.em.fork(), { accountId, kind: 'topup', amount: parseCoins(coins), reference: 'fixture', idempotencyKey: `low:${accountId}`, description: 'Top-up' });
  const me = createCaller(createContext(deps, { kind: 'session', token: signedIn.token }));
  const notices = () => mailboxOf(deps).to(email).filter((m) => m.subject.startsWith('Your balance is below'));
  return { email, accountId, me, notices };
}

describe('low-balance notice', () => {
  it('mails once when the balance is below the threshold, again only after it rose back and fell again', async () => {
    const p = await person('150');
    expect(await p.me.account.setLowBalanceNotice({ threshold_coins: '100' })).toEqual({ object: 'low_balance_notice', threshold_coins: 100, notified: false });
    expect(await p.me.accounts.me()).toMatchObject({ low_balance_threshold_coins: '100' });
    await run();
    expect(p.notices()).toHaveLength(0);
    // Spending (a hold) takes the spendable balance to 50: one mail, and no second one.
    const hold = await reserve(orm.em.fork(), { accountId: p.accountId, amount: parseCoins('100'), reference: 'low-test', expiresAt: new Date(Date.now() + 3600_000) });
    await run();
    await run();
    expect(p.notices()).toHaveLength(1);
    expect(p.notices()[0]).toMatchObject({ to: p.email, subject: 'Your balance is below 100 coins' });
    expect(p.notices()[0]!.text).toContain('Your balance is 50 coins');
    expect(p.notices()[0]!.text).toContain('http://localhost/account');
    // Back above: the mark clears, no mail. Down again: the next crossing mails.
    await release(orm.em.fork(), hold.holdId);
    await run();
    const [mark] = await orm.em.fork().execute<{ low_balance_notified_at: Date | null }[]>('select low_balance_notified_at from accounts where id = ?', [p.accountId]);
    expect(mark!.low_balance_notified_at).toBeNull();
    expect(p.notices()).toHaveLength(1);
    await reserve(orm.em.fork(), { accountId: p.accountId, amount: parseCoins('60'), reference: 'low-test-2', expiresAt: new Date(Date.now() + 3600_000) });
    await run();
    expect(p.notices()).toHaveLength(2);
  });

  it('sends one mail per crossing when several runs go at once (several workers)', async () => {
    const people = await Promise.all([person('5'), person('5'), person('5')]);
    for (const p of people) await p.me.account.setLowBalanceNotice({ threshold_coins: 10 });
    await Promise.all([run(), run(), run(), run()]);
    for (const p of people) expect(p.notices()).toHaveLength(1);
  });

  it('an empty threshold turns the notice off; a bad one is refused naming the field', async () => {
    const p = await person('5');
    await p.me.account.setLowBalanceNotice({ threshold_coins: '10' });
    expect(await p.me.account.setLowBalanceNotice({ threshold_coins: '' })).toMatchObject({ threshold_coins: null });
    await run();
    expect(p.notices()).toHaveLength(0);
    for (const bad of ['abc', '0', '-5', '1.5']) {
      expect(await refusal(p.me.account.setLowBalanceNotice({ threshold_coins: bad })), bad).toMatchObject({ code: 'invalid_request', param: 'threshold_coins' });
    }
  });

  it('a mail that fails is tried again by the next run', async () => {
    const p = await person('5');
    await p.me.account.setLowBalanceNotice({ threshold_coins: 10 });
    const failing = { ...deps, mailer: { send: () => Promise.reject(new Error('SMTP server down')) } };
    await createInternalCaller(createContext(failing, { kind: 'internal' })).notices.lowBalance();
    expect(p.notices()).toHaveLength(0);
    await run();
    expect(p.notices()).toHaveLength(1);
  });
});

describe('the low-balance schedule', () => {
  let connection: Connection;
  let client: Client;
  let workers: RunningWorker[] = [];
  const taskQueue = `test-low-balance-${randomBytes(4).toString('hex')}`;
  const scheduleId = `test-low-balance-${randomBytes(4).toString('hex')}`;
  beforeAll(async () => {
    connection = await Connection.connect({ address: inject('temporalAddress') });
    client = new Client({ connection });
    const start = () => startTestWorker({ deps, taskQueue });
    workers = [await start(), await start()];
  });
  afterAll(async () => {
    await client?.schedule.getHandle(scheduleId).delete().catch(() => undefined);
    for (const w of workers) await w.shutdown();
    await connection?.close();
  });

  it('mails an account below its threshold once, however many runs follow, with two workers', async () => {
    const email = uniqueEmail('low-schedule');
    const signedIn = await signUpVerified(deps, { email, password: 'a sound password for tests' });
    await credit(orm.em.fork(), { accountId: signedIn.account.id, kind: 'topup', amount: parseCoins('3'), reference: 'fixture', idempotencyKey: `low-schedule:${signedIn.account.id}`, description: 'Top-up' });
    await createCaller(createContext(deps, { kind: 'session', token: signedIn.token })).account.setLowBalanceNotice({ threshold_coins: 10 });
    const notices = () => mailboxOf(deps).to(email).filter((m) => m.subject === 'Your balance is below 10 coins');
    await ensureLowBalanceSchedule(client, 1, { scheduleId, taskQueue });
    await vi.waitFor(() => expect(notices()).toHaveLength(1), { timeout: 30_000, interval: 250 });
    // Later runs: wait until two more have completed (a positive signal), then still one mail.
    const handle = client.schedule.getHandle(scheduleId);
    const runs = async () => (await handle.describe()).info.numActionsTaken;
    const seen = await runs();
    await vi.waitFor(async () => expect(await runs()).toBeGreaterThanOrEqual(seen + 2), { timeout: 30_000, interval: 250 });
    await handle.pause('test done');
    for (const action of (await handle.describe()).info.recentActions.slice(-2)) {
      await client.workflow.getHandle(action.action.workflow.workflowId, action.action.workflow.firstExecutionRunId).result();
    }
    expect(notices()).toHaveLength(1);
  });
});
