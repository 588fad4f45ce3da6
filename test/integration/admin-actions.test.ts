import type { MikroORM } from '@mikro-orm/postgresql';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { runCli, type CliConnection } from '../../adapters/cli/mas.ts';
import { createProviderRegistry } from '../../adapters/providers/registry.ts';
import { loadCatalogFile } from '../../config/catalog.ts';
import { startSession } from '../../core/auth/sessions.ts';
import type { Credential } from '../../core/auth/principals.ts';
import { seedModels } from '../../core/catalog/catalog.ts';
import { createContext, type CoreDeps } from '../../core/context.ts';
import { randomBase62 } from '../../core/ids.ts';
import { parseCoins } from '../../core/money/coins.ts';
import { reserve, settle } from '../../core/money/holds.ts';
import { createCaller } from '../../core/router.ts';
import { makeAppConnection } from '../support/apps.ts';
import { makeAccount, makeKey, openTestOrm, testDeps, uniqueEmail, walletInvariants } from '../support/db.ts';
import { refusal } from '../support/refusal.ts';

/**
 * The admin API's actions through core, as GraphQL, the admin pages and the CLI call them:
 * each moves money only through the ledger, writes one audit entry in its own transaction,
 * and is refused to a viewer.
 */
let orm: MikroORM;
let deps: CoreDeps;
beforeAll(async () => {
  orm = await openTestOrm();
  await seedModels(orm.em.fork(), await loadCatalogFile('config/models.yaml', 50n));
  deps = testDeps(orm, { providers: createProviderRegistry({ local: { kind: 'local' } }) });
});
afterAll(() => orm.close());

const as = (credential: Credential) => createCaller(createContext(deps, credential, { requestId: 'req_test' }));
const internal = () => as({ kind: 'internal' });
let operatorToken = '';
let viewerToken = '';
const operator = () => as({ kind: 'admin', token: operatorToken });
const viewer = () => as({ kind: 'admin', token: viewerToken });

const auditOf = async (targetId: string) =>
  orm.em.fork().execute<{ actor_type: string; actor_id: string | null; action: string; reason: string | null; before: unknown; after: unknown; request_id: string | null }[]>(
    'select actor_type, actor_id, action, reason, before, after, request_id from admin_audit_log where target_id = ? order by id',
    [targetId],
  );
const coinsOf = async (accountId: string) => (await internal().wallet.balanceOf({ account: accountId })).coins;

beforeAll(async () => {
  operatorToken = (await internal().admins.createToken({ name: 'ops', role: 'operator' })).token;
  viewerToken = (await internal().admins.createToken({ name: 'dash', role: 'viewer' })).token;
});

/** A succeeded job of the account that was charged `coins`. */
async function succeededJob(accountId: string, keyId: string, coins: string) {
  const em = orm.em.fork();
  const id = `gen_${randomBase62(24)}`;
  const holdId = `hold_${id}`;
  await reserve(em, { accountId, amount: parseCoins(coins), reference: id, holdId, expiresAt: new Date(Date.now() + 3600_000), metadata: { kind: 'generation', model: 'mas/image-demo', key_id: keyId } });
  await em.execute(
    `insert into generations (id, account_id, key_id, model_id, prompt, settings, inputs, price_micro, hold_id) values (?, ?, ?, 'mas/image-demo', 'a cat', '{}', '{}', ?::bigint, ?)`,
    [id, accountId, keyId, parseCoins(coins).toString(), holdId],
  );
  await settle(em, holdId, parseCoins(coins));
  await em.execute(`update generations set status = 'succeeded', cost_micro = price_micro, completed_at = now() where id = ?`, [id]);
  return id;
}

describe('admin actions', () => {
  it('adjusts a balance up and down with a reason, once per idempotency key, audited with before and after', async () => {
    const account = await makeAccount(orm, { coins: '10', subscriptionCoins: '5' });
    const up = await operator().admin.actions.adjustBalance({ account: account.email, coins: '+2.5', reason: 'goodwill for an outage', idempotency_key: 'adj-1' });
    expect(up).toMatchObject({ applied: true, coins: 2.5, balance: { coins: 17.5 } });
    const again = await operator().admin.actions.adjustBalance({ account: account.id, coins: '2.5', reason: 'goodwill for an outage', idempotency_key: 'adj-1' });
    expect(again).toMatchObject({ applied: false, balance: { coins: 17.5 } });
    // Down: the purchased coins first (12.5), then the subscription coins.
    const down = await operator().admin.actions.adjustBalance({ account: account.id, coins: '-14', reason: 'duplicate top-up reversed', idempotency_key: 'adj-2' });
    expect(down.balance).toMatchObject({ coins: 3.5, purchased_coins: 0, subscription_coins: 3.5 });
    expect(await refusal(operator().admin.actions.adjustBalance({ account: account.id, coins: '-4', reason: 'too much', idempotency_key: 'adj-3' }))).toMatchObject({
      code: 'invalid_request',
      param: 'coins',
      reason: 'insufficient_balance',
    });
    expect(await refusal(operator().admin.actions.adjustBalance({ account: account.id, coins: '1', reason: '', idempotency_key: 'adj-4' }))).toMatchObject({ param: 'reason' });
    expect(await coinsOf(account.id)).toBe(3.5);
    await walletInvariants(orm, account.id);

    const audit = await auditOf(account.id);
    expect(audit.map((a) => a.action)).toEqual(['wallet.adjust', 'wallet.adjust']);
    expect(audit[0]).toMatchObject({ actor_type: 'admin_token', reason: 'goodwill for an outage', request_id: 'req_test', before: { purchased_coins: 10, subscription_coins: 5 }, after: { purchased_coins: 12.5, coins: 2.5 } });
    // The customer sees one row per correction, even when it took from both pockets.
    const history = await as({ kind: 'bearer', token: (await makeKey(orm, account.id)).key }).wallet.history({ limit: 10 });
    expect(history.data.filter((r) => r.type === 'adjustment').map((r) => [r.amount_coins, r.description])).toEqual([
      [-14, 'Balance adjustment'],
      [2.5, 'Balance adjustment'],
    ]);
  });

  it('refunds a succeeded job once, with a reason; a job that did not succeed has nothing to refund', async () => {
    const account = await makeAccount(orm, { coins: '10' });
    const key = await makeKey(orm, account.id);
    const job = await succeededJob(account.id, key.id, '4');
    expect(await coinsOf(account.id)).toBe(6);
    const refund = await operator().admin.actions.refundGeneration({ id: job, reason: 'the image was blank' });
    expect(refund).toMatchObject({ applied: true, refunded_coins: 4 });
    expect((await operator().admin.actions.refundGeneration({ id: job, reason: 'the image was blank' })).applied).toBe(false);
    expect(await coinsOf(account.id)).toBe(10);
    const history = await as({ kind: 'bearer', token: key.key }).wallet.history({ limit: 5 });
    expect(history.data[0]).toMatchObject({ type: 'refund', amount_coins: 4, reference: job });
    expect((await auditOf(job)).map((a) => [a.action, a.reason])).toEqual([['generation.refund', 'the image was blank']]);
    await orm.em.fork().execute(`update generations set status = 'failed' where id = ?`, [job]);
    expect(await refusal(operator().admin.actions.refundGeneration({ id: job, reason: 'again please' }))).toMatchObject({ code: 'conflict', reason: 'nothing_to_refund' });
    await walletInvariants(orm, account.id);
  });

  it('revokes any key and any app connection; disables and enables an account', async () => {
    const account = await makeAccount(orm, { coins: '10' });
    const key = await makeKey(orm, account.id);
    const app = await makeAppConnection(orm, account.id);
    const asKey = () => as({ kind: 'bearer', token: key.key });
    // A first paid chat puts the key in the chat path's cache of recent keys.
    await asKey().chat.complete({ model: 'mas/echo', messages: [{ role: 'user', content: 'hi' }], max_tokens: 5 });
    const session = await startSession(orm.em.fork(), account.id, new Date());

    await operator().admin.actions.disableAccount({ account: account.id, reason: 'chargeback under review' });
    expect(await refusal(asKey().wallet.balance())).toMatchObject({ code: 'unauthorized' });
    // The cached key is refused by the reservation itself, and nothing is held.
    expect(await refusal(asKey().chat.complete({ model: 'mas/echo', messages: [{ role: 'user', content: 'hi' }], max_tokens: 5 }))).toMatchObject({ code: 'unauthorized' });
    expect(await refusal(as({ kind: 'session', token: session.token }).accounts.me())).toMatchObject({ code: 'unauthorized' });
    expect(await refusal(as({ kind: 'none' }).accounts.signIn({ email: account.email, password: 'whatever long enough' }))).toMatchObject({ code: expect.any(String) });
    expect((await internal().wallet.balanceOf({ account: account.id })).held_coins).toBe(0);

    await operator().admin.actions.enableAccount({ account: account.id, reason: 'review done' });
    expect((await asKey().wallet.balance()).coins).toBeGreaterThan(9);

    await operator().admin.actions.revokeKey({ id: key.key.length > 0 ? key.id : '', reason: 'leaked on GitHub' });
    expect(await refusal(asKey().wallet.balance())).toMatchObject({ code: 'unauthorized' });
    await operator().admin.actions.revokeAppConnection({ id: app.id, reason: 'unknown app' });
    const [conn] = await orm.em.fork().execute<{ revoked_at: string | null; key_revoked: string | null }[]>(
      'select c.revoked_at, k.revoked_at as key_revoked from app_connections c join api_keys k on k.id = c.key_id where c.id = ?',
      [app.id],
    );
    expect(conn!.revoked_at).not.toBeNull();
    expect(conn!.key_revoked).not.toBeNull();

    expect((await auditOf(account.id)).map((a) => a.action)).toEqual(['account.disable', 'account.enable']);
    expect((await auditOf(key.id)).map((a) => [a.action, a.reason])).toEqual([['key.revoke', 'leaked on GitHub']]);
    expect((await auditOf(app.id)).map((a) => a.action)).toEqual(['app_connection.revoke']);
  });

  it('a viewer reads but cannot act; API keys and account sessions are not admins', async () => {
    const account = await makeAccount(orm, { coins: '1' });
    expect(await viewer().admin.whoami()).toMatchObject({ role: 'viewer', via: 'token' });
    expect(await refusal(viewer().admin.actions.adjustBalance({ account: account.id, coins: '1', reason: 'a viewer tries', idempotency_key: 'v-1' }))).toMatchObject({
      code: 'forbidden',
      reason: 'operator_role_required',
    });
    const key = await makeKey(orm, account.id);
    expect(await refusal(as({ kind: 'bearer', token: key.key }).admin.whoami())).toMatchObject({ code: 'unauthorized' });
    expect(await refusal(as({ kind: 'admin', token: key.key }).admin.whoami())).toMatchObject({ code: 'unauthorized' });
    expect(await auditOf(account.id)).toEqual([]);
  });

  it('the operator actions of the CLI and the API are audited too, and the audit log is append-only', async () => {
    const created = await internal().accounts.create({ email: uniqueEmail('audited') });
    await internal().wallet.topUp({ account: created.id, coins: '5', idempotency_key: 'pay-1' });
    await internal().wallet.topUp({ account: created.id, coins: '5', idempotency_key: 'pay-1' });
    await operator().wallet.grantSubscription({ account: created.id, coins: '2' });
    const key = await operator().keys.create({ account: created.id, name: 'ops key' });
    await operator().keys.revoke({ id: key.id });
    expect((await auditOf(created.id)).map((a) => [a.action, a.actor_type])).toEqual([
      ['account.create', 'internal'],
      ['wallet.top_up', 'internal'],
      ['wallet.grant_subscription', 'admin_token'],
    ]);
    expect((await auditOf(key.id)).map((a) => a.action)).toEqual(['key.create', 'key.revoke']);
    const entries = await viewer().admin.audit({ target_id: created.id });
    expect(entries.data.map((e) => e.action)).toEqual(['wallet.grant_subscription', 'wallet.top_up', 'account.create']);
    await expect(orm.em.fork().execute('update admin_audit_log set reason = ? where target_id = ?', ['x', created.id])).rejects.toThrow(/append-only/);
    await expect(orm.em.fork().execute('delete from admin_audit_log where target_id = ?', [created.id])).rejects.toThrow(/append-only/);
  });
});

describe('admin users', () => {
  it('created with a one-time link, they choose a password, then sign in; their session is an admin principal', async () => {
    const email = uniqueEmail('admin');
    const made = await operator().admin.users.create({ email, role: 'viewer' });
    expect(made).toMatchObject({ object: 'admin_user', email, role: 'viewer', password_set: false });
    expect(made.login_token).toMatch(/^mas_alink_/);
    const anonymous = as({ kind: 'none' });
    expect(await refusal(anonymous.admin.session.redeemLink({ token: made.login_token }))).toMatchObject({ param: 'new_password' });
    const signedIn = await anonymous.admin.session.redeemLink({ token: made.login_token, new_password: 'a long admin passphrase' });
    expect(await as({ kind: 'admin', token: signedIn.token }).admin.whoami()).toEqual({ object: 'admin', id: made.id, role: 'viewer', via: 'session' });
    // The link works once; the password signs in; a wrong one is refused like an unknown email.
    expect(await refusal(anonymous.admin.session.redeemLink({ token: made.login_token, new_password: 'another long passphrase' }))).toMatchObject({ code: 'unauthorized', reason: 'invalid_login_link' });
    const again = await anonymous.admin.session.signIn({ email, password: 'a long admin passphrase' });
    expect(await refusal(anonymous.admin.session.signIn({ email, password: 'a wrong passphrase here' }))).toMatchObject({ reason: 'invalid_credentials' });
    expect(await refusal(anonymous.admin.session.signIn({ email: uniqueEmail('nobody'), password: 'a wrong passphrase here' }))).toMatchObject({ reason: 'invalid_credentials' });
    // Signing out ends the session; account sessions are never admin sessions.
    await as({ kind: 'admin', token: again.token }).admin.session.signOut();
    expect(await refusal(as({ kind: 'admin', token: again.token }).admin.whoami())).toMatchObject({ code: 'unauthorized' });
    const account = await makeAccount(orm);
    const accountSession = await startSession(orm.em.fork(), account.id, new Date());
    expect(await refusal(as({ kind: 'admin', token: accountSession.token }).admin.whoami())).toMatchObject({ code: 'unauthorized' });
    expect((await auditOf(made.id)).map((a) => a.action)).toEqual(['admin_user.create']);
    const [stored] = await orm.em.fork().execute<{ password_hash: string }[]>('select password_hash from admin_users where id = ?', [made.id]);
    expect(stored!.password_hash).toMatch(/^\$argon2id\$/);
  });
});

describe('the CLI', () => {
  /** Runs `mas … --json` in-process with the internal caller, as mas.ts does; returns its one JSON object. */
  async function cli(args: string[]): Promise<Record<string, unknown>> {
    const connection: CliConnection = { core: internal(), readCatalogFile: () => Promise.resolve({}), publicBaseUrl: 'https://mas.example.com/', close: () => Promise.resolve() };
    let out = '';
    const write = vi.spyOn(process.stdout, 'write').mockImplementation((chunk: string | Uint8Array) => {
      out += String(chunk);
      return true;
    });
    try {
      await runCli([...args, '--json'], () => Promise.resolve(connection));
    } finally {
      write.mockRestore();
    }
    return JSON.parse(out) as Record<string, unknown>;
  }

  it('`admin create` prints a one-time link to the admin pages; `admin token create` prints the token once', async () => {
    const email = uniqueEmail('cli-admin');
    const made = await cli(['admin', 'create', '--email', email, '--role', 'operator']);
    expect(made).toMatchObject({ email, role: 'operator', url: expect.stringMatching(/^https:\/\/mas\.example\.com\/admin\/login\/link\?token=mas_alink_/) });
    const token = await cli(['admin', 'token', 'create', '--name', 'grafana', '--role', 'viewer']);
    expect(token).toMatchObject({ object: 'admin_token', name: 'grafana', role: 'viewer', token: expect.stringMatching(/^mas_admin_/) });
    expect(await as({ kind: 'admin', token: token.token as string }).admin.whoami()).toMatchObject({ role: 'viewer' });
    expect(await cli(['admin', 'token', 'revoke', '--id', token.id as string])).toMatchObject({ revoked_at: expect.any(String) });
    expect((await auditOf(made.id as string)).map((a) => [a.action, a.actor_type])).toEqual([['admin_user.create', 'internal']]);
  });
});
