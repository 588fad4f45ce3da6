import type { EntityManager } from '@mikro-orm/postgresql';
import { z } from 'zod';
import { notFound, unauthorized } from '../errors.ts';
import { newId } from '../ids.ts';
import type { AdminPrincipal } from './principals.ts';
import { hashSecret, newSecret } from './secrets.ts';

/**
 * Tokens of the admin API's operators, each with a role: `viewer` reads, `operator` also
 * acts. The secret is shown once, at creation; only its hash is stored.
 */
const PREFIX = 'mas_admin_';

export const createAdminTokenInput = z.object({
  name: z.string().trim().min(1).max(100),
  role: z.enum(['viewer', 'operator']),
});

export const adminTokenIdInput = z.object({ id: z.string().trim().regex(/^adm_[0-9A-Za-z]{1,64}$/, 'must be an admin token id such as adm_…') });

interface AdminTokenRow {
  id: string;
  name: string;
  role: 'viewer' | 'operator';
  created_at: Date;
  last_used_at: Date | null;
  revoked_at: Date | null;
}

function adminTokenView(row: AdminTokenRow) {
  return {
    id: row.id,
    object: 'admin_token' as const,
    name: row.name,
    role: row.role,
    created_at: new Date(row.created_at).toISOString(),
    last_used_at: row.last_used_at ? new Date(row.last_used_at).toISOString() : null,
    revoked_at: row.revoked_at ? new Date(row.revoked_at).toISOString() : null,
  };
}

export async function createAdminToken(em: EntityManager, input: z.output<typeof createAdminTokenInput>) {
  const id = newId('adm');
  const token = newSecret(PREFIX);
  const [row] = await em.execute<AdminTokenRow[]>('insert into admin_tokens (id, name, role, token_hash) values (?, ?, ?, ?) returning *', [
    id,
    input.name,
    input.role,
    hashSecret(token),
  ]);
  return { ...adminTokenView(row!), token };
}

/** Revokes an admin token; it is refused on its very next use. Idempotent. */
export async function revokeAdminToken(em: EntityManager, id: string) {
  await em.execute('update admin_tokens set revoked_at = now() where id = ? and revoked_at is null', [id]);
  const [row] = await em.execute<AdminTokenRow[]>('select * from admin_tokens where id = ?', [id]);
  if (!row) throw notFound('admin_token_not_found', `No admin token ${id}.`);
  return adminTokenView(row);
}

/** The admin of this token, looked up on every call (a revoke works at once); failures are all `unauthorized`. */
export async function authenticateAdmin(em: EntityManager, token: string | null): Promise<AdminPrincipal> {
  if (!token || !token.startsWith(PREFIX) || token.length > 128) throw unauthorized('admin');
  const [row] = await em.execute<{ id: string; role: 'viewer' | 'operator' }[]>(
    `update admin_tokens set last_used_at = now() where token_hash = ? and revoked_at is null returning id, role`,
    [hashSecret(token)],
  );
  if (!row) throw unauthorized('admin');
  return { kind: 'admin', adminId: row.id, role: row.role, via: 'token' };
}
