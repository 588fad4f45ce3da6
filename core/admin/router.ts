import { adminProcedure, router } from '../trpc.ts';
import { adminActionsRouter } from './actions/router.ts';
import { analyticsRouter } from './analytics/router.ts';
import { auditFilterInput, listAudit } from './audit.ts';
import { modelAdminRouter } from './models/router.ts';
import { adminReadRouter } from './reads/router.ts';

/**
 * The use cases of the admin API (GraphQL at /admin/graphql, the admin pages, the CLI):
 * `adminProcedure` reads (any admin role), `operatorProcedure` acts (the operator role) and
 * every action writes an audit entry in its own transaction (core/admin/audit.ts).
 */
export const adminRouter = router({
  /** Who is calling: the admin API's door check. */
  whoami: adminProcedure.query(({ ctx }) => ({
    object: 'admin' as const,
    id: ctx.principal.kind === 'admin' ? ctx.principal.adminId : null,
    role: ctx.principal.kind === 'admin' ? ctx.principal.role : ('operator' as const),
    via: ctx.principal.kind === 'admin' ? ctx.principal.via : ('internal' as const),
  })),
  audit: adminProcedure.input(auditFilterInput).query(({ ctx, input }) => listAudit(ctx.em, input)),
  read: adminReadRouter,
  analytics: analyticsRouter,
  models: modelAdminRouter,
  actions: adminActionsRouter,
});
