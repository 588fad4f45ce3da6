import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import Stripe from 'stripe';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { MikroORM } from '@mikro-orm/postgresql';
import { openOrm } from '../../core/orm.ts';
import { createFreshDatabase, walletInvariants } from '../support/db.ts';
import { freePort, serverArgs, spawnProject, type Spawned } from '../support/process.ts';
import { reportSection, scale, table } from './support/results.ts';

/**
 * Issue 31: the API process (main.ts, as `npm start` runs it) is SIGKILLed after a Stripe
 * webhook's transaction committed and before Stripe got the answer. Stripe sees a connection
 * cut and retries the delivery; the started-again API answers that retry 200 and credits
 * nothing more. Deterministic: the webhook goes through a TCP relay that, at the first byte of
 * the API's answer (written only after the commit), SIGKILLs the API and cuts Stripe's
 * connection without passing the answer on. Each round also sends the same session under a
 * second event id (as `async_payment_succeeded` would), which credits nothing either.
 */
const ROUNDS = scale(3, 10);
const SECRET = 'whsec_reliability_payments';
const CENTS = 2_345;
/** 1 USD = 1000 coins, so a cent is 10 coins, and a coin 1,000,000 micro-coins. */
const CREDIT_MICRO = BigInt(CENTS) * 10n * 1_000_000n;

let db: Awaited<ReturnType<typeof createFreshDatabase>>;
let dataDir: string;
let port: number;
let server: Spawned | undefined;
let sql: pg.Client;
let orm: MikroORM;
let accountId: string;

async function startApi(): Promise<Spawned> {
  const proc = spawnProject(serverArgs(), {
    DATABASE_URL: db.url,
    DATA_DIR: dataDir,
    PORT: String(port),
    HOST: '127.0.0.1',
    LOG_LEVEL: 'warn',
    TEMPORAL_ADDRESS: inject('temporalAddress'),
    TEMPORAL_TASK_QUEUE: `rel-payments-crash-${process.pid}`,
    STRIPE_SECRET_KEY: 'sk_test_ReliabilityPayments',
    STRIPE_WEBHOOK_SECRET: SECRET,
  });
  await proc.waitFor(/listening on/, 120_000);
  return proc;
}

beforeAll(async () => {
  db = await createFreshDatabase();
  dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'mas-rel-payments-'));
  port = await freePort();
  server = await startApi();
  sql = new pg.Client(db.url);
  await sql.connect();
  orm = await openOrm({ url: db.url, poolMax: 2 });
  accountId = (await sql.query<{ id: string }>(`select id from accounts where email = 'demo@example.com'`)).rows[0]!.id;
});
afterAll(async () => {
  if (server) {
    server.child.kill('SIGKILL');
    await server.exited;
  }
  await orm?.close();
  await sql?.end();
  await db?.drop();
  if (dataDir) await fs.rm(dataDir, { recursive: true, force: true });
});

const unique = (prefix: string) => `${prefix}_test_${randomBytes(8).toString('hex')}`;

/** A paid top-up Checkout Session as the service makes it (adapters/payments/stripe.ts) and Stripe reports it. */
function completedEvent(sessionId: string, type = 'checkout.session.completed'): string {
  const session = {
    id: sessionId,
    object: 'checkout.session',
    mode: 'payment',
    client_reference_id: accountId,
    metadata: { mas_account_id: accountId, mas_purpose: 'topup' },
    payment_status: 'paid',
    status: 'complete',
    amount_total: CENTS,
    currency: 'usd',
    customer: 'cus_test_reliability',
    payment_intent: unique('pi'),
  };
  return JSON.stringify({ id: unique('evt'), object: 'event', api_version: Stripe.API_VERSION, type, created: Math.floor(Date.now() / 1000), livemode: false, data: { object: session } });
}

/** One delivery as Stripe makes it, to `targetPort`: the answer, or `cut` when the connection broke first. */
function deliver(targetPort: number, payload: string): Promise<{ status: number; body: string } | 'cut'> {
  const signature = Stripe.webhooks.generateTestHeaderString({ payload, secret: SECRET, timestamp: Math.floor(Date.now() / 1000) });
  return new Promise((resolve) => {
    const req = http.request(`http://127.0.0.1:${targetPort}/webhooks/stripe`, {
      method: 'POST',
      headers: { 'content-type': 'application/json; charset=utf-8', 'stripe-signature': signature, 'content-length': Buffer.byteLength(payload), connection: 'close' },
    });
    req.on('response', (res) => {
      let body = '';
      res.on('data', (c: Buffer) => (body += c.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      res.on('error', () => resolve('cut'));
    });
    req.on('error', () => resolve('cut'));
    req.end(payload);
  });
}

/**
 * A relay to the API for one delivery: the request passes through; at the first byte of the
 * API's answer the API is SIGKILLed and Stripe's connection is cut, the answer never passed on.
 */
async function relayThatKillsOnAnswer(victim: Spawned): Promise<{ port: number; killedAnswerBytes: () => number; close: () => Promise<void> }> {
  let held = 0;
  const relay = net.createServer((client) => {
    const upstream = net.connect(port, '127.0.0.1');
    client.pipe(upstream);
    upstream.once('data', (chunk: Buffer) => {
      held = chunk.length;
      victim.child.kill('SIGKILL');
      client.destroy();
      upstream.destroy();
    });
    client.on('error', () => upstream.destroy());
    upstream.on('error', () => client.destroy());
  });
  await new Promise<void>((r) => relay.listen(0, '127.0.0.1', r));
  return {
    port: (relay.address() as net.AddressInfo).port,
    killedAnswerBytes: () => held,
    close: () => new Promise<void>((r) => relay.close(() => r())),
  };
}

/** The one number a `select count(*) …` answers. */
const count = async (q: string, params: unknown[]) => Number(Object.values((await sql.query<Record<string, string>>(q, params)).rows[0]!)[0]);

describe('the API SIGKILLed between a webhook commit and its answer', () => {
  it("Stripe's retry is answered 200 and credits nothing more; a second event of the session neither", async () => {
    const rows: (string | number)[][] = [];
    const start = (await walletInvariants(orm, accountId)).balance.purchased;
    for (let round = 1; round <= ROUNDS; round++) {
      const sessionId = unique('cs');
      const payload = completedEvent(sessionId);
      const relay = await relayThatKillsOnAnswer(server!);
      const first = await deliver(relay.port, payload);
      await server!.exited;
      await relay.close();
      // Stripe saw no answer; the transaction had committed all the same.
      expect(first).toBe('cut');
      expect(relay.killedAnswerBytes()).toBeGreaterThan(0);
      expect(await count('select count(*) from payments where checkout_session_id = $1', [sessionId])).toBe(1);

      server = await startApi();
      const retry = await deliver(port, payload);
      expect(retry).not.toBe('cut');
      const retried = retry as { status: number; body: string };
      expect(retried.status).toBe(200);
      expect(JSON.parse(retried.body)).toMatchObject({ object: 'payment_webhook', outcome: 'duplicate_event' });
      const second = await deliver(port, completedEvent(sessionId, 'checkout.session.async_payment_succeeded'));
      expect(second).not.toBe('cut');
      expect(JSON.parse((second as { body: string }).body)).toMatchObject({ outcome: 'already_credited' });

      const credits = await count(`select count(*) from ledger_entries where account_id = $1 and reference = $2 and pocket = 'purchased'`, [accountId, sessionId]);
      expect(credits).toBe(1);
      rows.push([round, 'cut', `${retried.status} ${(JSON.parse(retried.body) as { outcome: string }).outcome}`, 'already_credited', credits]);
    }
    const end = await walletInvariants(orm, accountId);
    // Each round's session credited once: CENTS × 10 coins, computed here, never read from the API.
    expect(end.balance.purchased - start).toBe(CREDIT_MICRO * BigInt(ROUNDS));
    expect(end.ledgerByPocket.purchased).toBe(end.balance.purchased);
    expect(await count(`select count(*) from payments where account_id = $1`, [accountId])).toBe(ROUNDS);

    await reportSection(
      'payments-crash',
      10,
      `## Payments: the API killed between a webhook's commit and its answer\n\n` +
        `${ROUNDS} rounds: each delivers a signed \`checkout.session.completed\` of ${CENTS} cents through a relay that SIGKILLs the API at the first byte of its answer ` +
        `(written after the commit) and cuts the delivery; the API is started again, the same delivery is retried, and the same session is sent under a second event id.\n\n` +
        `${table(['round', 'first delivery', 'retry', 'second event id', 'credits of the session'], rows)}\n\n` +
        `The purchased pocket grew by exactly ${ROUNDS} × ${CENTS} cents × 10 coins, and equals the sum of its ledger entries.\n`,
    );
  });
});
