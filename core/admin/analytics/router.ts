import { adminProcedure, router } from '../../trpc.ts';
import { jobDurations, jobDurationsInput, jobsByStatus, jobsByStatusInput } from './jobs.ts';
import { margins, marginsInput } from './margins.ts';
import { routesServed, routesServedInput } from './served-by.ts';
import { topAccounts, topAccountsInput, topModels, topModelsInput } from './top.ts';
import { usageInput, usagePerDay } from './usage.ts';

/**
 * Usage analytics for operators (docs/admin.md, "Analytics"): reads of the daily rollups that
 * the `mas-analytics-refresh` schedule keeps (core/admin/analytics/refresh.ts, which defines
 * spend, refunds and adjustments; route-days.ts defines revenue and upstream
 * cost). Any admin role may read them. Each answer's schema is beside its function
 * (usageSchema, topAccountsSchema, marginsSchema, …).
 */
export const analyticsRouter = router({
  usage: adminProcedure.input(usageInput).query(({ ctx, input }) => usagePerDay(ctx.em, input)),
  topAccounts: adminProcedure.input(topAccountsInput).query(({ ctx, input }) => topAccounts(ctx.em, input)),
  topModels: adminProcedure.input(topModelsInput).query(({ ctx, input }) => topModels(ctx.em, input)),
  jobsByStatus: adminProcedure.input(jobsByStatusInput).query(({ ctx, input }) => jobsByStatus(ctx.em, input)),
  jobDurations: adminProcedure.input(jobDurationsInput).query(({ ctx, input }) => jobDurations(ctx.em, input)),
  margins: adminProcedure.input(marginsInput).query(({ ctx, input }) => margins(ctx.em, input)),
  routesServed: adminProcedure.input(routesServedInput).query(({ ctx, input }) => routesServed(ctx.em, input.references)),
});
