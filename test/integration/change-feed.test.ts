import type { MikroORM } from '@mikro-orm/postgresql';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listenForChanges, type ChangeFeed } from '../../adapters/db/change-feed.ts';
import { authenticate } from '../../core/auth/api-keys.ts';
import { applyChange } from '../../core/changes.ts';
import { createContext, type CoreDeps } from '../../core/context.ts';
import { hashKey } from '../../core/keys/key-secret.ts';
import { createCaller } from '../../core/router.ts';
import { makeAccount, makeKey, openTestOrm, silentLogger, testDeps, testDatabaseUrl } from '../support/db.ts';

/**
 * Caches across processes: two wired cores stand for two API instances, each listening on the
 * change feed. A change committed anywhere (through the other core, or plain SQL) reaches this
 * one's caches at once, long before their TTLs (set to ten minutes here so that only the
 * notice can explain what is seen).
 */
let orm: MikroORM;
let a: CoreDeps;
let b: CoreDeps;
let feeds: ChangeFeed[] = [];
const LONG = 10 * 60_000;

beforeAll(async () => {
  orm = await openTestOrm();
  a = testDeps(orm, { catalogTtlMs: LONG });
  b = testDeps(orm, { catalogTtlMs: LONG });
  feeds = await Promise.all([a, b].map((deps) => listenForChanges(testDatabaseUrl(), silentLogger, (change) => applyChange(deps, change))));
});
afterAll(async () => {
  await Promise.all(feeds.map((f) => f.close()));
  await orm.close();
});

/**
 * Waits until `check` holds. With caches that live ten minutes, only the notice can make it
 * hold: the timeout only says how long a missing notice takes to fail the test, far above what
 * a loaded machine needs to deliver one.
 */
async function eventually(check: () => Promise<boolean>, timeoutMs = 30_000): Promise<void> {
  const started = Date.now();
  while (!(await check())) {
    if (Date.now() - started > timeoutMs) throw new Error(`not within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** A key that instance B has in its cache of recent keys (paid accounts' keys are cached). */
async function keyCachedOnB() {
  const account = await makeAccount(orm, { coins: '5' });
  const key = await makeKey(orm, account.id);
  await authenticate(b.keys, key.key, b.lastUsed, { recent: true });
  expect((await b.keys.findRecent(hashKey(key.key))).fromCache).toBe(true);
  return { account, key };
}

const isGoneOnB = (secret: string) => async () => {
  const { row, fromCache } = await b.keys.findRecent(hashKey(secret));
  return !fromCache && row === null;
};

describe('the change feed', () => {
  it('a key revoked through another instance leaves this one\'s cache at once', async () => {
    const { account, key } = await keyCachedOnB();
    const other = await makeKey(orm, account.id);
    await authenticate(b.keys, other.key, b.lastUsed, { recent: true });
    await createCaller(createContext(a, { kind: 'internal' })).keys.revoke({ id: key.id });
    await eventually(isGoneOnB(key.key));
    // The account's other key stays cached.
    expect((await b.keys.findRecent(hashKey(other.key))).fromCache).toBe(true);
  });

  it('a disabled account\'s keys leave the cache; a key revoked by plain SQL too', async () => {
    const first = await keyCachedOnB();
    await createCaller(createContext(a, { kind: 'internal' })).admin.actions.disableAccount({ account: first.account.id, reason: 'change feed test' });
    await eventually(isGoneOnB(first.key.key));

    const second = await keyCachedOnB();
    await orm.em.fork().execute('update api_keys set revoked_at = now() where id = ?', [second.key.id]);
    await eventually(isGoneOnB(second.key.key));
  });

  it('a key disabled, or its allowed models or expiry changed, anywhere leaves this one\'s cache at once (docs/organizations.md)', async () => {
    for (const change of ['disabled_at = now()', `allowed_models = '{test/local}'`, `expires_at = now() + interval '1 day'`]) {
      const { key } = await keyCachedOnB();
      await orm.em.fork().execute(`update api_keys set ${change} where id = ?`, [key.id]);
      const dropped = async () => !(await b.keys.findRecent(hashKey(key.key))).fromCache;
      await eventually(dropped);
    }
  });

  it('a model disabled anywhere is refused here at once, though the catalog cache lives ten minutes', async () => {
    const id = `test/feed-${Date.now()}`;
    const definition = { id, name: 'Change feed test', type: 'text', generation_types: ['chat'], provider: { name: 'local', model: 'echo' }, pricing: { input_per_million: 1, output_per_million: 1 }, context_window: 4096, max_output_tokens: 1024, default_max_tokens: 256 };
    await orm.em.fork().execute(`insert into models (id, type, definition) values (?, 'text', ?::jsonb)`, [id, JSON.stringify(definition)]);
    await eventually(async () => (await b.catalog.get(orm.em.fork(), id).then(() => true, () => false)));
    await orm.em.fork().execute('update models set disabled_at = now() where id = ?', [id]);
    await eventually(async () => (await b.catalog.get(orm.em.fork(), id).then(() => false, () => true)));
    await orm.em.fork().execute('delete from models where id = ?', [id]);
  });

  it('a change rolled back announces nothing', async () => {
    const { account, key } = await keyCachedOnB();
    const later = await makeKey(orm, account.id);
    await authenticate(b.keys, later.key, b.lastUsed, { recent: true });
    await orm.em
      .fork()
      .transactional(async (tx) => {
        await tx.execute('update api_keys set revoked_at = now() where id = ?', [key.id]);
        throw new Error('roll back');
      })
      .catch(() => undefined);
    // Then a change that commits: once B has seen its notice, it has seen any the rollback sent
    // before it (a feed delivers in order).
    await orm.em.fork().execute('update api_keys set revoked_at = now() where id = ?', [later.id]);
    await eventually(isGoneOnB(later.key));
    expect((await b.keys.findRecent(hashKey(key.key))).fromCache).toBe(true);
  });

  it('after its connection is lost, the feed connects again and empties the caches (notices may have been missed)', async () => {
    const { key } = await keyCachedOnB();
    const killed = await orm.em.fork().execute<{ pid: number }[]>(
      `select pg_terminate_backend(pid) as pid from pg_stat_activity where application_name = 'mas-change-feed' and datname = current_database()`,
    );
    expect(killed.length).toBeGreaterThanOrEqual(2);
    await eventually(async () => !(await b.keys.findRecent(hashKey(key.key))).fromCache);
    // And it listens again: a revoke is seen.
    const again = await keyCachedOnB();
    await orm.em.fork().execute('update api_keys set revoked_at = now() where id = ?', [again.key.id]);
    await eventually(isGoneOnB(again.key.key));
  });
});
