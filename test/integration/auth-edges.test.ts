import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { MikroORM } from '@mikro-orm/postgresql';
import { authenticateAdmin, revokeAdminToken } from '../../core/auth/admin-tokens.ts';
import { consumeLoginToken, createLoginToken } from '../../core/auth/login-links.ts';
import { hashSecret } from '../../core/auth/secrets.ts';
import { authenticateSession, SESSION_IDLE_SECONDS, startSession } from '../../core/auth/sessions.ts';
import { makeAccount, openTestOrm } from '../support/db.ts';

/**
 * Sessions, sign-in links and admin tokens at their edges (core/auth), against the database:
 * the exact end of an idle session, how often a session's last use is written, how long used
 * and expired sign-in links are kept, and the refusals of admin tokens. The edges are those the
 * mutation run (`npm run test:mutation`) found that no other test held.
 */
let orm: MikroORM;
beforeAll(async () => {
  orm = await openTestOrm();
});
afterAll(() => orm.close());

const lastSeen = async (id: string) =>
  new Date((await orm.em.fork().execute<{ last_seen_at: Date }[]>('select last_seen_at from sessions where id = ?', [id]))[0]!.last_seen_at).getTime();

describe('sessions', () => {
  it('ends exactly when idle for its idle time', async () => {
    const account = await makeAccount(orm);
    const started = new Date();
    const session = await startSession(orm.em.fork(), account.id, started);
    const justBefore = new Date(started.getTime() + SESSION_IDLE_SECONDS * 1000 - 1);
    expect(await authenticateSession(orm.em.fork(), session.token, justBefore)).toEqual({ kind: 'session', accountId: account.id, sessionId: session.id });
    expect(session.id).toMatch(/^sess_[0-9A-Za-z]+$/);
    const other = await startSession(orm.em.fork(), account.id, started);
    await expect(authenticateSession(orm.em.fork(), other.token, new Date(started.getTime() + SESSION_IDLE_SECONDS * 1000))).rejects.toMatchObject({ code: 'unauthorized' });
  });

  it('writes its last use at most once a minute: not within the minute, nor at the minute, only after it', async () => {
    const account = await makeAccount(orm);
    const started = new Date(Date.now() - 3_600_000);
    const session = await startSession(orm.em.fork(), account.id, started);
    const at = (ms: number) => new Date(started.getTime() + ms);
    await authenticateSession(orm.em.fork(), session.token, at(30_000));
    expect(await lastSeen(session.id)).toBe(started.getTime());
    await authenticateSession(orm.em.fork(), session.token, at(60_000));
    expect(await lastSeen(session.id)).toBe(started.getTime());
    await authenticateSession(orm.em.fork(), session.token, at(60_001));
    expect(await lastSeen(session.id)).toBe(started.getTime() + 60_001);
  });
});

describe('sign-in links', () => {
  it('are kept a day after they expire (so that "used" stays "used"), and swept after that; a live one is never swept', async () => {
    // In the past, so that the sweeps here reach no link of another test.
    const t0 = new Date(Date.now() - 30 * 86_400_000);
    const a = await makeAccount(orm);
    const b = await makeAccount(orm);
    const first = await createLoginToken(orm.em.fork(), a.id, t0);
    const exists = async (token: string) => (await orm.em.fork().execute('select 1 from login_links where token_hash = ?', [hashSecret(token)])).length === 1;
    // A link made a minute later does not sweep the first, which is still valid.
    const second = await createLoginToken(orm.em.fork(), b.id, new Date(t0.getTime() + 60_000));
    expect(await consumeLoginToken(orm.em.fork(), first.token, new Date(t0.getTime() + 120_000))).toBe(a.id);
    // Two hours on, both have expired: kept.
    await createLoginToken(orm.em.fork(), b.id, new Date(t0.getTime() + 2 * 3_600_000));
    expect(await exists(first.token)).toBe(true);
    expect(await exists(second.token)).toBe(true);
    // A day after they expired: swept.
    await createLoginToken(orm.em.fork(), b.id, new Date(t0.getTime() + 24 * 3_600_000 + 17 * 60_000));
    expect(await exists(first.token)).toBe(false);
    expect(await exists(second.token)).toBe(false);
  });
});

describe('admin tokens', () => {
  it('a missing token is refused as unauthorized, not a crash; revoking an unknown one is not found', async () => {
    await expect(authenticateAdmin(orm.em.fork(), null)).rejects.toMatchObject({ code: 'unauthorized', reason: 'invalid_admin_token' });
    await expect(authenticateAdmin(orm.em.fork(), '')).rejects.toMatchObject({ code: 'unauthorized', reason: 'invalid_admin_token' });
    await expect(revokeAdminToken(orm.em.fork(), 'adm_doesnotexist')).rejects.toMatchObject({ code: 'not_found', reason: 'admin_token_not_found' });
  });
});
