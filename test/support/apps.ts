import type { MikroORM } from '@mikro-orm/postgresql';
import { randomBytes } from 'node:crypto';
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
