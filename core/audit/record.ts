import type { EntityManager } from '@mikro-orm/postgresql';
import type { AdminPrincipal, InternalPrincipal } from '../auth/principals.ts';

/**
 * The admin audit log (docs/admin.md, "Audit log"): every admin mutation appends one entry, in
 * the same transaction as its change: who (an admin token, an admin user, or the service itself:
 * the CLI on the server's machine), what, on which target, why, and the values before and after
 * that matter. The table is append-only (a trigger refuses UPDATE, DELETE and TRUNCATE) and
 * apart from the customers' ledger.
 */
export type Operator = AdminPrincipal | InternalPrincipal;

export interface AuditInput {
  /** `wallet.top_up`, `account.disable`, `key.revoke`, …: a stable dotted name. */
  action: string;
  targetType: 'account' | 'wallet' | 'api_key' | 'app_connection' | 'model' | 'generation' | 'admin_token' | 'admin_user' | 'catalog' | 'payment';
  targetId: string;
  reason?: string | null | undefined;
  before?: unknown;
  after?: unknown;
}

export function actorOf(operator: Operator): { type: 'admin_token' | 'admin_user' | 'internal'; id: string | null } {
  if (operator.kind === 'internal') return { type: 'internal', id: null };
  return { type: operator.via === 'session' ? 'admin_user' : 'admin_token', id: operator.adminId };
}

/** Appends one entry; call it with the transaction that makes the change. */
export async function recordAudit(tx: EntityManager, operator: Operator, entry: AuditInput, requestId?: string): Promise<void> {
  const actor = actorOf(operator);
  await tx.execute(
    `insert into admin_audit_log (actor_type, actor_id, action, target_type, target_id, reason, before, after, request_id)
     values (?, ?, ?, ?, ?, ?, ?::jsonb, ?::jsonb, ?)`,
    [
      actor.type,
      actor.id,
      entry.action,
      entry.targetType,
      entry.targetId,
      entry.reason ?? null,
      entry.before === undefined ? null : JSON.stringify(entry.before),
      entry.after === undefined ? null : JSON.stringify(entry.after),
      requestId ?? null,
    ],
  );
}
