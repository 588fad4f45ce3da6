import { randomBytes } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { MikroORM } from '@mikro-orm/postgresql';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunningStripeMock } from '../../adapters/embedded/stripe-mock.ts';
import { createContext, type CoreDeps } from '../../core/context.ts';
import { createInternalCaller } from '../../core/internal/router.ts';
import { getBalance } from '../../core/money/wallet.ts';
import { handlePaymentEvent } from '../../core/payments/receive-webhook.ts';
import { makeAccount, openTestOrm, testDeps } from '../support/db.ts';
import { startTestStripeMock } from '../support/stripe-mock.ts';

/**
 * The reconciliation (core/payments/reconcile.ts, the mas-payments-reconcile Schedule's step),
 * called as its activity calls it (the internal caller) against stripe-mock. stripe-mock answers
 * the list calls (and checks their parameters) with its own fixtures, which carry none of the
 * service's metadata: a small proxy in front of it puts this test's sessions and invoices in the
 * lists' `data`, as Stripe would list them.
 */
const STARTER = { name: 'Starter', priceId: 'price_starter', coinsPerPeriod: 10_000n * 1_000_000n };
const MICRO_PER_CENT = 10n * 1_000_000n;

let orm: MikroORM;
let mock: RunningStripeMock;
let proxy: http.Server;
let deps: CoreDeps;
const listed: { sessions: object[]; invoices: object[] } = { sessions: [], invoices: [] };
const seen: string[] = [];

beforeAll(async () => {
  orm = await openTestOrm();
  mock = await startTestStripeMock();
  const target = new URL(mock.url);
  proxy = http.createServer((req, res) => {
    seen.push(`${req.method} ${req.url}`);
    const upstream = http.request({ host: target.hostname, port: target.port, path: req.url, method: req.method, headers: req.headers }, (up) => {
      const chunks: Buffer[] = [];
      up.on('data', (c: Buffer) => chunks.push(c));
      up.on('end', () => {
        let body = Buffer.concat(chunks);
        const path = (req.url ?? '').split('?')[0];
        if (req.method === 'GET' && up.statusCode === 200 && (path === '/v1/checkout/sessions' || path === '/v1/invoices')) {
          const list = JSON.parse(body.toString('utf8')) as Record<string, unknown>;
          body = Buffer.from(JSON.stringify({ ...list, data: path === '/v1/invoices' ? listed.invoices : listed.sessions, has_more: false }));
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
  deps = testDeps(orm, { env: { STRIPE_SECRET_KEY: 'sk_test_PaymentsReconcile', STRIPE_WEBHOOK_SECRET: 'whsec_test_reconcile', STRIPE_API_URL: `http://127.0.0.1:${port}` }, plans: [STARTER] });
});
afterAll(async () => {
  await new Promise((resolve) => proxy?.close(resolve));
  await mock?.stop();
  await orm?.close();
});

const unique = (prefix: string) => `${prefix}_test_${randomBytes(8).toString('hex')}`;
const reconcile = () => createInternalCaller(createContext(deps, { kind: 'internal' })).payments.reconcile();

function session(accountId: string, cents: number) {
  return {
    id: unique('cs'),
    object: 'checkout.session',
    mode: 'payment',
    client_reference_id: accountId,
    metadata: { mas_account_id: accountId, mas_purpose: 'topup' },
    payment_status: 'paid',
    status: 'complete',
    amount_total: cents,
    currency: 'usd',
    customer: 'cus_test_reconcile',
    payment_intent: unique('pi'),
  };
}

function invoice(accountId: string) {
  const end = Math.floor(Date.now() / 1000) + 30 * 86_400;
  return {
    id: unique('in'),
    object: 'invoice',
    status: 'paid',
    amount_paid: 1000,
    currency: 'usd',
    customer: 'cus_test_reconcile',
    parent: { type: 'subscription_details', subscription_details: { subscription: unique('sub'), metadata: { mas_account_id: accountId, mas_purpose: 'subscription' } } },
    lines: { data: [{ period: { start: end - 30 * 86_400, end }, pricing: { price_details: { price: STARTER.priceId } } }] },
  };
}

async function audits(targetId: string) {
  const rows = await orm.em.fork().execute<{ action: string }[]>(`select action from admin_audit_log where target_type = 'payment' and target_id = ? order by id`, [targetId]);
  return rows.map((r) => r.action);
}

describe('the payments reconciliation', () => {
  it('credits the paid session and invoice whose webhooks were dropped, once; a second run credits nothing; the webhook arriving late credits nothing', async () => {
    const account = await makeAccount(orm);
    const dropped = session(account.id, 1234);
    const delivered = session(account.id, 500);
    const droppedInvoice = invoice(account.id);
    // The webhook credited `delivered`; the other two never came.
    const first = await handlePaymentEvent(deps, orm.em.fork(), {
      eventId: unique('evt'),
      providerType: 'checkout.session.completed',
      createdAt: new Date(),
      kind: 'checkout_session',
      stage: 'completed',
      session: { id: delivered.id, mode: 'payment', accountId: account.id, purpose: 'topup', paymentStatus: 'paid', amountTotalCents: 500, currency: 'usd', customerId: null, paymentIntentId: delivered.payment_intent },
    });
    expect(first.outcome).toBe('credited');
    // An unpaid session and one of a subscription are listed too, and credit nothing.
    listed.sessions = [dropped, delivered, { ...session(account.id, 999), payment_status: 'unpaid' }];
    listed.invoices = [droppedInvoice];

    const report = await reconcile();
    expect(report).toMatchObject({ object: 'payments_reconciliation', ran: true, sessions_listed: 2, invoices_listed: 1, not_credited: [] });
    expect(report.credited.sort()).toEqual([dropped.id, droppedInvoice.id].sort());
    // The list calls asked Stripe for the last three days' complete sessions and paid invoices.
    const since = Math.floor(new Date(report.since).getTime() / 1000);
    expect(Math.abs(since - (Math.floor(Date.now() / 1000) - 3 * 86_400))).toBeLessThan(3600);
    expect(seen).toContain(`GET /v1/checkout/sessions?created[gte]=${since}&status=complete&limit=100`);
    expect(seen).toContain(`GET /v1/invoices?created[gte]=${since}&status=paid&limit=100`);

    const expected = { purchased: BigInt(500 + 1234) * MICRO_PER_CENT, subscription: STARTER.coinsPerPeriod, held: 0n, paid: true };
    expect(await getBalance(orm.em.fork(), account.id)).toEqual(expected);
    const entries = await orm.em.fork().execute<{ kind: string; amount: string; reference: string }[]>(
      'select kind, amount_micro::text as amount, reference from ledger_entries where account_id = ? order by id',
      [account.id],
    );
    expect(entries).toEqual([
      { kind: 'topup', amount: (500n * MICRO_PER_CENT).toString(), reference: delivered.id },
      { kind: 'topup', amount: (1234n * MICRO_PER_CENT).toString(), reference: dropped.id },
      { kind: 'subscription_grant', amount: STARTER.coinsPerPeriod.toString(), reference: droppedInvoice.id },
    ]);
    expect(await audits(dropped.id)).toEqual(['payment.reconciled']);
    expect(await audits(droppedInvoice.id)).toEqual(['payment.reconciled']);

    // A second run: everything listed is credited already.
    const again = await reconcile();
    expect(again).toMatchObject({ ran: true, sessions_listed: 2, invoices_listed: 1, credited: [], not_credited: [] });
    expect(await getBalance(orm.em.fork(), account.id)).toEqual(expected);

    // Stripe's retry of the dropped webhook, late: already credited.
    const late = await handlePaymentEvent(deps, orm.em.fork(), {
      eventId: unique('evt'),
      providerType: 'checkout.session.completed',
      createdAt: new Date(),
      kind: 'checkout_session',
      stage: 'completed',
      session: { id: dropped.id, mode: 'payment', accountId: account.id, purpose: 'topup', paymentStatus: 'paid', amountTotalCents: 1234, currency: 'usd', customerId: null, paymentIntentId: dropped.payment_intent },
    });
    expect(late.outcome).toBe('already_credited');
    expect(await getBalance(orm.em.fork(), account.id)).toEqual(expected);
  });

  it('a 15 USD top-up refunded at Stripe, whose checkout webhook was lost and whose refund came first, is credited by the reconciliation net of the refund: nothing kept', async () => {
    const account = await makeAccount(orm);
    const lost = session(account.id, 1500);
    const refunded = await handlePaymentEvent(deps, orm.em.fork(), {
      eventId: unique('evt'),
      providerType: 'charge.refunded',
      createdAt: new Date(),
      kind: 'refund',
      charge: { id: unique('ch'), paymentIntentId: lost.payment_intent, amountCents: 1500, amountRefundedCents: 1500, currency: 'usd' },
    });
    expect(refunded.outcome).toBe('reversal_pending');
    listed.sessions = [lost];
    listed.invoices = [];
    expect(await reconcile()).toMatchObject({ credited: [lost.id], not_credited: [] });
    expect(await getBalance(orm.em.fork(), account.id)).toEqual({ purchased: 0n, subscription: 0n, held: 0n, paid: true });
    const entries = await orm.em.fork().execute<{ description: string; amount: string }[]>('select description, amount_micro::text as amount from ledger_entries where account_id = ? order by id', [account.id]);
    expect(entries).toEqual([
      { description: 'Top-up', amount: (1500n * MICRO_PER_CENT).toString() },
      { description: 'Refund (Stripe)', amount: (-1500n * MICRO_PER_CENT).toString() },
    ]);
    expect(await audits(lost.id)).toEqual(['payment.refunded', 'payment.reconciled']);
  });

  it('a listed session for an unknown account is audited once, not on every run', async () => {
    const ghost = session(`acct_${randomBytes(8).toString('hex')}`, 700);
    listed.sessions = [ghost];
    listed.invoices = [];
    expect(await reconcile()).toMatchObject({ credited: [], not_credited: [{ id: ghost.id, outcome: 'unknown_account' }] });
    expect(await reconcile()).toMatchObject({ credited: [], not_credited: [{ id: ghost.id, outcome: 'duplicate_event' }] });
    expect(await audits(ghost.id)).toEqual(['payment.not_credited']);
  });
});
