import type { EntityManager } from '@mikro-orm/postgresql';
import { unauthorized } from '../errors.ts';
import { newId } from '../ids.ts';
import type { SessionPrincipal } from './principals.ts';
import { hashSecret, newSecret } from './secrets.ts';

/**
 * Sessions of people signed in to the account pages. The cookie holds an opaque random token;
 * the database keeps only its hash. A session ends when idle for `IDLE_SECONDS`, or at
 * `ABSOLUTE_SECONDS` after sign-in whatever its use, or when ended (sign-out, password change).
 */
export const SESSION_IDLE_SECONDS = 7 * 24 * 3600;
export const SESSION_ABSOLUTE_SECONDS = 30 * 24 * 3600;
/** `last_seen_at` is written at most this often per session. */
const TOUCH_SECONDS = 60;
const PREFIX = 'mas_sess_';

export async function startSession(em: EntityManager, accountId: string, now: Date): Promise<{ id: string; token: string; expiresAt: Date }> {
  const id = newId('sess');
  const token = newSecret(PREFIX);
  const expiresAt = new Date(now.getTime() + SESSION_ABSOLUTE_SECONDS * 1000);
  await em.execute('insert into sessions (id, token_hash, account_id, created_at, last_seen_at, expires_at) values (?, ?, ?, ?, ?, ?)', [
    id,
    hashSecret(token),
    accountId,
    now,
    now,
    expiresAt,
  ]);
  return { id, token, expiresAt };
}

/** The session of this token, if it is alive; every failure is the same `unauthorized`. */
export async function authenticateSession(em: EntityManager, token: string | null, now: Date): Promise<SessionPrincipal> {
  if (!token || !token.startsWith(PREFIX) || token.length > 128) throw unauthorized('session');
  const [row] = await em.execute<{ id: string; account_id: string; last_seen_at: Date; expires_at: Date }[]>(
    'select id, account_id, last_seen_at, expires_at from sessions where token_hash = ?',
    [hashSecret(token)],
  );
  if (!row) throw unauthorized('session');
  const lastSeen = new Date(row.last_seen_at).getTime();
  if (new Date(row.expires_at).getTime() <= now.getTime() || lastSeen + SESSION_IDLE_SECONDS * 1000 <= now.getTime()) {
    await endSession(em, row.id);
    throw unauthorized('session');
  }
  if (now.getTime() - lastSeen > TOUCH_SECONDS * 1000) {
    await em.execute('update sessions set last_seen_at = ? where id = ?', [now, row.id]);
  }
  return { kind: 'session', accountId: row.account_id, sessionId: row.id };
}

export async function endSession(em: EntityManager, sessionId: string): Promise<void> {
  await em.execute('delete from sessions where id = ?', [sessionId]);
}

/** Ends every session of an account (a password change signs out everywhere). */
export async function endAllSessions(em: EntityManager, accountId: string): Promise<number> {
  const rows = await em.execute<{ id: string }[]>('delete from sessions where account_id = ? returning id', [accountId]);
  return rows.length;
}

/**
 * Ends the session of this token, whoever's it is, if it exists: signing in again (a password or
 * a login link) ends the session the browser had before, so a fresh token replaces it.
 */
export async function endSessionByToken(em: EntityManager, token: string | null | undefined): Promise<void> {
  if (!token || !token.startsWith(PREFIX) || token.length > 128) return;
  await em.execute('delete from sessions where token_hash = ?', [hashSecret(token)]);
}
