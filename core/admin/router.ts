import { adminProcedure, operatorProcedure, publicProcedure, router } from '../trpc.ts';
import { adminActionsRouter } from './actions/router.ts';
import { analyticsRouter } from './analytics/router.ts';
import { auditFilterInput, listAudit } from './audit.ts';
import { modelAdminRouter } from './models/router.ts';
import { listPayments, paymentsInput, revenueInput, revenuePerDay } from './payments.ts';
import { adminReadRouter } from './reads/router.ts';
import { routeHealth } from './routes.ts';
import {
  adminLoginLinkFor,
  adminRedeemInput,
  adminSignInInput,
  adminUserRefInput,
  createAdminUser,
  createAdminUserInput,
  listAdminUsers,
  redeemAdminLink,
  signInAdmin,
  signOutAdmin,
} from './users.ts';

/** The admin session token the caller sent (the admin pages' cookie), if any. */
const adminToken = (ctx: { credential: { kind: string; token?: string | null } }) => (ctx.credential.kind === 'admin' ? (ctx.credential.token ?? null) : null);

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
  users: router({
    list: adminProcedure.query(({ ctx }) => listAdminUsers(ctx.em)),
    /** A new admin user and a one-time sign-in link (`mas admin create`). */
    create: operatorProcedure.input(createAdminUserInput).mutation(({ ctx, input }) => createAdminUser(ctx.deps, ctx.em, ctx.principal, input, ctx.requestId)),
    loginLink: operatorProcedure.input(adminUserRefInput).mutation(({ ctx, input }) => adminLoginLinkFor(ctx.deps, ctx.em, ctx.principal, input.id, ctx.requestId)),
  }),
  /** The admin pages' ways in and out. */
  session: router({
    signIn: publicProcedure.input(adminSignInInput).mutation(({ ctx, input }) => signInAdmin(ctx.deps, ctx.em, input, { ip: ctx.clientIp, previousToken: adminToken(ctx) })),
    redeemLink: publicProcedure.input(adminRedeemInput).mutation(({ ctx, input }) => redeemAdminLink(ctx.deps, ctx.em, input, { ip: ctx.clientIp, previousToken: adminToken(ctx) })),
    signOut: adminProcedure.mutation(({ ctx }) => signOutAdmin(ctx.em, adminToken(ctx))),
  }),
  read: adminReadRouter,
  analytics: analyticsRouter,
  models: modelAdminRouter,
  /** Payments from Stripe with their refunds and disputes, and revenue per day (docs/payments.md, "Operators"). */
  payments: router({
    list: adminProcedure.input(paymentsInput).query(({ ctx, input }) => listPayments(ctx.em, input)),
    revenue: adminProcedure.input(revenueInput).query(({ ctx, input }) => revenuePerDay(ctx.em, input)),
  }),
  actions: adminActionsRouter,
  /** The model routes' circuit breakers (docs/providers.md, "Routes, fallback and breakers"). */
  routes: router({
    health: adminProcedure.query(({ ctx }) => routeHealth(ctx.deps)),
  }),
});
