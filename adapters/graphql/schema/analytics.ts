import type { z } from 'zod';
import type { jobDurationsSchema, jobsByStatusSchema } from '../../../core/admin/analytics/jobs.ts';
import type { marginsSchema } from '../../../core/admin/analytics/margins.ts';
import type { topAccountsSchema, topModelsSchema } from '../../../core/admin/analytics/top.ts';
import type { usageSchema } from '../../../core/admin/analytics/usage.ts';
import { builder } from '../builder.ts';
import { present } from './paging.ts';

/**
 * Usage analytics (core: admin.analytics.*, docs/admin.md "Analytics"): reads of the daily
 * rollups, for any admin role. Every answer says `asOf`, the moment the last refresh began.
 */
type Usage = z.infer<typeof usageSchema>;
type UsageRow = Usage['data'][number];
type Measures = Usage['totals'];
type TopAccounts = z.infer<typeof topAccountsSchema>;
type TopModels = z.infer<typeof topModelsSchema>;
type JobsByStatus = z.infer<typeof jobsByStatusSchema>;
type JobDurations = z.infer<typeof jobDurationsSchema>;
type Margins = z.infer<typeof marginsSchema>;

const dayDescription = 'A UTC day, YYYY-MM-DD.';
const asOfDescription = 'When the last refresh of the rollups began (null: never yet); later entries are not counted.';

const UsageMeasures = builder.objectRef<Measures>('UsageMeasures').implement({
  description: 'Coins of a range or a day (definitions: core/admin/analytics/refresh.ts).',
  fields: (t) => ({
    spentCoins: t.expose('spent_coins', { type: 'Coins', description: 'Captured: what requests and jobs were charged; refunds and releases are not spend.' }),
    refundedCoins: t.expose('refunded_coins', { type: 'Coins', description: 'Refunds of settled jobs, on the day of the refund.' }),
    netCoins: t.expose('net_coins', { type: 'Coins', description: 'spent − refunded' }),
    jobReleasedCoins: t.expose('job_released_coins', { type: 'Coins', description: 'Prices of failed or canceled jobs given back: never charged.' }),
    adjustedCoins: t.expose('adjusted_coins', { type: 'Coins', description: "Operators' corrections, signed; not spend, not refunds." }),
    requests: t.exposeInt('requests', { description: 'Charged requests and jobs (one capture each).' }),
  }),
});

const UsageDay = builder.objectRef<UsageRow>('UsageDay').implement({
  description: 'The usage of one day, split by the groups asked for.',
  fields: (t) => ({
    day: t.exposeString('day', { description: dayDescription }),
    accountId: t.exposeString('account_id', { nullable: true, description: 'With groupBy account.' }),
    modelId: t.exposeString('model_id', { nullable: true, description: 'With groupBy model; null also for what is about no model (adjustments).' }),
    keyId: t.exposeString('key_id', { nullable: true, description: 'With groupBy key; null also for what is about no key.' }),
    measures: t.field({ type: UsageMeasures, resolve: (r) => r }),
  }),
});

const UsageDimension = builder.enumType('UsageDimension', { values: ['account', 'model', 'key'] as const });

const UsagePerDay = builder.objectRef<Usage>('UsagePerDay').implement({
  fields: (t) => ({
    from: t.exposeString('from', { description: dayDescription }),
    to: t.exposeString('to', { description: dayDescription }),
    groupBy: t.field({ type: [UsageDimension], resolve: (u) => u.group_by }),
    totals: t.field({ type: UsageMeasures, description: 'Over the whole range and filter, whatever the limit.', resolve: (u) => u.totals }),
    data: t.field({ type: [UsageDay], description: 'By day, then by spend, largest first; days with nothing are absent.', resolve: (u) => u.data }),
    hasMore: t.exposeBoolean('has_more'),
    asOf: t.expose('as_of', { type: 'DateTime', nullable: true, description: asOfDescription }),
  }),
});

const TopAccount = builder.objectRef<TopAccounts['data'][number]>('TopAccount').implement({
  fields: (t) => ({
    accountId: t.exposeString('account_id'),
    email: t.exposeString('email', { nullable: true }),
    measures: t.field({ type: UsageMeasures, resolve: (r) => r }),
  }),
});

const TopAccountsList = builder.objectRef<TopAccounts>('TopAccounts').implement({
  fields: (t) => ({
    from: t.exposeString('from', { description: dayDescription }),
    to: t.exposeString('to', { description: dayDescription }),
    data: t.field({ type: [TopAccount], description: 'By spend, largest first.', resolve: (r) => r.data }),
    asOf: t.expose('as_of', { type: 'DateTime', nullable: true, description: asOfDescription }),
  }),
});

const TopModel = builder.objectRef<TopModels['data'][number]>('TopModel').implement({
  fields: (t) => ({
    modelId: t.exposeString('model_id'),
    measures: t.field({ type: UsageMeasures, resolve: (r) => r }),
  }),
});

const TopModelsList = builder.objectRef<TopModels>('TopModels').implement({
  fields: (t) => ({
    from: t.exposeString('from', { description: dayDescription }),
    to: t.exposeString('to', { description: dayDescription }),
    data: t.field({ type: [TopModel], description: 'By spend, largest first.', resolve: (r) => r.data }),
    asOf: t.expose('as_of', { type: 'DateTime', nullable: true, description: asOfDescription }),
  }),
});

const JobStatusCount = builder.objectRef<JobsByStatus['by_status'][number]>('JobStatusCount').implement({
  fields: (t) => ({ status: t.exposeString('status'), jobs: t.exposeInt('jobs') }),
});

const JobFailureCount = builder.objectRef<JobsByStatus['failures'][number]>('JobFailureCount').implement({
  fields: (t) => ({ code: t.exposeString('code', { nullable: true, description: "The job's error code; null when it has none." }), jobs: t.exposeInt('jobs') }),
});

const JobsByStatusResult = builder.objectRef<JobsByStatus>('JobsByStatus').implement({
  description: 'Media jobs by the day they were created, with the status they had at the last refresh.',
  fields: (t) => ({
    from: t.exposeString('from', { description: dayDescription }),
    to: t.exposeString('to', { description: dayDescription }),
    total: t.exposeInt('total'),
    byStatus: t.field({ type: [JobStatusCount], description: 'Every status, in lifecycle order.', resolve: (r) => r.by_status }),
    failures: t.field({ type: [JobFailureCount], description: 'Failed jobs by error code, most frequent first.', resolve: (r) => r.failures }),
    asOf: t.expose('as_of', { type: 'DateTime', nullable: true, description: asOfDescription }),
  }),
});

const EndedJobStatus = builder.enumType('EndedJobStatus', { values: ['succeeded', 'failed', 'canceled'] as const });

const ms = 'Milliseconds (interpolated percentile, rounded); null when no job has this duration.';
const JobDuration = builder.objectRef<JobDurations['data'][number]>('JobDuration').implement({
  fields: (t) => ({
    modelId: t.exposeString('model_id'),
    jobs: t.exposeInt('jobs', { description: 'Jobs that ended with the status asked for.' }),
    runP50Ms: t.exposeInt('run_p50_ms', { nullable: true, description: `Median of completed − started. ${ms}` }),
    runP95Ms: t.exposeInt('run_p95_ms', { nullable: true, description: ms }),
    totalP50Ms: t.exposeInt('total_p50_ms', { nullable: true, description: `Median of completed − created (queue included). ${ms}` }),
    totalP95Ms: t.exposeInt('total_p95_ms', { nullable: true, description: ms }),
  }),
});

const JobDurationsResult = builder.objectRef<JobDurations>('JobDurations').implement({
  fields: (t) => ({
    from: t.exposeString('from', { description: dayDescription }),
    to: t.exposeString('to', { description: dayDescription }),
    status: t.field({ type: EndedJobStatus, resolve: (r) => r.status }),
    data: t.field({ type: [JobDuration], description: 'One row per model, by model id.', resolve: (r) => r.data }),
    asOf: t.expose('as_of', { type: 'DateTime', nullable: true, description: asOfDescription }),
  }),
});

const MarginMeasures = builder.objectRef<Margins['totals']>('MarginMeasures').implement({
  description: 'Revenue, upstream cost and margin (definitions: core/admin/analytics/route-days.ts). The margin is over the requests whose upstream cost is known only.',
  fields: (t) => ({
    requests: t.exposeInt('requests', { description: 'Chat requests and succeeded jobs served.' }),
    revenueCoins: t.expose('revenue_coins', { type: 'Coins', description: 'What they were charged (the model\'s price, whichever route served).' }),
    costedRequests: t.exposeInt('costed_requests', { description: 'Of them, those whose upstream cost is known.' }),
    costedRevenueCoins: t.expose('costed_revenue_coins', { type: 'Coins', description: 'What the costed requests were charged.' }),
    upstreamCostCoins: t.expose('upstream_cost_coins', { type: 'Coins', description: 'What the costed requests cost upstream.' }),
    marginCoins: t.expose('margin_coins', { type: 'Coins', description: 'Costed revenue − upstream cost.' }),
    marginPercent: t.exposeString('margin_percent', { nullable: true, description: 'Margin ÷ costed revenue × 100, one decimal ("33.3"); null when the costed revenue is 0.' }),
    costKnownPercent: t.exposeString('cost_known_percent', { nullable: true, description: 'Costed requests ÷ requests × 100, one decimal; null when there is no request.' }),
  }),
});

const MarginRow = builder.objectRef<Margins['data'][number]>('MarginRow').implement({
  fields: (t) => ({
    day: t.exposeString('day', { nullable: true, description: `With groupBy day. ${dayDescription}` }),
    modelId: t.exposeString('model_id', { nullable: true, description: 'With groupBy model.' }),
    provider: t.exposeString('provider', { nullable: true, description: "With groupBy provider or route; '' for requests served before routes were recorded (by the model's one provider then)." }),
    routeModel: t.exposeString('route_model', { nullable: true, description: "With groupBy route: the model's name at the provider; '' as for provider." }),
    measures: t.field({ type: MarginMeasures, resolve: (r) => r }),
  }),
});

const MarginDimension = builder.enumType('MarginDimension', { values: ['day', 'model', 'provider', 'route'] as const, description: 'route: the provider and the model\'s name there together.' });

const MarginsResult = builder.objectRef<Margins>('Margins').implement({
  fields: (t) => ({
    from: t.exposeString('from', { description: dayDescription }),
    to: t.exposeString('to', { description: dayDescription }),
    groupBy: t.field({ type: [MarginDimension], resolve: (m) => m.group_by }),
    totals: t.field({ type: MarginMeasures, description: 'Over the whole range and filter, whatever the limit.', resolve: (m) => m.totals }),
    data: t.field({ type: [MarginRow], description: 'By day (when grouped by day), then by revenue, largest first; what served nothing is absent.', resolve: (m) => m.data }),
    hasMore: t.exposeBoolean('has_more'),
    asOf: t.expose('as_of', { type: 'DateTime', nullable: true, description: asOfDescription }),
  }),
});

builder.queryFields((t) => {
  const range = {
    from: t.arg.string({ required: true, description: `First day, included. ${dayDescription}` }),
    to: t.arg.string({ required: true, description: `Last day, included (at most 366 days). ${dayDescription}` }),
  };
  return {
    usage: t.field({
      type: UsagePerDay,
      description: 'Coins per day over a range, optionally for one account, model or key, and grouped by any of them.',
      args: {
        ...range,
        accountId: t.arg.string(),
        modelId: t.arg.string(),
        keyId: t.arg.string(),
        groupBy: t.arg({ type: [UsageDimension], description: 'Split each day by these, besides the day.' }),
        limit: t.arg.int({ description: 'Rows at most (1 to 10000, default 1000); hasMore says whether there were more.' }),
      },
      resolve: (_root, args, ctx) =>
        ctx.core.admin.analytics.usage({
          from: args.from,
          to: args.to,
          ...present({ account_id: args.accountId, model_id: args.modelId, key_id: args.keyId, group_by: args.groupBy, limit: args.limit }),
        }),
    }),
    topAccounts: t.field({
      type: TopAccountsList,
      description: 'The accounts that spent most over a range.',
      args: { ...range, limit: t.arg.int({ description: '1 to 100, default 10.' }), modelId: t.arg.string({ description: 'Only what was spent on this model.' }) },
      resolve: (_root, args, ctx) => ctx.core.admin.analytics.topAccounts({ from: args.from, to: args.to, ...present({ limit: args.limit, model_id: args.modelId }) }),
    }),
    topModels: t.field({
      type: TopModelsList,
      description: 'The models most spent on over a range.',
      args: { ...range, limit: t.arg.int({ description: '1 to 100, default 10.' }), accountId: t.arg.string({ description: 'Only what this account spent.' }) },
      resolve: (_root, args, ctx) => ctx.core.admin.analytics.topModels({ from: args.from, to: args.to, ...present({ limit: args.limit, account_id: args.accountId }) }),
    }),
    jobsByStatus: t.field({
      type: JobsByStatusResult,
      args: { ...range, modelId: t.arg.string() },
      resolve: (_root, args, ctx) => ctx.core.admin.analytics.jobsByStatus({ from: args.from, to: args.to, ...present({ model_id: args.modelId }) }),
    }),
    margins: t.field({
      type: MarginsResult,
      description: 'Revenue, upstream cost and margin per day, model, provider and route over a range (docs/admin.md, "Margin").',
      args: {
        ...range,
        modelId: t.arg.string(),
        provider: t.arg.string({ description: "Only this provider's routes; '' for requests from before routes were recorded." }),
        routeModel: t.arg.string({ description: "Only this model name at the provider." }),
        groupBy: t.arg({ type: [MarginDimension], description: 'Split by these (default day, model, route).' }),
        limit: t.arg.int({ description: 'Rows at most (1 to 10000, default 1000); hasMore says whether there were more.' }),
      },
      resolve: (_root, args, ctx) =>
        ctx.core.admin.analytics.margins({
          from: args.from,
          to: args.to,
          ...present({ model_id: args.modelId, provider: args.provider, route_model: args.routeModel, group_by: args.groupBy, limit: args.limit }),
        }),
    }),
    jobDurations: t.field({
      type: JobDurationsResult,
      description: 'p50 and p95 per model of the run and total durations of the jobs that ended with `status`.',
      args: { ...range, modelId: t.arg.string(), status: t.arg({ type: EndedJobStatus, description: 'Default succeeded.' }) },
      resolve: (_root, args, ctx) => ctx.core.admin.analytics.jobDurations({ from: args.from, to: args.to, ...present({ model_id: args.modelId, status: args.status }) }),
    }),
  };
});
