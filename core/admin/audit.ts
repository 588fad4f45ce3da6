import type { EntityManager } from '@mikro-orm/postgresql';
import { z } from 'zod';
import { isoTimeSchema } from '../views.ts';

// Writing an entry lives a floor below core/admin (core/audit/record.ts), so that use cases
// outside the admin API (payments, the welcome credit) audit without importing the admin API.
import { recordAudit, type AuditInput, type Operator } from '../audit/record.ts';

export { actorOf, recordAudit, type AuditInput, type Operator } from '../audit/record.ts';

/** A reason an operator must give: shown in the audit log, never to the customer. */
export const reasonSchema = z.string().trim().min(3, 'must say why, in a few words').max(500);

export const auditEntrySchema = z
  .object({
    id: z.string().describe('`aud_<n>`'),
    object: z.literal('audit_entry'),
    actor_type: z.enum(['admin_token', 'admin_user', 'internal']),
    actor_id: z.string().nullable(),
    action: z.string(),
    target_type: z.string(),
    target_id: z.string(),
    reason: z.string().nullable(),
    before: z.unknown(),
    after: z.unknown(),
    request_id: z.string().nullable(),
    created_at: isoTimeSchema,
  })
  .strict();
export type AuditEntryView = z.infer<typeof auditEntrySchema>;

export const auditFilterInput = z.object({
  action: z.string().max(100).optional(),
  target_type: z.string().max(50).optional(),
  target_id: z.string().max(200).optional(),
  actor_id: z.string().max(200).optional(),
  since: z.iso.datetime({ offset: true }).optional(),
  until: z.iso.datetime({ offset: true }).optional(),
  first: z.number().int().min(1).max(100).default(20),
  /** `aud_<n>` of the last entry of the previous page: entries come newest first. */
  after: z.string().regex(/^aud_\d{1,19}$/).optional(),
});

interface AuditRow {
  id: string;
  actor_type: AuditEntryView['actor_type'];
  actor_id: string | null;
  action: string;
  target_type: string;
  target_id: string;
  reason: string | null;
  before: unknown;
  after: unknown;
  request_id: string | null;
  created_at: Date | string;
}

/** The log, newest first, filtered; a page and whether there is more. */
export async function listAudit(em: EntityManager, input: z.output<typeof auditFilterInput>) {
  const where: string[] = [];
  const params: unknown[] = [];
  const add = (sql: string, value: unknown) => {
    where.push(sql);
    params.push(value);
  };
  if (input.action) add('action = ?', input.action);
  if (input.target_type) add('target_type = ?', input.target_type);
  if (input.target_id) add('target_id = ?', input.target_id);
  if (input.actor_id) add('actor_id = ?', input.actor_id);
  if (input.since) add('created_at >= ?', new Date(input.since));
  if (input.until) add('created_at < ?', new Date(input.until));
  if (input.after) add('id < ?', input.after.slice(4));
  // Ordered by the bigint column itself: `order by id` would name the output column id::text
  // and sort as text, so entry 10 came after entry 9.
  const rows = await em.execute<AuditRow[]>(
    `select id::text, actor_type, actor_id, action, target_type, target_id, reason, before, after, request_id, created_at
     from admin_audit_log ${where.length ? `where ${where.join(' and ')}` : ''} order by admin_audit_log.id desc limit ?`,
    [...params, input.first + 1],
  );
  const data = rows.slice(0, input.first).map(
    (r): AuditEntryView => ({
      id: `aud_${r.id}`,
      object: 'audit_entry',
      actor_type: r.actor_type,
      actor_id: r.actor_id,
      action: r.action,
      target_type: r.target_type,
      target_id: r.target_id,
      reason: r.reason,
      before: r.before,
      after: r.after,
      request_id: r.request_id,
      created_at: new Date(r.created_at).toISOString(),
    }),
  );
  return { object: 'list' as const, data, has_more: rows.length > input.first };
}

/**
 * Runs an operator's use case and its audit entry in one transaction: `entry` describes the
 * change from the result, or returns null when nothing changed (an idempotent repeat).
 */
export async function audited<T>(
  em: EntityManager,
  operator: Operator,
  requestId: string | undefined,
  run: (tx: EntityManager) => Promise<T>,
  entry: (result: T) => AuditInput | null,
): Promise<T> {
  return em.transactional(async (tx) => {
    const result = await run(tx);
    const described = entry(result);
    if (described) await recordAudit(tx, operator, described, requestId);
    return result;
  });
}
