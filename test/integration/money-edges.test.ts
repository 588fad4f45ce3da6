import { createHash, randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { EntityManager, MikroORM } from '@mikro-orm/postgresql';
import { startSession } from '../../core/auth/sessions.ts';
import { hashSecret } from '../../core/auth/secrets.ts';
import { createContext, type CoreDeps } from '../../core/context.ts';
import { createKey } from '../../core/keys/keys.ts';
import { historyInput, listHistory } from '../../core/money/history.ts';
import { HoldBatcher } from '../../core/money/hold-batcher.ts';
import { reserve, settle } from '../../core/money/holds.ts';
import { listLedgerEntries } from '../../core/money/ledger.ts';
import { releaseExpiredHolds } from '../../core/money/sweep.ts';
import { credit, getBalance } from '../../core/money/wallet.ts';
import { checkConnectionRoom, MAX_ACTIVE_APP_CONNECTIONS } from '../../core/oauth/authorize.ts';
import { createCaller } from '../../core/router.ts';
import { makeAccount, openTestOrm, testDeps } from '../support/db.ts';

/**
 * The refusals around money and the limits of connected apps (core/money, core/keys,
 * core/oauth/authorize.ts) that the mutation run (`npm run test:mutation`) found no test
 * reaching: unknown accounts, amounts that are not positive, the spend cap a person types on
 * the consent page, and the most apps an account may have connected.
 */
let orm: MikroORM;
let deps: CoreDeps;
beforeAll(async () => {
  orm = await openTestOrm();
  deps = testDeps(orm, { publicBaseUrl: 'http://localhost' });
});
afterAll(() => orm.close());

const soon = () => new Date(Date.now() + 60_000);

describe('money refusals', () => {
  it('a negative reservation is a programming error, refused before the database, on both paths', async () => {
    const a = await makeAccount(orm, { coins: '1' });
    await expect(reserve(orm.em.fork(), { accountId: a.id, amount: -1n, reference: 'r', expiresAt: soon() })).rejects.toThrow(RangeError);
    const batcher = new HoldBatcher(() => Promise.reject(new Error('no statement may run')));
    await expect(batcher.reserve({ accountId: a.id, amount: -1n, reference: 'r', expiresAt: soon() })).rejects.toThrow(RangeError);
    expect(await getBalance(orm.em.fork(), a.id)).toMatchObject({ purchased: 1_000_000n, held: 0n });
  });

  it('an unknown account is not found: reserving, reading its balance, crediting it, making it a key', async () => {
    const nobody = `acc_${randomBytes(8).toString('hex')}`;
    await expect(reserve(orm.em.fork(), { accountId: nobody, amount: 1n, reference: 'r', expiresAt: soon() })).rejects.toMatchObject({ code: 'not_found', reason: 'account_not_found' });
    await expect(getBalance(orm.em.fork(), nobody)).rejects.toMatchObject({ code: 'not_found', reason: 'account_not_found' });
    await expect(credit(orm.em.fork(), { accountId: nobody, kind: 'topup', amount: 1n, reference: 'r', idempotencyKey: `k-${nobody}`, description: 'Top-up' })).rejects.toMatchObject({
      code: 'not_found',
      reason: 'account_not_found',
    });
    await expect(createKey(orm.em.fork(), nobody, {})).rejects.toMatchObject({ code: 'not_found', reason: 'account_not_found' });
  });

  it('a credit of 0 coins is refused, naming the amount', async () => {
    const a = await makeAccount(orm);
    await expect(credit(orm.em.fork(), { accountId: a.id, kind: 'topup', amount: 0n, reference: 'r', idempotencyKey: `zero-${a.id}`, description: 'Top-up' })).rejects.toMatchObject({
      code: 'invalid_request',
      param: 'coins',
    });
    expect(await getBalance(orm.em.fork(), a.id)).toMatchObject({ purchased: 0n, paid: false });
  });
});

describe('holds', () => {
  it('a hold the caller does not name gets a hold_ id, on both paths', async () => {
    const a = await makeAccount(orm, { coins: '1' });
    expect((await reserve(orm.em.fork(), { accountId: a.id, amount: 1n, reference: 'r', expiresAt: soon() })).holdId).toMatch(/^hold_[0-9A-Za-z]+$/);
    expect((await deps.holds.reserve({ accountId: a.id, amount: 1n, reference: 'r', expiresAt: soon() })).holdId).toMatch(/^hold_[0-9A-Za-z]+$/);
  });

  it('ending an unknown hold is not found', async () => {
    await expect(settle(orm.em.fork(), 'hold_unknown', 1n)).rejects.toMatchObject({ code: 'not_found', reason: 'hold_not_found' });
  });

  it('a batched statement that answers for fewer items than it was given fails the items left out, and only those', async () => {
    const batcher = new HoldBatcher((async () => [{ i: 0, status: 'settled', captured: '1', amount: '2' }]) as never);
    const [first, second] = await Promise.allSettled([batcher.settle('hold_a', 1n), batcher.settle('hold_b', 1n)]);
    expect(first).toMatchObject({ status: 'fulfilled', value: { holdId: 'hold_a', status: 'settled', captured: 1n } });
    expect(second).toMatchObject({ status: 'rejected', reason: { message: 'the batched statement returned no row for this item' } });
  });

  it('the sweep releases every expired hold, batch after batch', async () => {
    // The statements faked, so that no other file's sweep can take these holds first: 5 expired holds, in batches of 2.
    const expired = ['hold_1', 'hold_2', 'hold_3', 'hold_4', 'hold_5'];
    const released: string[] = [];
    const em = {
      execute: async (sql: string, params: unknown[]) => {
        if (sql.startsWith('select id from holds')) {
          const open = expired.filter((id) => !released.includes(id)).slice(0, Number(params[1]));
          return open.map((id) => ({ id }));
        }
        released.push(String(params[0]));
        return [{ status: 'released', captured: '0', amount: '1' }];
      },
    } as unknown as EntityManager;
    expect(await releaseExpiredHolds(em, new Date(), 2)).toBe(5);
    expect(released).toEqual(expired);
  });
});

describe('pages of the ledger and the history', () => {
  it('has_more only when there is more than the page', async () => {
    const a = await makeAccount(orm, { coins: '2', subscriptionCoins: '3' });
    expect((await listLedgerEntries(orm.em.fork(), a.id, historyInput.parse({ limit: 2 }))).has_more).toBe(false);
    expect((await listLedgerEntries(orm.em.fork(), a.id, historyInput.parse({ limit: 1 }))).has_more).toBe(true);
  });

  it('starting_after may be the largest entry id there can be; a larger one bounds nothing, as the schema lets it through', async () => {
    const a = await makeAccount(orm, { coins: '2' });
    const page = await listHistory(orm.em.fork(), a.id, historyInput.parse({ limit: 5, starting_after: 'le_9223372036854775807' }));
    expect(page.data).toHaveLength(1);
    const above = await listHistory(orm.em.fork(), a.id, historyInput.parse({ limit: 5, starting_after: 'le_9223372036854775808' }));
    expect(above).toEqual(await listHistory(orm.em.fork(), a.id, historyInput.parse({ limit: 5 })));
  });
});

describe('keys', () => {
  it('a key made without a name is called API key', async () => {
    const a = await makeAccount(orm);
    expect(await createKey(orm.em.fork(), a.id, {})).toMatchObject({ name: 'API key', object: 'api_key' });
  });
});

describe('connected apps', () => {
  /** `n` connections of this account, each with an app key of its own. */
  async function connections(accountId: string, n: number, state: 'active' | 'revoked' | 'expired' = 'active') {
    for (let i = 0; i < n; i++) {
      const keyId = `key_${randomBytes(10).toString('hex')}`;
      await orm.em.fork().execute(`insert into api_keys (id, account_id, name, prefix, key_hash, kind) values (?, ?, 'App', 'mas_x', ?, 'app')`, [keyId, accountId, randomBytes(32).toString('hex')]);
      await orm.em.fork().execute(
        `insert into app_connections (id, account_id, key_id, client_id, client_name, redirect_host, revoked_at, expires_at)
         values (?, ?, ?, 'https://app.example/c', 'App', 'app.example', ?, ?)`,
        [`app_${randomBytes(10).toString('hex')}`, accountId, keyId, state === 'revoked' ? new Date() : null, state === 'expired' ? new Date(Date.now() - 1000) : null],
      );
    }
  }

  it(`an account may have ${MAX_ACTIVE_APP_CONNECTIONS} apps connected; revoked and expired ones do not count`, async () => {
    const a = await makeAccount(orm);
    await connections(a.id, MAX_ACTIVE_APP_CONNECTIONS - 1);
    await connections(a.id, 2, 'revoked');
    await connections(a.id, 2, 'expired');
    await expect(checkConnectionRoom(orm.em.fork(), a.id)).resolves.toBeUndefined();
    await connections(a.id, 1);
    await expect(checkConnectionRoom(orm.em.fork(), a.id)).rejects.toMatchObject({ code: 'limit_reached', reason: 'app_connection_limit_reached' });
  });

  describe('the spend cap typed on the consent page', () => {
    let approve: (cap: string | undefined) => Promise<{ redirect_to: string }>;
    beforeAll(async () => {
      const account = await makeAccount(orm);
      const session = await startSession(orm.em.fork(), account.id, new Date());
      const { client_id } = await createCaller(createContext(deps, { kind: 'none' })).oauth.registerClient({ redirect_uris: ['http://127.0.0.1:9/callback'], client_name: 'Cap test' });
      const challenge = createHash('sha256').update('v'.repeat(43)).digest('base64url');
      approve = (cap) =>
        createCaller(createContext(deps, { kind: 'session', token: session.token })).oauth.approve({
          client_id,
          redirect_uri: 'http://127.0.0.1:9/callback',
          response_type: 'code',
          code_challenge: challenge,
          code_challenge_method: 'S256',
          ...(cap === undefined ? {} : { spend_cap_coins: cap }),
        });
    });
    const capOf = async (redirectTo: string) => {
      const code = new URL(redirectTo).searchParams.get('code')!;
      const [row] = await orm.em.fork().execute<{ cap: string | null }[]>('select spend_cap_micro::text as cap from oauth_codes where code_hash = ?', [hashSecret(code)]);
      return row!.cap;
    };

    it('a number of coins, exact to the micro-coin, or none when left empty', async () => {
      expect(await capOf((await approve('12.5')).redirect_to)).toBe('12500000');
      expect(await capOf((await approve('0.000001')).redirect_to)).toBe('1');
      expect(await capOf((await approve('1000000000')).redirect_to)).toBe('1000000000000000');
      expect(await capOf((await approve('')).redirect_to)).toBeNull();
      expect(await capOf((await approve(undefined)).redirect_to)).toBeNull();
    });

    it('refused, naming the field: not a number, 0, or more than a billion coins', async () => {
      for (const bad of ['abc', '-5', '1e3', '0', '0.0000001', '1000000000.000001']) {
        await expect(approve(bad), bad).rejects.toMatchObject({ cause: { code: 'invalid_request', param: 'spend_cap_coins' } });
      }
    });
  });
});
