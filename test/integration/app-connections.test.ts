import type { MikroORM } from '@mikro-orm/postgresql';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { appConnectionSchema } from '../../core/apps/connections.ts';
import { startSession } from '../../core/auth/sessions.ts';
import { createContext, type CoreDeps } from '../../core/context.ts';
import { createCaller } from '../../core/router.ts';
import { toCoreError } from '../../core/trpc.ts';
import { createProviderRegistry } from '../../adapters/providers/registry.ts';
import { makeAppConnection } from '../support/apps.ts';
import { makeAccount, openTestOrm, testDeps } from '../support/db.ts';
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

describe('connected apps', () => {
  it('lists the account\'s apps with what their key spent; revoking one stops its key at once', async () => {
    const account = await makeAccount(orm, { coins: '10' });
    const app = await makeAppConnection(orm, account.id, { name: 'Claude', capMicro: 5_000_000n });
    const asApp = createCaller(createContext(deps, { kind: 'bearer', token: app.key.key }));
    const chat = await asApp.chat.complete({ model: 'mas/echo', messages: [{ role: 'user', content: 'hello' }], max_tokens: 20 });
    const cost = chat.stream ? 0 : chat.completion.usage.cost_coins;

    const me = await signedIn(account.id);
    const list = await me.account.apps.list();
    expect(list.data).toHaveLength(1);
    const listed = appConnectionSchema.parse(list.data[0]);
    expect(listed).toMatchObject({ id: app.id, name: 'Claude', redirect_host: 'app.example', spend_cap_coins: 5, spent_coins: cost, revoked_at: null });
    expect(cost).toBeGreaterThan(0);

    const revoked = await me.account.apps.revoke({ id: app.id });
    expect(revoked.revoked_at).not.toBeNull();
    expect(toCoreError(await asApp.wallet.balance().catch((e: unknown) => e))).toMatchObject({ code: 'unauthorized' });
    // Idempotent.
    expect((await me.account.apps.revoke({ id: app.id })).revoked_at).toBe(revoked.revoked_at);
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
