import type { MikroORM } from '@mikro-orm/postgresql';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { appConnectionSchema } from '../../core/apps/connections.ts';
import { startSession } from '../../core/auth/sessions.ts';
import { createContext, type CoreDeps } from '../../core/context.ts';
import { createCaller } from '../../core/router.ts';
import { toCoreError } from '../../core/trpc.ts';
import { createProviderRegistry } from '../../adapters/providers/registry.ts';
import { issueAccessToken, makeAppConnection } from '../support/apps.ts';
import { chargesWritten, makeAccount, openTestOrm, testDeps } from '../support/db.ts';
import { capturedFor, expectSettledWallet } from '../support/ledger.ts';
import { ERROR_VOCABULARY } from '../../core/errors.ts';
import { HTTP_STATUS } from '../../adapters/http/status.ts';
import { seedModels } from '../../core/catalog/catalog.ts';
import { loadCatalogFile } from '../../config/catalog.ts';

/** Connected apps as the account pages see them: listed with their spend, revoked with their key. */
let orm: MikroORM;
let deps: CoreDeps;
beforeAll(async () => {
  orm = await openTestOrm();
  await seedModels(orm.em.fork(), await loadCatalogFile('config/models.yaml', 50n));
  deps = testDeps(orm, { providers: createProviderRegistry({ local: { kind: 'local' } }) });
});
afterAll(() => orm.close());

async function signedIn(accountId: string) {
  const session = await startSession(orm.em.fork(), accountId, new Date());
  return createCaller(createContext(deps, { kind: 'session', token: session.token }));
}

/**
 * One `hello` to mas/echo with max_tokens 20, priced from config/models.yaml by hand: in-app
 * 100 coins per million input tokens and 400 per million output tokens, at API_PRICE_PERCENT
 * 50: 50_000_000 and 200_000_000 micro-coins per million, i.e. 50 and 200 micro-coins a token.
 * The input is 8 tokens (3 for the message, 1 for the role, 1 for "hello", 3 to prime the
 * reply); the echo's answer is longer than 20 tokens, so it is cut at the limit ("length").
 * 8 x 50 + 20 x 200 = 4_400 micro-coins, reserved and charged alike.
 */
const HELLO = { model: 'mas/echo', messages: [{ role: 'user' as const, content: 'hello' }], max_tokens: 20 };
const HELLO_MICRO = (8n * 50_000_000n + 20n * 200_000_000n + 999_999n) / 1_000_000n;

/** A call with an API key, or as an app connection (its OAuth access token, for the MCP resource). */
const as = (token: string) => createCaller(createContext(deps, { kind: 'bearer', token, resource: deps.config.oauth.resource }));

async function helloAs(token: string) {
  const chat = await as(token).chat.complete(HELLO);
  if (chat.stream) throw new Error('a stream was not asked for');
  // The conditions the price above assumes: our input count, and an answer cut at the limit.
  expect(chat.completion.choices[0]!.finish_reason).toBe('length');
  expect(chat.completion.usage).toMatchObject({ prompt_tokens: 8, completion_tokens: 20 });
  return chat.completion;
}

/** What an app connection's holds captured, in micro-coins. */
async function settledBy(connectionId: string): Promise<bigint> {
  await chargesWritten();
  const [row] = await orm.em.fork().execute<{ total: string }[]>(
    `select coalesce(sum(captured_micro), 0)::text as total from holds where metadata->>'app_connection_id' = ? and status = 'settled'`,
    [connectionId],
  );
  return BigInt(row!.total);
}

describe('connected apps', () => {
  it('lists the account\'s apps with what their key spent; revoking one stops its key at once', async () => {
    const account = await makeAccount(orm, { coins: '10' });
    const app = await makeAppConnection(orm, account.id, { name: 'Claude', capMicro: 5_000_000n });
    const completion = await helloAs(app.key.key);
    expect(HELLO_MICRO).toBe(4_400n);
    expect(completion.usage.cost_coins).toBe(0.0044);
    expect(await capturedFor(orm, completion.id)).toBe(HELLO_MICRO);

    const me = await signedIn(account.id);
    const list = await me.account.apps.list();
    expect(list.data).toHaveLength(1);
    const listed = appConnectionSchema.parse(list.data[0]);
    expect(listed).toMatchObject({ id: app.id, name: 'Claude', redirect_host: 'app.example', spend_cap_coins: 5, spent_coins: 0.0044, revoked_at: null });
    expect((await expectSettledWallet(orm, account.id)).balance.purchased).toBe(10_000_000n - HELLO_MICRO);

    const revoked = await me.account.apps.revoke({ id: app.id });
    expect(revoked.revoked_at).not.toBeNull();
    expect(toCoreError(await as(app.key.key).wallet.balance().catch((e: unknown) => e))).toMatchObject({ code: 'unauthorized' });
    // Idempotent.
    expect((await me.account.apps.revoke({ id: app.id })).revoked_at).toBe(revoked.revoked_at);
  });

  it('several calls that add up past the spend cap: the one that would pass it is refused, the total settled stays within it', async () => {
    // Room for two calls and a bit: the first two fit, the third would pass the cap by
    // 3 x 4_400 - 10_000 = 3_200 micro-coins. Each call settles before the next, so only
    // what was already settled (no open hold) stands between the third and the cap.
    const cap = 2n * HELLO_MICRO + 1_200n;
    expect(cap).toBe(10_000n);
    const account = await makeAccount(orm, { coins: '10' });
    const app = await makeAppConnection(orm, account.id, { name: 'Capped', capMicro: cap });
    const token = await issueAccessToken(orm, app.id, deps.config.oauth.resource);
    await helloAs(token);
    await helloAs(token);
    expect(await settledBy(app.id)).toBe(2n * HELLO_MICRO);

    const asApp = as(token);
    const refused = toCoreError(await asApp.chat.complete(HELLO).catch((e: unknown) => e));
    expect(refused).toMatchObject({ code: 'spend_cap_reached' });
    // What every HTTP surface answers for it: 402, a billing error.
    expect(HTTP_STATUS[refused!.code]).toBe(402);
    expect(ERROR_VOCABULARY[refused!.code]).toEqual({ type: 'billing_error', code: 'spend_cap_reached' });
    expect(refused!.message).toContain(`needs 0.0044 coins and 0.0012 are left under the cap`);
    // A smaller call that fits what is left still goes through: the cap, not a block.
    const small = await asApp.chat.complete({ ...HELLO, max_tokens: 1 });
    if (small.stream) throw new Error('a stream was not asked for');
    // 8 x 50 + 1 x 200 = 600 micro-coins.
    expect(small.completion.usage).toMatchObject({ prompt_tokens: 8, completion_tokens: 1, cost_coins: 0.0006 });

    const settled = await settledBy(app.id);
    expect(settled).toBe(2n * HELLO_MICRO + 600n);
    expect(settled).toBeLessThanOrEqual(cap);
    const [holds] = await orm.em.fork().execute<{ settled: number; other: number }[]>(
      `select count(*) filter (where status = 'settled')::int as settled, count(*) filter (where status <> 'settled')::int as other
       from holds where metadata->>'app_connection_id' = ?`,
      [app.id],
    );
    expect(holds).toEqual({ settled: 3, other: 0 });
    const state = await expectSettledWallet(orm, account.id);
    expect(state.balance.purchased).toBe(10_000_000n - settled);
    const listed = appConnectionSchema.parse((await (await signedIn(account.id)).account.apps.list()).data[0]);
    expect(listed).toMatchObject({ spend_cap_coins: 0.01, spent_coins: 0.0094 });
  });

  it("another account's app is as unknown as a missing one, and stays connected", async () => {
    const a = await makeAccount(orm, { coins: '1' });
    const b = await makeAccount(orm, { coins: '1' });
    const appOfA = await makeAppConnection(orm, a.id);
    const asB = await signedIn(b.id);
    const theirs = toCoreError(await asB.account.apps.revoke({ id: appOfA.id }).catch((e: unknown) => e));
    const unknown = toCoreError(await asB.account.apps.revoke({ id: 'app_000000000000000000000000' }).catch((e: unknown) => e));
    expect({ code: theirs?.code, reason: theirs?.reason }).toEqual({ code: unknown?.code, reason: unknown?.reason });
    expect(theirs?.code).toBe('not_found');
    expect((await asB.account.apps.list()).data).toEqual([]);
    await expect(createCaller(createContext(deps, { kind: 'bearer', token: appOfA.key.key })).wallet.balance()).resolves.toMatchObject({ object: 'balance' });
  });
});
