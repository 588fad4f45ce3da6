import type { EntityManager } from '@mikro-orm/postgresql';
import { z } from 'zod';
import type { AppConnectionPrincipal } from '../auth/principals.ts';
import { hashSecret, newSecret } from '../auth/secrets.ts';
import { CoreError, unauthorized } from '../errors.ts';
import { newId } from '../ids.ts';
import { displayPrefix, generateKeySecret, hashKey } from '../keys/key-secret.ts';
import { roleOf } from '../organizations/roles.ts';
import { canonicalResource, checkConnectionRoom, liveConnectionsOf, pkceMatches, resourceFor, type OAuthConfig } from './authorize.ts';
import { clientIdSchema } from './clients.ts';
import { redirectHost } from './redirects.ts';

/**
 * The token endpoint's grants and revocation (docs/oauth.md, "Tokens"):
 * - the access token is opaque (`mas_at_…`), lives one hour, and is stored as its SHA-256;
 * - the refresh token (`mas_rt_…`) rotates on every use; presenting one that was already
 *   used means it leaked, so the whole connection is revoked (OAuth 2.1, section 4.3.1);
 * - a code presented twice revokes the connection it made (RFC 6749, section 4.1.2);
 * - revoking either token revokes the connection and its key.
 */
export const ACCESS_TOKEN_TTL_SECONDS = 3600;
/** A refresh token unused for 90 days expires; each refresh gives a new one. */
export const REFRESH_TOKEN_TTL_SECONDS = 90 * 24 * 3600;

interface Deps {
  clock: () => Date;
  config: { oauth: Pick<OAuthConfig, 'resource' | 'loopbackAliases'> };
}

export interface TokenResponse {
  access_token: string;
  token_type: 'Bearer';
  expires_in: number;
  refresh_token?: string;
}

const grant = (message: string) => new CoreError('invalid_request', message, { reason: 'invalid_grant' });
const target = (message: string) => new CoreError('invalid_request', message, { param: 'resource', reason: 'invalid_target' });

export const exchangeCodeInput = z.object({
  client_id: clientIdSchema,
  code: z.string().max(200),
  code_verifier: z.string().max(200),
  redirect_uri: z.string().max(2000).optional(),
  resource: z.string().max(2000).optional(),
});

export const refreshInput = z.object({
  client_id: clientIdSchema,
  refresh_token: z.string().max(200),
  resource: z.string().max(2000).optional(),
});

export const revokeTokenInput = z.object({
  client_id: clientIdSchema,
  token: z.string().max(200),
});

/**
 * Timestamps of rows read with `em.execute` come from the driver as strings (the ORM converts
 * only entities' dates): every one is read through these.
 */
type Timestamp = Date | string;
const time = (t: Timestamp) => new Date(t).getTime();
const dateOrNull = (t: Timestamp | null) => (t === null ? null : new Date(t));

interface CodeRow {
  client_id: string;
  client_name: string;
  redirect_uri: string;
  code_challenge: string;
  resource: string;
  account_id: string;
  /** The person who allowed the app on an organization's wallet (account_id); null: a personal approval. */
  member_id: string | null;
  spend_cap_micro: string | null;
  lifetime_days: number | null;
  expires_at: Timestamp;
  used_at: Timestamp | null;
  connection_id: string | null;
}

/** Revokes a connection and its key; what every refusal for a leaked secret and every revocation does. */
async function revokeConnection(em: EntityManager, connectionId: string): Promise<void> {
  await em.execute('update app_connections set revoked_at = coalesce(revoked_at, now()) where id = ?', [connectionId]);
  await em.execute('update api_keys set revoked_at = coalesce(revoked_at, now()) where id = (select key_id from app_connections where id = ?)', [connectionId]);
}

async function issueTokens(em: EntityManager, now: Date, c: { connectionId: string; clientId: string; resource: string; expiresAt: Date | null }): Promise<TokenResponse> {
  const access = newSecret('mas_at_');
  const refresh = newSecret('mas_rt_');
  const cutoff = (ttl: number) => new Date(Math.min(now.getTime() + ttl * 1000, c.expiresAt?.getTime() ?? Number.POSITIVE_INFINITY));
  const accessExpires = cutoff(ACCESS_TOKEN_TTL_SECONDS);
  await em.execute(
    `insert into oauth_tokens (token_hash, kind, connection_id, client_id, resource, expires_at, created_at)
     values (?, 'access', ?, ?, ?, ?, ?), (?, 'refresh', ?, ?, ?, ?, ?)`,
    [hashSecret(access), c.connectionId, c.clientId, c.resource, accessExpires, now, hashSecret(refresh), c.connectionId, c.clientId, c.resource, cutoff(REFRESH_TOKEN_TTL_SECONDS), now],
  );
  // Tokens of this connection that expired a day ago are of no use: swept as new ones are made.
  await em.execute('delete from oauth_tokens where connection_id = ? and expires_at < ?', [c.connectionId, new Date(now.getTime() - 86_400_000)]);
  return { access_token: access, token_type: 'Bearer', expires_in: Math.max(1, Math.floor((accessExpires.getTime() - now.getTime()) / 1000)), refresh_token: refresh };
}

/**
 * Exchanges an authorization code: checks the client, the redirect URI, the PKCE verifier and
 * the resource against what the code was bound to, then makes the app connection (or replaces
 * the one the account has with this app) and its first tokens.
 */
export async function exchangeCode(deps: Deps, em: EntityManager, input: z.output<typeof exchangeCodeInput>): Promise<TokenResponse> {
  const now = deps.clock();
  const outcome = await em.transactional(async (tx): Promise<{ tokens: TokenResponse } | { error: CoreError }> => {
    const [code] = await tx.execute<CodeRow[]>('select * from oauth_codes where code_hash = ? for update', [hashSecret(input.code)]);
    if (!code || code.client_id !== input.client_id) return { error: grant('The authorization code is not valid for this client.') };
    if (code.used_at) {
      // Used twice: someone else may hold it. What it made is revoked.
      if (code.connection_id) await revokeConnection(tx, code.connection_id);
      return { error: grant('The authorization code was already used; the connection it made has been revoked.') };
    }
    if (time(code.expires_at) <= now.getTime()) return { error: grant('The authorization code has expired; start the authorization again.') };
    if (input.redirect_uri !== undefined && input.redirect_uri !== code.redirect_uri) return { error: grant('redirect_uri does not match the one of the authorization request.') };
    if (!pkceMatches(input.code_verifier, code.code_challenge)) return { error: grant('code_verifier does not match the code challenge.') };
    if (input.resource !== undefined && resourceFor(deps.config.oauth, input.resource) !== code.resource) return { error: target('The resource does not match the one that was authorized.') };

    await tx.execute('select id from accounts where id = ? for update', [code.account_id]);
    // Allowed on an organization's wallet by a member who has left it since: no connection.
    if (code.member_id && !(await roleOf(tx, code.account_id, code.member_id))) return { error: grant('The person who allowed this app is no longer a member of the organization.') };
    const expiresAt = code.lifetime_days === null ? null : new Date(now.getTime() + code.lifetime_days * 86_400_000);
    const connectionId = (await reconnect(tx, now, code, expiresAt)) ?? (await connect(tx, now, code, expiresAt));
    await tx.execute('update oauth_codes set used_at = ?, connection_id = ? where code_hash = ?', [now, connectionId, hashSecret(input.code)]);
    return { tokens: await issueTokens(tx, now, { connectionId, clientId: code.client_id, resource: code.resource, expiresAt }) };
  });
  if ('error' in outcome) throw outcome.error;
  return outcome.tokens;
}

/**
 * A new connection for the code, with its own key (`kind = 'app'`, whose secret nobody ever
 * sees), if the account has room for one more.
 */
async function connect(tx: EntityManager, now: Date, code: CodeRow, expiresAt: Date | null): Promise<string> {
  await checkConnectionRoom(tx, code.account_id, code.member_id);
  const keyId = newId('key');
  const secret = generateKeySecret();
  // On an organization's wallet the key is the member's: their spend limit there applies to it.
  await tx.execute(`insert into api_keys (id, account_id, member_id, name, prefix, key_hash, created_at, kind) values (?, ?, ?, ?, ?, ?, ?, 'app')`, [
    keyId,
    code.account_id,
    code.member_id,
    `App: ${code.client_name}`.slice(0, 100),
    displayPrefix(secret),
    hashKey(secret),
    now,
  ]);
  const connectionId = newId('app');
  await tx.execute(
    `insert into app_connections (id, account_id, member_id, key_id, client_id, client_name, redirect_host, spend_cap_micro, expires_at, created_at, last_used_at)
     values (?, ?, ?, ?, ?, ?, ?, ?::bigint, ?, ?, ?)`,
    [connectionId, code.account_id, code.member_id, keyId, code.client_id, code.client_name, redirectHost(code.redirect_uri), code.spend_cap_micro, expiresAt, now, now],
  );
  return connectionId;
}

/**
 * Reconnecting an app the account already has connected (docs/oauth.md, "Reconnecting an app")
 * replaces that connection in place: one row per app, as GitHub and OpenRouter keep one
 * authorization per app (liveConnectionsOf says which connections are the same app). The kept
 * connection (the newest live one) takes the new approval's spend cap and lifetime and the new
 * client_id; its earlier tokens are deleted, so the app's previous sign-in stops at once; its key
 * stays, so its spend so far (which the cap counts) and its jobs carry over. Older live
 * duplicates (made before this rule) are revoked. Undefined when there is nothing to replace.
 */
async function reconnect(tx: EntityManager, now: Date, code: CodeRow, expiresAt: Date | null): Promise<string | undefined> {
  const host = redirectHost(code.redirect_uri);
  const live = await liveConnectionsOf(tx, code.account_id, { clientId: code.client_id, name: code.client_name, host }, now, true, code.member_id);
  const [kept, ...older] = live;
  if (!kept) return undefined;
  for (const o of older) await revokeConnection(tx, o.id);
  await tx.execute('delete from oauth_tokens where connection_id = ?', [kept.id]);
  await tx.execute(
    `update app_connections set client_id = ?, client_name = ?, redirect_host = ?, spend_cap_micro = ?::bigint, expires_at = ?, reconnected_at = ?, last_used_at = ? where id = ?`,
    [code.client_id, code.client_name, host, code.spend_cap_micro, expiresAt, now, now, kept.id],
  );
  await tx.execute('update api_keys set name = ? where id = ?', [`App: ${code.client_name}`.slice(0, 100), kept.key_id]);
  return kept.id;
}

interface TokenRow {
  kind: 'access' | 'refresh';
  connection_id: string;
  client_id: string;
  resource: string;
  expires_at: Timestamp;
  rotated_at: Timestamp | null;
  connection_expires_at: Timestamp | null;
  revoked_at: Timestamp | null;
}

const TOKEN_SQL = `select t.kind, t.connection_id, t.client_id, t.resource, t.expires_at, t.rotated_at, c.expires_at as connection_expires_at, c.revoked_at
  from oauth_tokens t join app_connections c on c.id = t.connection_id where t.token_hash = ?`;

/** A new pair for a refresh token, which is used up; a used one revokes the connection. */
export async function refreshTokens(deps: Deps, em: EntityManager, input: z.output<typeof refreshInput>): Promise<TokenResponse> {
  const now = deps.clock();
  const outcome = await em.transactional(async (tx): Promise<{ tokens: TokenResponse } | { error: CoreError }> => {
    const [token] = await tx.execute<TokenRow[]>(`${TOKEN_SQL} for update of t`, [hashSecret(input.refresh_token)]);
    if (!token || token.kind !== 'refresh' || token.client_id !== input.client_id) return { error: grant('The refresh token is not valid for this client.') };
    if (token.rotated_at) {
      await revokeConnection(tx, token.connection_id);
      return { error: grant('The refresh token was already used; for safety the connection has been revoked. Sign in again.') };
    }
    if (token.revoked_at) return { error: grant('This app connection has been revoked. Sign in again.') };
    if (time(token.expires_at) <= now.getTime() || (token.connection_expires_at && time(token.connection_expires_at) <= now.getTime())) {
      return { error: grant('The refresh token has expired. Sign in again.') };
    }
    if (input.resource !== undefined && resourceFor(deps.config.oauth, input.resource) !== token.resource) return { error: target('The resource does not match the one that was authorized.') };
    await tx.execute('update oauth_tokens set rotated_at = ? where token_hash = ?', [now, hashSecret(input.refresh_token)]);
    return {
      tokens: await issueTokens(tx, now, { connectionId: token.connection_id, clientId: token.client_id, resource: token.resource, expiresAt: dateOrNull(token.connection_expires_at) }),
    };
  });
  if ('error' in outcome) throw outcome.error;
  return outcome.tokens;
}

/**
 * RFC 7009: revoking an access or refresh token ends the app connection (and its key): the app
 * is refused on its next call. An unknown token, or another client's, changes nothing and is
 * not an error.
 */
export async function revokeToken(em: EntityManager, input: z.output<typeof revokeTokenInput>): Promise<{ object: 'revocation'; revoked: boolean }> {
  const [token] = await em.execute<TokenRow[]>(TOKEN_SQL, [hashSecret(input.token)]);
  if (!token || token.client_id !== input.client_id) return { object: 'revocation', revoked: false };
  await em.transactional((tx) => revokeConnection(tx, token.connection_id));
  return { object: 'revocation', revoked: true };
}

export const ACCESS_TOKEN_PREFIX = 'mas_at_';

/**
 * The app connection behind an access token, for the resource the caller serves (the token's
 * audience, RFC 8707). Every failure is the same `unauthorized`: unknown, expired, revoked, for
 * another resource, or an expired connection.
 */
export async function authenticateAppToken(em: EntityManager, token: string, resource: string | undefined, now: Date): Promise<AppConnectionPrincipal> {
  if (!/^mas_at_[A-Za-z0-9_-]{43}$/.test(token)) throw unauthorized('app_token');
  const [row] = await em.execute<
    { expires_at: Timestamp; resource: string; connection_id: string; account_id: string; key_id: string; spend_cap_micro: string | null; connection_expires_at: Timestamp | null; revoked_at: Timestamp | null; key_revoked_at: Timestamp | null; paid: boolean; disabled_at: Timestamp | null }[]
  >(
    `select t.expires_at, t.resource, c.id as connection_id, c.account_id, c.key_id, c.spend_cap_micro::text, c.expires_at as connection_expires_at,
        c.revoked_at, k.revoked_at as key_revoked_at, a.paid, a.disabled_at
      from oauth_tokens t join app_connections c on c.id = t.connection_id join api_keys k on k.id = c.key_id join accounts a on a.id = c.account_id
      where t.token_hash = ? and t.kind = 'access'`,
    [hashSecret(token)],
  );
  if (!row || row.revoked_at || row.key_revoked_at || row.disabled_at) throw unauthorized('app_token');
  if (time(row.expires_at) <= now.getTime()) throw unauthorized('app_token');
  if (row.connection_expires_at && time(row.connection_expires_at) <= now.getTime()) throw unauthorized('app_token');
  if (resource === undefined || canonicalResource(resource) !== row.resource) throw unauthorized('app_token');
  return {
    kind: 'app_connection',
    accountId: row.account_id,
    connectionId: row.connection_id,
    keyId: row.key_id,
    paid: row.paid,
    fromCache: false,
    spendCapMicro: row.spend_cap_micro === null ? null : BigInt(row.spend_cap_micro),
    expiresAt: dateOrNull(row.connection_expires_at),
  };
}
