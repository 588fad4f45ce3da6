import type { MikroORM } from '@mikro-orm/postgresql';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SESSION_ABSOLUTE_SECONDS, SESSION_IDLE_SECONDS, startSession } from '../../core/auth/sessions.ts';
import type { Credential } from '../../core/auth/principals.ts';
import { createContext, type CoreDeps } from '../../core/context.ts';
import { createInternalCaller } from '../../core/internal/router.ts';
import { createCaller } from '../../core/router.ts';
import { makeAccount, makeKey, openTestOrm, testDeps } from '../support/db.ts';
import { refusal } from '../support/refusal.ts';

/** Each principal reaches its own use cases through its base procedure, and nothing else. */
let orm: MikroORM;
let deps: CoreDeps;
let now = new Date();
beforeAll(async () => {
  orm = await openTestOrm();
  deps = { ...testDeps(orm), clock: () => now };
});
afterAll(() => orm.close());

const as = (credential: Credential) => createCaller(createContext(deps, credential));
const internal = () => as({ kind: 'internal' });


describe('account sessions', () => {
  it('a live session reads its own account; its token is stored only as a hash', async () => {
    const account = await makeAccount(orm, { coins: '3' });
    const session = await startSession(orm.em.fork(), account.id, now);
    const me = await as({ kind: 'session', token: session.token }).accounts.me();
    expect(me).toMatchObject({ id: account.id, email: account.email, balance: { coins: 3, paid_account: true } });
    const [row] = await orm.em.fork().execute<{ token_hash: string }[]>('select token_hash from sessions where id = ?', [session.id]);
    expect(row!.token_hash).toMatch(/^[0-9a-f]{64}$/);
    expect(row!.token_hash).not.toContain(session.token.slice(9, 30));
  });

  it('ends after its idle time and at its absolute expiry; an unknown or missing token is refused alike', async () => {
    const account = await makeAccount(orm);
    const started = new Date();
    now = started;
    const idle = await startSession(orm.em.fork(), account.id, now);
    now = new Date(started.getTime() + (SESSION_IDLE_SECONDS - 60) * 1000);
    await as({ kind: 'session', token: idle.token }).accounts.me(); // still alive, and touched
    now = new Date(now.getTime() + (SESSION_IDLE_SECONDS + 1) * 1000);
    expect(await refusal(as({ kind: 'session', token: idle.token }).accounts.me())).toMatchObject({ code: 'unauthorized', reason: 'invalid_session' });

    now = started;
    const busy = await startSession(orm.em.fork(), account.id, now);
    // Used every few days, it still ends at its absolute expiry.
    for (let day = 5; day * 86_400 < SESSION_ABSOLUTE_SECONDS; day += 5) {
      now = new Date(started.getTime() + day * 86_400_000);
      await as({ kind: 'session', token: busy.token }).accounts.me();
    }
    now = new Date(started.getTime() + SESSION_ABSOLUTE_SECONDS * 1000);
    expect(await refusal(as({ kind: 'session', token: busy.token }).accounts.me())).toMatchObject({ code: 'unauthorized', reason: 'invalid_session' });

    now = new Date();
    for (const token of [null, 'mas_sess_unknown', 'garbage']) {
      expect(await refusal(as({ kind: 'session', token }).accounts.me())).toMatchObject({ code: 'unauthorized', reason: 'invalid_session' });
    }
  });

  it('a session cannot spend, and an API key cannot act as a session', async () => {
    const account = await makeAccount(orm, { coins: '3' });
    const session = await startSession(orm.em.fork(), account.id, now);
    const key = await makeKey(orm, account.id);
    expect((await refusal(as({ kind: 'session', token: session.token }).wallet.balance())).code).toBe('unauthorized');
    expect((await refusal(as({ kind: 'bearer', token: key.key }).accounts.me())).code).toBe('unauthorized');
  });
});

describe('admin tokens', () => {
  it('viewer reads, operator also acts, a revoked token is refused on its next call', async () => {
    const account = await makeAccount(orm);
    const viewer = await internal().admins.createToken({ name: 'dashboard', role: 'viewer' });
    const operator = await internal().admins.createToken({ name: 'support', role: 'operator' });
    expect(viewer.token).toMatch(/^mas_admin_/);

    expect(await as({ kind: 'admin', token: viewer.token }).accounts.get({ account: account.email })).toMatchObject({ id: account.id });
    expect(await refusal(as({ kind: 'admin', token: viewer.token }).wallet.topUp({ account: account.id, coins: '5' }))).toMatchObject({
      code: 'forbidden',
      reason: 'operator_role_required',
    });
    const topup = await as({ kind: 'admin', token: operator.token }).wallet.topUp({ account: account.id, coins: '5' });
    expect(topup).toMatchObject({ applied: true, balance: { coins: 5 } });

    await internal().admins.revokeToken({ id: operator.id });
    expect(await refusal(as({ kind: 'admin', token: operator.token }).accounts.get({ account: account.id }))).toMatchObject({
      code: 'unauthorized',
      reason: 'invalid_admin_token',
    });
    const [row] = await orm.em.fork().execute<{ token_hash: string }[]>('select token_hash from admin_tokens where id = ?', [viewer.id]);
    expect(row!.token_hash).toMatch(/^[0-9a-f]{64}$/);
  });

  it('an API key or a session is not an admin credential', async () => {
    const account = await makeAccount(orm, { coins: '1' });
    const key = await makeKey(orm, account.id);
    const session = await startSession(orm.em.fork(), account.id, now);
    expect((await refusal(as({ kind: 'bearer', token: key.key }).accounts.get({ account: account.id }))).code).toBe('unauthorized');
    expect((await refusal(as({ kind: 'session', token: session.token }).wallet.topUp({ account: account.id, coins: '1' }))).code).toBe('unauthorized');
  });
});

describe('the internal router', () => {
  it('answers only the internal caller: a key, a session or an admin token cannot run a workflow step', async () => {
    const account = await makeAccount(orm, { coins: '1' });
    const key = await makeKey(orm, account.id);
    const operator = await internal().admins.createToken({ name: 'ops', role: 'operator' });
    const credentials: Credential[] = [
      { kind: 'bearer', token: key.key },
      { kind: 'admin', token: operator.token },
      { kind: 'session', token: (await startSession(orm.em.fork(), account.id, now)).token },
      { kind: 'none' },
    ];
    for (const credential of credentials) {
      const steps = createInternalCaller(createContext(deps, credential));
      expect(await refusal(steps.holds.releaseExpired())).toMatchObject({ code: 'forbidden', reason: 'internal_only' });
    }
    expect(await createInternalCaller(createContext(deps, { kind: 'internal' })).holds.releaseExpired()).toMatchObject({ released: expect.any(Number) });
  });
});
