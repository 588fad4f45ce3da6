import type { EntityManager } from '@mikro-orm/postgresql';
import { z } from 'zod';
import { countAttempt } from '../accounts/attempts.ts';
import { checkNewPassword, hashPassword, passwordInput, verifyPassword } from '../accounts/passwords.ts';
import type { AdminPrincipal } from '../auth/principals.ts';
import { hashSecret, newSecret } from '../auth/secrets.ts';
import { CoreError, unauthorized } from '../errors.ts';
import { newId } from '../ids.ts';
import type { Clock, RateLimiter } from '../ports.ts';
import { isoTimeSchema } from '../views.ts';
import { reasonSchema, recordAudit, type Operator } from './audit.ts';

/**
 * Admin users (docs/admin.md, "Access"): people who operate the service, apart from accounts
 * and API keys. An operator creates one (`mas admin create --email E --role R`), which gives a
 * one-time sign-in link; the link's page has the new admin choose a password. Afterwards they
 * sign in to the admin pages with email and password. Their sessions are short (2 hours idle,
 * 12 hours at most) and their cookie is not the account pages' cookie.
 */
const SESSION_PREFIX = 'mas_asess_';
const LINK_PREFIX = 'mas_alink_';
export const ADMIN_SESSION_IDLE_SECONDS = 2 * 3600;
export const ADMIN_SESSION_ABSOLUTE_SECONDS = 12 * 3600;
export const ADMIN_LINK_SECONDS = 24 * 3600;
const TOUCH_SECONDS = 60;

export const isAdminSessionToken = (token: string | null) => token !== null && token.startsWith(SESSION_PREFIX);

const roleSchema = z.enum(['viewer', 'operator']);
export const createAdminUserInput = z.object({
  email: z.email('must be an email address').max(254).transform((e) => e.trim()),
  role: roleSchema,
  /** Why, for the audit log (the admin pages always send one). */
  reason: reasonSchema.optional(),
});
export const adminUserRefInput = z.object({ id: z.string().trim().regex(/^adu_[0-9A-Za-z]{1,64}$/, 'must be an admin user id such as adu_…') });
export const adminSignInInput = z.object({ email: z.string().trim().min(1).max(254), password: passwordInput });
export const adminRedeemInput = z.object({ token: z.string().min(1).max(200), new_password: passwordInput.optional() });

export const adminUserSchema = z
  .object({
    id: z.string(),
    object: z.literal('admin_user'),
    email: z.string(),
    role: roleSchema,
    password_set: z.boolean(),
    created_at: isoTimeSchema,
    disabled_at: isoTimeSchema.nullable(),
  })
  .strict();
export type AdminUserView = z.infer<typeof adminUserSchema>;

interface UserRow {
  id: string;
  email: string;
  role: 'viewer' | 'operator';
  password_hash: string | null;
  created_at: Date | string;
  disabled_at: Date | string | null;
}

const view = (r: UserRow): AdminUserView => ({
  id: r.id,
  object: 'admin_user',
  email: r.email,
  role: r.role,
  password_set: r.password_hash !== null,
  created_at: new Date(r.created_at).toISOString(),
  disabled_at: r.disabled_at === null ? null : new Date(r.disabled_at).toISOString(),
});

interface Deps {
  clock: Clock;
  attempts: { perEmail: RateLimiter; perIp: RateLimiter };
}

async function newLink(em: EntityManager, userId: string, now: Date) {
  const token = newSecret(LINK_PREFIX);
  const expiresAt = new Date(now.getTime() + ADMIN_LINK_SECONDS * 1000);
  await em.execute('delete from admin_login_links where expires_at < ?', [new Date(now.getTime() - 86_400_000)]);
  await em.execute('insert into admin_login_links (token_hash, admin_user_id, created_at, expires_at) values (?, ?, ?, ?)', [hashSecret(token), userId, now, expiresAt]);
  return { login_token: token, login_expires_at: expiresAt.toISOString() };
}

/** A new admin user and their one-time sign-in link (valid 24 hours), audited. */
export async function createAdminUser(deps: Pick<Deps, 'clock'>, em: EntityManager, operator: Operator, input: z.output<typeof createAdminUserInput>, requestId?: string) {
  const now = deps.clock();
  return em.transactional(async (tx) => {
    const [taken] = await tx.execute('select 1 from admin_users where lower(email) = lower(?)', [input.email]);
    if (taken) throw new CoreError('conflict', `An admin user with the email ${input.email} already exists.`, { param: 'email', reason: 'admin_user_exists' });
    const id = newId('adu');
    const [row] = await tx.execute<UserRow[]>('insert into admin_users (id, email, role, created_at) values (?, ?, ?, ?) returning *', [id, input.email, input.role, now]);
    await recordAudit(tx, operator, { action: 'admin_user.create', targetType: 'admin_user', targetId: id, reason: input.reason, after: { email: input.email, role: input.role } }, requestId);
    return { ...view(row!), ...(await newLink(tx, id, now)) };
  });
}

/** A new one-time sign-in link for an admin user (a lost password), audited. */
export async function adminLoginLinkFor(deps: Pick<Deps, 'clock'>, em: EntityManager, operator: Operator, id: string, requestId?: string) {
  return em.transactional(async (tx) => {
    const [row] = await tx.execute<UserRow[]>('select * from admin_users where id = ?', [id]);
    if (!row) throw new CoreError('not_found', `No admin user ${id}.`, { reason: 'admin_user_not_found' });
    await recordAudit(tx, operator, { action: 'admin_user.login_link', targetType: 'admin_user', targetId: id }, requestId);
    return { ...view(row), ...(await newLink(tx, id, deps.clock())) };
  });
}

export async function listAdminUsers(em: EntityManager) {
  const rows = await em.execute<UserRow[]>('select * from admin_users order by created_at, id');
  return { object: 'list' as const, data: rows.map(view) };
}

export interface AdminSignedIn {
  object: 'admin_session';
  token: string;
  expires_at: string;
  admin: AdminUserView;
}

async function startAdminSession(em: EntityManager, user: UserRow, now: Date, previousToken: string | null): Promise<AdminSignedIn> {
  const token = newSecret(SESSION_PREFIX);
  const expiresAt = new Date(now.getTime() + ADMIN_SESSION_ABSOLUTE_SECONDS * 1000);
  await em.transactional(async (tx) => {
    if (previousToken) await tx.execute('delete from admin_sessions where token_hash = ?', [hashSecret(previousToken)]);
    await tx.execute('insert into admin_sessions (id, token_hash, admin_user_id, created_at, last_seen_at, expires_at) values (?, ?, ?, ?, ?, ?)', [
      newId('asess'),
      hashSecret(token),
      user.id,
      now,
      now,
      expiresAt,
    ]);
  });
  return { object: 'admin_session', token, expires_at: expiresAt.toISOString(), admin: view(user) };
}

const wrongCredentials = () => new CoreError('unauthorized', 'Wrong email or password.', { reason: 'invalid_credentials' });
const invalidLink = () => new CoreError('unauthorized', 'This admin sign-in link is invalid, used or expired. Ask an operator for a new one.', { reason: 'invalid_login_link' });

/** Email and password to an admin session; unknown, disabled, no password and wrong password get one answer. */
export async function signInAdmin(deps: Deps, em: EntityManager, input: z.output<typeof adminSignInInput>, caller: { ip: string | undefined; previousToken: string | null }) {
  await countAttempt(deps, 'signin', { email: `admin:${input.email}`, ip: caller.ip });
  const [row] = await em.execute<UserRow[]>('select * from admin_users where lower(email) = lower(?)', [input.email]);
  const ok = await verifyPassword(row?.password_hash, input.password);
  if (!row?.password_hash || !ok || row.disabled_at) throw wrongCredentials();
  return startAdminSession(em, row, deps.clock(), caller.previousToken);
}

/**
 * Redeems a one-time link: an admin without a password chooses one here (required), then is
 * signed in. The link is checked before it is used up, so a refused password keeps it valid.
 */
export async function redeemAdminLink(deps: Deps, em: EntityManager, input: z.output<typeof adminRedeemInput>, caller: { ip: string | undefined; previousToken: string | null }) {
  await countAttempt(deps, 'login_link', { ip: caller.ip });
  if (!input.token.startsWith(LINK_PREFIX) || input.token.length > 128) throw invalidLink();
  const now = deps.clock();
  const [found] = await em.execute<(UserRow & { link_ok: boolean })[]>(
    `select u.*, (l.used_at is null and l.expires_at > ?) as link_ok from admin_login_links l join admin_users u on u.id = l.admin_user_id where l.token_hash = ?`,
    [now, hashSecret(input.token)],
  );
  if (!found?.link_ok || found.disabled_at) throw invalidLink();
  let passwordHash: string | null = null;
  if (found.password_hash === null || input.new_password !== undefined) {
    if (input.new_password === undefined) throw new CoreError('invalid_request', 'Choose a password for your admin account.', { param: 'new_password', reason: 'missing_field' });
    checkNewPassword(input.new_password, { email: found.email, param: 'new_password' });
    passwordHash = await hashPassword(input.new_password);
  }
  const user = await em.transactional(async (tx) => {
    const [used] = await tx.execute('update admin_login_links set used_at = ? where token_hash = ? and used_at is null and expires_at > ? returning 1', [now, hashSecret(input.token), now]);
    if (!used) throw invalidLink();
    if (passwordHash) {
      await tx.execute('update admin_users set password_hash = ? where id = ?', [passwordHash, found.id]);
      // A new password ends the admin's other sessions.
      await tx.execute('delete from admin_sessions where admin_user_id = ?', [found.id]);
    }
    const [row] = await tx.execute<UserRow[]>('select * from admin_users where id = ?', [found.id]);
    return row!;
  });
  return startAdminSession(em, user, now, caller.previousToken);
}

/** The admin of this session token, if the session is alive and the admin not disabled. */
export async function authenticateAdminSession(em: EntityManager, token: string | null, now: Date): Promise<AdminPrincipal> {
  if (!token || !token.startsWith(SESSION_PREFIX) || token.length > 128) throw unauthorized('admin');
  const [row] = await em.execute<{ id: string; user_id: string; role: 'viewer' | 'operator'; last_seen_at: string | Date; expires_at: string | Date; disabled_at: string | Date | null }[]>(
    `select s.id, u.id as user_id, u.role, s.last_seen_at, s.expires_at, u.disabled_at
     from admin_sessions s join admin_users u on u.id = s.admin_user_id where s.token_hash = ?`,
    [hashSecret(token)],
  );
  if (!row || row.disabled_at) throw unauthorized('admin');
  const lastSeen = new Date(row.last_seen_at).getTime();
  if (new Date(row.expires_at).getTime() <= now.getTime() || lastSeen + ADMIN_SESSION_IDLE_SECONDS * 1000 <= now.getTime()) {
    await em.execute('delete from admin_sessions where id = ?', [row.id]);
    throw unauthorized('admin');
  }
  if (now.getTime() - lastSeen > TOUCH_SECONDS * 1000) await em.execute('update admin_sessions set last_seen_at = ? where id = ?', [now, row.id]);
  return { kind: 'admin', adminId: row.user_id, role: row.role, via: 'session' };
}

export async function signOutAdmin(em: EntityManager, token: string | null) {
  if (token) await em.execute('delete from admin_sessions where token_hash = ?', [hashSecret(token)]);
  return { object: 'admin_session' as const, signed_out: true as const };
}
