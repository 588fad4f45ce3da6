import type { EntityManager, MikroORM } from '@mikro-orm/postgresql';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { historyCsv } from '../../core/accounts/history-csv.ts';
import { accountUsage, usageInput, usageSchema } from '../../core/accounts/usage.ts';
import type { Credential } from '../../core/auth/principals.ts';
import { startSession } from '../../core/auth/sessions.ts';
import { createContext, type CoreDeps } from '../../core/context.ts';
import { parseCoins } from '../../core/money/coins.ts';
import { release, reserve, settle } from '../../core/money/holds.ts';
import { historyInput, listHistory, walletHistorySchema } from '../../core/money/history.ts';
import { credit } from '../../core/money/wallet.ts';
import { createCaller } from '../../core/router.ts';
import { useTestCatalog } from '../support/catalog.ts';
import { makeAccount, makeKey, openTestOrm, testDeps } from '../support/db.ts';
import { refusal } from '../support/refusal.ts';

/**
 * The account's usage (core/accounts/usage.ts) against a seeded ledger, with exact numbers, and
 * the history in words (core/money/history-details.ts): issue 34.
 */
let orm: MikroORM;
let deps: CoreDeps;
const NOW = new Date('2026-01-20T12:00:00Z');
beforeAll(async () => {
  orm = await openTestOrm();
  await useTestCatalog(orm, 'http://127.0.0.1:9/v1');
  deps = { ...testDeps(orm), clock: () => NOW };
});
afterAll(() => orm.close());

const as = (credential: Credential) => createCaller(createContext(deps, credential));
let serial = 0;
const unique = (tag: string) => `${tag}${process.pid}x${Date.now()}x${++serial}`;
const soon = () => new Date(Date.now() + 60_000);

/** A chat as core/chat leaves it: a hold settled at its cost, and its completion record. */
async function chat(em: EntityManager, a: { accountId: string; keyId: string }, at: string, model: string, input: number, output: number, cost: string) {
  const id = unique('chatcmpl-');
  const { holdId } = await reserve(em, { accountId: a.accountId, amount: parseCoins(cost), reference: id, expiresAt: soon(), metadata: { kind: 'chat', model, key_id: a.keyId } });
  await settle(em, holdId, parseCoins(cost));
  await em.execute(
    `insert into completion_records (id, kind, account_id, key_id, model, prompt_tokens, completion_tokens, cost_micro, finish_reason, created_at, duration_ms)
     values (?, 'chat.completion', ?, ?, ?, ?, ?, ?, 'stop', ?, 5)`,
    [id, a.accountId, a.keyId, model, input, output, parseCoins(cost).toString(), at],
  );
  return id;
}

/** A media job as core/generations leaves it: its price reserved, then charged (succeeded, at `cost` or the full price), released (failed, canceled) or still held (running). */
async function job(em: EntityManager, a: { accountId: string; keyId: string }, at: string, price: string, status: 'succeeded' | 'failed' | 'canceled' | 'running', cost = price) {
  const id = unique('gen_');
  const holdId = `hold_${id}`;
  await reserve(em, { accountId: a.accountId, amount: parseCoins(price), reference: id, holdId, expiresAt: soon(), metadata: { kind: 'generation', model: 'test/image', key_id: a.keyId } });
  const ended = status !== 'running';
  await em.execute(
    `insert into generations (id, account_id, key_id, model_id, status, prompt, settings, inputs, price_micro, cost_micro, hold_id, created_at, completed_at)
     values (?, ?, ?, 'test/image', ?, 'a fox', '{}', '{}', ?, ?, ?, ?, ?)`,
    [id, a.accountId, a.keyId, status, parseCoins(price).toString(), status === 'succeeded' ? parseCoins(cost).toString() : ended ? '0' : null, holdId, at, ended ? at : null],
  );
  if (status === 'succeeded') await settle(em, holdId, parseCoins(cost));
  else if (ended) await release(em, holdId);
  return id;
}

describe('account usage', () => {
  let account: { id: string };
  let laptop: { id: string; name: string; prefix: string };
  let server: { id: string };
  beforeAll(async () => {
    account = await makeAccount(orm, { coins: '100' });
    laptop = await makeKey(orm, account.id, 'laptop');
    server = await makeKey(orm, account.id, 'server');
    const other = await makeAccount(orm, { coins: '100' });
    const otherKey = await makeKey(orm, other.id);
    const em = orm.em.fork();
    const L = { accountId: account.id, keyId: laptop.id };
    const S = { accountId: account.id, keyId: server.id };
    await chat(em, L, '2026-01-10T10:00:00Z', 'test/ok', 100, 20, '1.5');
    await chat(em, S, '2026-01-10T23:59:59.999Z', 'test/ok', 50, 10, '0.25');
    await chat(em, L, '2026-01-12T00:00:00Z', 'test/premium', 1000, 500, '3');
    await chat(em, L, '2026-01-15T00:00:00Z', 'test/ok', 1, 1, '9'); // after the range
    await job(em, S, '2026-01-11T08:00:00Z', '5', 'succeeded');
    await job(em, L, '2026-01-11T09:00:00Z', '4', 'failed');
    await job(em, L, '2026-01-09T23:59:59Z', '7', 'succeeded'); // before the range
    await chat(em, { accountId: other.id, keyId: otherKey.id }, '2026-01-10T10:00:00Z', 'test/ok', 999, 999, '2'); // another account
  });

  it('sums spend, requests and tokens per day, per model and per key, in the range only', async () => {
    const usage = usageSchema.parse(await accountUsage(orm.em.fork(), account.id, usageInput.parse({ from: '2026-01-10', to: '2026-01-14' }), NOW));
    expect(usage).toMatchObject({ object: 'usage', from: '2026-01-10', to: '2026-01-14', totals: { requests: 5, spent_coins: 9.75, input_tokens: 1150, output_tokens: 530 } });
    expect(usage.days).toEqual([
      { day: '2026-01-10', requests: 2, spent_coins: 1.75, input_tokens: 150, output_tokens: 30 },
      { day: '2026-01-11', requests: 2, spent_coins: 5, input_tokens: 0, output_tokens: 0 },
      { day: '2026-01-12', requests: 1, spent_coins: 3, input_tokens: 1000, output_tokens: 500 },
      { day: '2026-01-13', requests: 0, spent_coins: 0, input_tokens: 0, output_tokens: 0 },
      { day: '2026-01-14', requests: 0, spent_coins: 0, input_tokens: 0, output_tokens: 0 },
    ]);
    expect(usage.models).toEqual([
      { model: 'test/image', kind: 'media', requests: 2, spent_coins: 5, input_tokens: 0, output_tokens: 0 },
      { model: 'test/premium', kind: 'chat', requests: 1, spent_coins: 3, input_tokens: 1000, output_tokens: 500 },
      { model: 'test/ok', kind: 'chat', requests: 2, spent_coins: 1.75, input_tokens: 150, output_tokens: 30 },
    ]);
    expect(usage.keys).toEqual([
      { key_id: server.id, name: 'server', prefix: expect.any(String), revoked: false, requests: 2, spent_coins: 5.25, input_tokens: 50, output_tokens: 10 },
      { key_id: laptop.id, name: 'laptop', prefix: laptop.prefix, revoked: false, requests: 3, spent_coins: 4.5, input_tokens: 1100, output_tokens: 520 },
    ]);
  });

  it('defaults to the last 30 days; a session reads its own account only', async () => {
    const mine = await as({ kind: 'session', token: (await sessionFor(account.id)).token }).account.usage({});
    expect(mine).toMatchObject({ from: '2025-12-22', to: '2026-01-20' });
    expect(mine.days).toHaveLength(30);
    expect(mine.totals).toEqual({ requests: 7, spent_coins: 25.75, input_tokens: 1151, output_tokens: 531 });
  });

  it('refuses a range core cannot read, naming the field', async () => {
    const u = (input: Record<string, string>) => refusal(accountUsage(orm.em.fork(), account.id, usageInput.parse(input), NOW));
    expect(await u({ from: '2026-01-14', to: '2026-01-10' })).toMatchObject({ code: 'invalid_request', param: 'from' });
    expect(await u({ from: '2026-02-30', to: '2026-03-01' })).toMatchObject({ code: 'invalid_request', param: 'from' });
    expect(await u({ from: '2025-01-01', to: '2026-01-02' })).toMatchObject({ code: 'invalid_request', param: 'from', message: expect.stringMatching(/367 days.*366/) });
    expect(await accountUsage(orm.em.fork(), account.id, usageInput.parse({ from: '2025-01-02', to: '2026-01-02' }), NOW)).toMatchObject({ from: '2025-01-02' });
    expect(usageInput.safeParse({ from: '10/01/2026' }).success).toBe(false);
    const session = await sessionFor(account.id);
    expect(await refusal(as({ kind: 'session', token: session.token }).account.usage({ to: 'tomorrow' }))).toMatchObject({ code: 'invalid_request', param: 'to' });
    expect(await refusal(as({ kind: 'session', token: null }).account.usage({}))).toMatchObject({ code: 'unauthorized' });
  });
});

/** A session of the account (the pages' credential), made as sign-in does. */
async function sessionFor(accountId: string) {
  return startSession(orm.em.fork(), accountId, NOW);
}

describe('the history in words', () => {
  it('a failed job: its charge says it failed and was refunded, its refund names the job; both carry the job id', async () => {
    const account = await makeAccount(orm, { coins: '50' });
    const key = await makeKey(orm, account.id);
    const id = await job(orm.em.fork(), { accountId: account.id, keyId: key.id }, new Date().toISOString(), '4', 'failed');
    const { data } = walletHistorySchema.parse(await listHistory(orm.em.fork(), account.id, historyInput.parse({})));
    const [refund, charge] = data;
    expect(charge).toMatchObject({ type: 'api_usage', amount_coins: -4, generation_id: id, model: 'test/image', key_id: key.id, details: `Image job ${id} on test/image — failed, refunded 4 coins` });
    expect(refund).toMatchObject({ type: 'refund', amount_coins: 4, generation_id: id, details: `Refund of image job ${id} on test/image (the job failed)` });
  });

  it('a chat names its model and tokens', async () => {
    const account = await makeAccount(orm, { coins: '50' });
    const key = await makeKey(orm, account.id);
    const id = await chat(orm.em.fork(), { accountId: account.id, keyId: key.id }, new Date().toISOString(), 'test/ok', 120, 45, '0.5');
    const [row] = (await listHistory(orm.em.fork(), account.id, historyInput.parse({}))).data;
    expect(row).toMatchObject({ reference: id, type: 'api_usage', model: 'test/ok', input_tokens: 120, output_tokens: 45, key_id: key.id, details: 'Chat on test/ok: 120 input + 45 output tokens' });
  });

  it('a top-up shows its card payment in USD; an operator credit and a correction say so, without the operator\'s private reason', async () => {
    const account = await makeAccount(orm);
    const em = orm.em.fork();
    const session = unique('cs_test_');
    const paid = await credit(em, { accountId: account.id, kind: 'topup', amount: parseCoins('10000'), reference: session, idempotencyKey: session, description: 'Top-up' });
    await em.execute(
      `insert into payments (id, checkout_session_id, account_id, amount_cents, currency, coins_micro, event_id, ledger_entry_id) values (?, ?, ?, 1000, 'usd', ?, ?, ?)`,
      [unique('pay_'), session, account.id, parseCoins('10000').toString(), unique('evt_'), paid.entryId],
    );
    const operator = as({ kind: 'internal' });
    await operator.wallet.topUp({ account: account.id, coins: '3' });
    await operator.admin.actions.adjustBalance({ account: account.id, coins: '-2', reason: 'chargeback suspected, internal note', idempotency_key: unique('k') });
    const { data } = await listHistory(orm.em.fork(), account.id, historyInput.parse({}));
    expect(data.map((r) => [r.type, r.details])).toEqual([
      ['adjustment', 'Balance correction by the operator (down)'],
      ['topup', 'Coins added by the operator'],
      ['topup', 'Card payment of 10.00 USD'],
    ]);
    expect(JSON.stringify(data)).not.toContain('chargeback');
  });

  it("an adjustment with a note to the customer reads the note, never the operator's reason; an empty note is refused naming it", async () => {
    const account = await makeAccount(orm, { coins: '1' });
    const operator = as({ kind: 'internal' });
    await operator.admin.actions.adjustBalance({ account: account.id, coins: '+5', reason: 'outage 27 Nov, ticket 4411', customer_note: 'Goodwill credit for the outage of 27 Nov', idempotency_key: unique('k') });
    const { data } = await listHistory(orm.em.fork(), account.id, historyInput.parse({}));
    expect(data[0]).toMatchObject({ type: 'adjustment', details: 'Balance correction by the operator (up): Goodwill credit for the outage of 27 Nov' });
    expect(JSON.stringify(data)).not.toContain('ticket 4411');
    await expect(operator.admin.actions.adjustBalance({ account: account.id, coins: '+1', reason: 'r', customer_note: '   ', idempotency_key: unique('k') })).rejects.toMatchObject({
      message: expect.stringContaining('customer_note'),
    });
  });

  it('the CSV keeps its nine columns first, adds the words after them, and filters by days, model and key', async () => {
    const account = await makeAccount(orm, { coins: '50' });
    const a = await makeKey(orm, account.id, 'a');
    const b = await makeKey(orm, account.id, 'b');
    const em = orm.em.fork();
    const first = await chat(em, { accountId: account.id, keyId: a.id }, new Date().toISOString(), 'test/ok', 10, 5, '1');
    const second = await chat(em, { accountId: account.id, keyId: b.id }, new Date().toISOString(), 'test/premium', 20, 6, '2');
    const all = await historyCsv(orm.em.fork(), account.id);
    const lines = all.csv.trimEnd().split('\r\n');
    expect(lines[0]).toBe('id,created_at,type,description,amount_coins,balance_after_coins,reference,app_connection_id,receipt_url,details,model,input_tokens,output_tokens,generation_id,key_id,user_id');
    expect(lines).toHaveLength(4); // the two chats and the fixture's top-up
    expect(lines[1]!.split(',').slice(2, 15)).toEqual(['api_usage', 'API usage', '-2', '47', second, '', '', 'Chat on test/premium: 20 input + 6 output tokens', 'test/premium', '20', '6', '', b.id]);

    const today = new Date().toISOString().slice(0, 10);
    const byKey = await historyCsv(orm.em.fork(), account.id, { filters: { key: a.id }, now: new Date() });
    expect(byKey.rows).toBe(1);
    expect(byKey.csv).toContain(first);
    const byModel = await historyCsv(orm.em.fork(), account.id, { filters: { model: 'test/premium', from: today, to: today }, now: new Date() });
    expect(byModel).toMatchObject({ rows: 1, filename: `wallet-history-${today}-to-${today}.csv` });
    expect(byModel.csv).toContain(second);
    const before = await historyCsv(orm.em.fork(), account.id, { filters: { to: '2020-01-01' }, now: new Date() });
    expect(before.rows).toBe(0);
  });

  it('every other kind of row: a job done below its price, canceled or running, an operator\'s refund, an automatic top-up, a response', async () => {
    const account = await makeAccount(orm, { coins: '100' });
    const key = await makeKey(orm, account.id);
    const em = orm.em.fork();
    const a = { accountId: account.id, keyId: key.id };
    const now = new Date().toISOString();
    const cheaper = await job(em, a, now, '10', 'succeeded', '7.5');
    const canceled = await job(em, a, now, '3', 'canceled');
    const running = await job(em, a, now, '2', 'running');
    const done = await job(em, a, now, '6', 'succeeded');
    await as({ kind: 'internal' }).admin.actions.refundGeneration({ id: done, reason: 'the image was blank' });
    const intent = unique('pi_');
    const paid = await credit(em, { accountId: account.id, kind: 'topup', amount: parseCoins('20'), reference: intent, idempotencyKey: intent, description: 'Top-up' });
    await em.execute(
      `insert into payments (id, checkout_session_id, payment_intent_id, source, account_id, amount_cents, currency, coins_micro, event_id, ledger_entry_id) values (?, null, ?, 'auto_top_up', ?, 2005, 'eur', ?, ?, ?)`,
      [unique('pay_'), intent, account.id, parseCoins('20').toString(), unique('evt_'), paid.entryId],
    );
    const respId = unique('resp_');
    const { holdId } = await reserve(em, { accountId: account.id, amount: parseCoins('1'), reference: respId, expiresAt: soon(), metadata: { kind: 'chat', model: 'test/ok' } });
    await settle(em, holdId, parseCoins('0.5'));
    await em.execute(
      `insert into completion_records (id, kind, account_id, key_id, model, prompt_tokens, completion_tokens, cost_micro, finish_reason, created_at, duration_ms) values (?, 'response', ?, ?, 'test/ok', 7, 8, 500000, 'stop', now(), 1)`,
      [respId, account.id, key.id],
    );
    const { data } = await listHistory(orm.em.fork(), account.id, historyInput.parse({ limit: 20 }));
    const words = data.map((r) => r.details);
    expect(words.slice(0, 8)).toEqual([
      'Response on test/ok: 7 input + 8 output tokens',
      'Automatic top-up: card payment of 20.05 EUR',
      `Refund of image job ${done} on test/image by the operator`,
      `Image job ${done} on test/image — done`,
      `Image job ${running} on test/image — running`,
      `Refund of image job ${canceled} on test/image (the job was canceled)`,
      `Image job ${canceled} on test/image — canceled, refunded 3 coins`,
      `Refund of image job ${cheaper} on test/image (the unused part of its price)`,
    ]);
    expect(words[8]).toBe(`Image job ${cheaper} on test/image — done, refunded 2.5 coins`);
    expect(data.find((r) => r.details.includes('by the operator'))).toMatchObject({ type: 'refund', generation_id: done, amount_coins: 6 });
    expect(JSON.stringify(data)).not.toContain('blank');
  });

  it('a job still running when its hold was released (the sweep): the refund gives no reason it cannot know', async () => {
    const account = await makeAccount(orm, { coins: '20' });
    const key = await makeKey(orm, account.id);
    const em = orm.em.fork();
    const id = await job(em, { accountId: account.id, keyId: key.id }, new Date().toISOString(), '2', 'running');
    await release(em, `hold_${id}`);
    const [refund, charge] = (await listHistory(orm.em.fork(), account.id, historyInput.parse({}))).data;
    expect(charge).toMatchObject({ type: 'api_usage', generation_id: id, details: `Image job ${id} on test/image — running` });
    expect(refund).toMatchObject({ type: 'refund', amount_coins: 2, generation_id: id, details: `Refund of image job ${id} on test/image` });
  });

  it("a job's hold whose job record is not found still reads as that job, by its id, with no model, status or reason made up", async () => {
    const account = await makeAccount(orm, { coins: '20' });
    const em = orm.em.fork();
    const id = unique('gen_');
    const { holdId } = await reserve(em, { accountId: account.id, amount: parseCoins('4'), reference: id, holdId: `hold_${id}`, expiresAt: soon(), metadata: { kind: 'generation', model: 'test/image' } });
    await settle(em, holdId, parseCoins('1'));
    const [refund, charge] = (await listHistory(orm.em.fork(), account.id, historyInput.parse({}))).data;
    expect(charge).toMatchObject({ type: 'api_usage', amount_coins: -4, generation_id: id, model: null, key_id: null, details: `Job ${id}` });
    expect(refund).toMatchObject({ type: 'refund', amount_coins: 3, generation_id: id, model: null, details: `Refund of job ${id}` });
  });

  it("a response charged under the chat completion it ran reads as a response; a chat or response whose record is not found says which it was", async () => {
    const account = await makeAccount(orm, { coins: '20' });
    const key = await makeKey(orm, account.id);
    const em = orm.em.fork();
    const charge = async (reference: string) => {
      const { holdId } = await reserve(em, { accountId: account.id, amount: parseCoins('1'), reference, expiresAt: soon(), metadata: { kind: 'chat', model: 'test/ok' } });
      await settle(em, holdId, parseCoins('0.5'));
    };
    // core/chat/responses.ts: the charge's reference is the chat completion, the record is under the response's id (the same random part).
    const ran = unique('chatcmpl-');
    await charge(ran);
    await em.execute(
      `insert into completion_records (id, kind, account_id, key_id, model, prompt_tokens, completion_tokens, cost_micro, finish_reason, created_at, duration_ms) values (?, 'response', ?, ?, 'test/ok', 7, 8, 500000, 'stop', now(), 1)`,
      [ran.replace('chatcmpl-', 'resp_'), account.id, key.id],
    );
    const lostResponse = unique('resp_');
    await charge(lostResponse);
    const lostChat = unique('chatcmpl-');
    await charge(lostChat);
    const { data } = await listHistory(orm.em.fork(), account.id, historyInput.parse({}));
    expect(data.slice(0, 3).map((r) => [r.reference, r.details, r.model])).toEqual([
      [lostChat, `Chat ${lostChat}`, null],
      [lostResponse, `Response ${lostResponse}`, null],
      [ran, 'Response on test/ok: 7 input + 8 output tokens', 'test/ok'],
    ]);
    expect(data[2]).toMatchObject({ input_tokens: 7, output_tokens: 8, key_id: key.id });
  });

  it('finds the payment of a top-up whose reference holds a double quote or a backslash (the look-up quotes them)', async () => {
    const account = await makeAccount(orm);
    const em = orm.em.fork();
    const session = unique('cs_test_"quoted"\\back\\slash_');
    const paid = await credit(em, { accountId: account.id, kind: 'topup', amount: parseCoins('10000'), reference: session, idempotencyKey: session, description: 'Top-up' });
    await em.execute(
      `insert into payments (id, checkout_session_id, account_id, amount_cents, currency, coins_micro, event_id, ledger_entry_id) values (?, ?, ?, 1000, 'usd', ?, ?, ?)`,
      [unique('pay_'), session, account.id, parseCoins('10000').toString(), unique('evt_'), paid.entryId],
    );
    const [row] = (await listHistory(orm.em.fork(), account.id, historyInput.parse({}))).data;
    expect(row).toMatchObject({ type: 'topup', reference: session, details: 'Card payment of 10.00 USD' });
  });

  it('a refund by the operator that names no job (mas_adjust, as a script of theirs may call it) says so', async () => {
    const account = await makeAccount(orm, { coins: '1' });
    const ref = unique('goodwill_');
    await orm.em.fork().execute('select * from mas_adjust(?, ?, ?::bigint, ?, ?, ?)', [account.id, 'refund', parseCoins('2').toString(), ref, ref, 'Refund']);
    const [row] = (await listHistory(orm.em.fork(), account.id, historyInput.parse({}))).data;
    expect(row).toMatchObject({ type: 'refund', amount_coins: 2, reference: ref, generation_id: null, details: 'Refund by the operator' });
  });
});
