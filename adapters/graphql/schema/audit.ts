import type { AuditEntryView } from '../../../core/admin/audit.ts';
import { builder } from '../builder.ts';
import { connection, pageArgs, pageComplexity, pageOf, present, timeRangeFields } from './paging.ts';

const AdminAuditEntry = builder.objectRef<AuditEntryView>('AdminAuditEntry').implement({
  description: 'One admin action, as the audit log keeps it (append-only, written in the action’s own transaction).',
  fields: (t) => ({
    id: t.exposeID('id', { description: '`aud_…`' }),
    actorType: t.exposeString('actor_type', { description: '`admin_token`, `admin_user` or `internal` (the CLI on the server’s machine).' }),
    actorId: t.exposeString('actor_id', { nullable: true }),
    action: t.exposeString('action', { description: '`wallet.top_up`, `account.disable`, `key.revoke`, …' }),
    targetType: t.exposeString('target_type'),
    targetId: t.exposeString('target_id'),
    reason: t.exposeString('reason', { nullable: true }),
    before: t.expose('before', { type: 'JSON', nullable: true }),
    after: t.expose('after', { type: 'JSON', nullable: true }),
    requestId: t.exposeString('request_id', { nullable: true }),
    createdAt: t.expose('created_at', { type: 'DateTime' }),
  }),
});

const AdminAuditEntryConnection = builder.connectionObject({ type: AdminAuditEntry, name: 'AdminAuditEntryConnection' });

const AuditFilter = builder.inputType('AuditFilter', {
  fields: (t) => ({ action: t.string(), targetType: t.string(), targetId: t.string(), actorId: t.string(), ...timeRangeFields(t) }),
});

builder.queryField('auditLog', (t) =>
  t.field({
    type: AdminAuditEntryConnection,
    description: 'The admin audit log, newest first.',
    args: { ...pageArgs(t.arg), filter: t.arg({ type: AuditFilter }) },
    complexity: pageComplexity,
    resolve: async (_root, args, ctx) => {
      const f = args.filter ?? {};
      const filter = present({ action: f.action, target_type: f.targetType, target_id: f.targetId, actor_id: f.actorId, since: f.since, until: f.until });
      return connection(await ctx.core.admin.audit({ ...pageOf(args), ...filter }));
    },
  }),
);
