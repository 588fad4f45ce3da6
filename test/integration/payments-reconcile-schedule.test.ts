import { startTestWorker } from '../support/jobs.ts';
import { randomBytes } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Client, Connection } from '@temporalio/client';
import { afterAll, beforeAll, describe, expect, inject, it, vi } from 'vitest';
import type { MikroORM } from '@mikro-orm/postgresql';
import type { RunningStripeMock } from '../../adapters/embedded/stripe-mock.ts';
import { ensurePaymentsReconcileSchedule } from '../../config/temporal.ts';
import { getBalance } from '../../core/money/wallet.ts';
import type { RunningWorker } from '../../workflows/worker.ts';
import { makeAccount, openTestOrm, testDeps } from '../support/db.ts';
import { startTestStripeMock } from '../support/stripe-mock.ts';

/**
 * The reconciliation as the `mas-payments-reconcile` Temporal Schedule, on the real Temporal dev
 * server and a real worker, against stripe-mock behind a proxy that lists this test's session
 * (as payments-reconcile.test.ts does): a top-up whose webhook never came is credited once.
 */
let orm: MikroORM;
let mock: RunningStripeMock;
let proxy: http.Server;
let connection: Connection;
let client: Client;
let worker: RunningWorker;
let sessions: object[] = [];
const taskQueue = `test-reconcile-${randomBytes(4).toString('hex')}`;
const scheduleId = `test-reconcile-${randomBytes(4).toString('hex')}`;

beforeAll(async () => {
  orm = await openTestOrm();
  mock = await startTestStripeMock();
  const target = new URL(mock.url);
  proxy = http.createServer((req, res) => {
    const upstream = http.request({ host: target.hostname, port: target.port, path: req.url, method: req.method, headers: req.headers }, (up) => {
      const chunks: Buffer[] = [];
      up.on('data', (c: Buffer) => chunks.push(c));
      up.on('end', () => {
        let body = Buffer.concat(chunks);
        const path = (req.url ?? '').split('?')[0];
        if (req.method === 'GET' && up.statusCode === 200 && (path === '/v1/checkout/sessions' || path === '/v1/invoices')) {
          body = Buffer.from(JSON.stringify({ ...(JSON.parse(body.toString('utf8')) as object), data: path === '/v1/invoices' ? [] : sessions, has_more: false }));
        }
        const headers = { ...up.headers, 'content-length': String(body.length) };
        delete headers['transfer-encoding'];
        res.writeHead(up.statusCode ?? 502, headers);
        res.end(body);
      });
    });
    req.pipe(upstream);
  });
  await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
  const { port } = proxy.address() as AddressInfo;
  const deps = testDeps(orm, { env: { STRIPE_SECRET_KEY: 'sk_test_ReconcileSchedule', STRIPE_WEBHOOK_SECRET: 'whsec_test_reconcile_schedule', STRIPE_API_URL: `http://127.0.0.1:${port}` } });
  connection = await Connection.connect({ address: inject('temporalAddress') });
  client = new Client({ connection });
  worker = await startTestWorker({ deps, taskQueue });
});
afterAll(async () => {
  await client?.schedule.getHandle(scheduleId).delete().catch(() => undefined);
  await worker?.shutdown();
  await connection?.close();
  await new Promise((resolve) => proxy?.close(resolve));
  await mock?.stop();
  await orm?.close();
});

describe('the payments reconciliation schedule', () => {
  it('credits a top-up whose webhook was dropped, once, however many runs follow', async () => {
    const account = await makeAccount(orm);
    const id = `cs_test_${randomBytes(8).toString('hex')}`;
    sessions = [
      {
        id,
        object: 'checkout.session',
        mode: 'payment',
        client_reference_id: account.id,
        metadata: { mas_account_id: account.id, mas_purpose: 'topup' },
        payment_status: 'paid',
        status: 'complete',
        amount_total: 777,
        currency: 'usd',
        customer: 'cus_test_schedule',
        payment_intent: `pi_test_${randomBytes(8).toString('hex')}`,
      },
    ];
    await ensurePaymentsReconcileSchedule(client, 1, { scheduleId, taskQueue });
    const expected = 777n * 10n * 1_000_000n;
    await vi.waitFor(async () => expect((await getBalance(orm.em.fork(), account.id)).purchased).toBe(expected), { timeout: 30_000, interval: 250 });
    // Later runs: wait until two more have completed (a positive signal), then nothing changed.
    const runs = async () => (await client.schedule.getHandle(scheduleId).describe()).info.numActionsTaken;
    const seen = await runs();
    await vi.waitFor(async () => expect(await runs()).toBeGreaterThanOrEqual(seen + 2), { timeout: 30_000, interval: 250 });
    const handle = client.schedule.getHandle(scheduleId);
    await handle.pause('test done');
    const recent = (await handle.describe()).info.recentActions;
    for (const action of recent.slice(-2)) {
      const wf = client.workflow.getHandle(action.action.workflow.workflowId, action.action.workflow.firstExecutionRunId);
      expect(await wf.result()).toBe(0);
    }
    expect((await getBalance(orm.em.fork(), account.id)).purchased).toBe(expected);
    const [row] = await orm.em.fork().execute<{ n: number }[]>(`select count(*)::int as n from ledger_entries where account_id = ? and reference = ?`, [account.id, id]);
    expect(row!.n).toBe(1);
  });
});
