import type { MikroORM } from '@mikro-orm/postgresql';
import { createHash, randomBytes } from 'node:crypto';
import { makeKey } from './db.ts';

/**
 * Fixture builder: an app connection as the OAuth flow (issue 17) will make it: a key of the
 * account of its own, and the connection row naming it.
 */
export async function makeAppConnection(orm: MikroORM, accountId: string, opts: { name?: string; capMicro?: bigint } = {}) {
  const key = await makeKey(orm, accountId, `App: ${opts.name ?? 'Test app'}`);
  const id = `app_${randomBytes(12).toString('hex')}`;
  await orm.em.fork().execute(
    `insert into app_connections (id, account_id, key_id, client_id, client_name, redirect_host, spend_cap_micro)
     values (?, ?, ?, ?, ?, ?, ?)`,
    [id, accountId, key.id, 'https://app.example/client.json', opts.name ?? 'Test app', 'app.example', opts.capMicro?.toString() ?? null],
  );
  return { id, key };
}

/**
 * Fixture builder: an OAuth access token for an app connection, as the token endpoint issues
 * it (core/oauth/tokens.ts), for the given resource (the MCP server's URL). A call with
 * `{ kind: 'bearer', token, resource }` then acts as the connection, within its spend cap.
 */
export async function issueAccessToken(orm: MikroORM, connectionId: string, resource: string, ttlSeconds = 3600): Promise<string> {
  const token = `mas_at_${randomBytes(32).toString('base64url')}`;
  await orm.em.fork().execute(
    `insert into oauth_tokens (token_hash, kind, connection_id, client_id, resource, expires_at, created_at)
     select ?, 'access', c.id, c.client_id, ?, now() + make_interval(secs => ?), now() from app_connections c where c.id = ?`,
    [createHash('sha256').update(token).digest('hex'), new URL(resource).href.replace(/\/$/, ''), ttlSeconds, connectionId],
  );
  return token;
}
