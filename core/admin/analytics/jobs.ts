import type { EntityManager } from '@mikro-orm/postgresql';
import { z } from 'zod';
import { asOfSchema, checkRange, daySchema, idFilter, rangeShape, readAsOf } from './days.ts';

/**
 * Media jobs over a range of creation days (UTC), from the jobs_daily rollup: how many ended
 * how and why, and how long they took per model. A job is counted on the day it was created,
 * with the status it had at the last refresh.
 */
const STATUSES = ['queued', 'running', 'succeeded', 'failed', 'canceled'] as const;

export const jobsByStatusInput = z.object({ ...rangeShape, model_id: idFilter.optional() }).superRefine(checkRange);

export const jobsByStatusSchema = z
  .object({
    object: z.literal('jobs_by_status'),
    from: daySchema,
    to: daySchema,
    total: z.number().int(),
    by_status: z.array(z.object({ status: z.enum(STATUSES), jobs: z.number().int() }).strict()).describe('every status, in lifecycle order'),
    failures: z
      .array(z.object({ code: z.string().nullable().describe("the job's error code; null when it has none"), jobs: z.number().int() }).strict())
      .describe('failed jobs by error code, most frequent first'),
    as_of: asOfSchema,
  })
  .strict();

export async function jobsByStatus(em: EntityManager, input: z.output<typeof jobsByStatusInput>): Promise<z.infer<typeof jobsByStatusSchema>> {
  const byModel = input.model_id !== undefined;
  const rows = await em.execute<{ status: (typeof STATUSES)[number]; error_code: string; jobs: number }[]>(
    `select status, error_code, sum(jobs)::int as jobs from jobs_daily
     where day >= ?::date and day <= ?::date${byModel ? ' and model_id = ?' : ''}
     group by status, error_code`,
    [input.from, input.to, ...(byModel ? [input.model_id] : [])],
  );
  const count = (status: string) => rows.filter((r) => r.status === status).reduce((n, r) => n + r.jobs, 0);
  return {
    object: 'jobs_by_status',
    from: input.from,
    to: input.to,
    total: rows.reduce((n, r) => n + r.jobs, 0),
    by_status: STATUSES.map((status) => ({ status, jobs: count(status) })),
    failures: rows
      .filter((r) => r.status === 'failed')
      .map((r) => ({ code: r.error_code === '' ? null : r.error_code, jobs: r.jobs }))
      .sort((a, b) => b.jobs - a.jobs || (a.code ?? '').localeCompare(b.code ?? '')),
    as_of: await readAsOf(em),
  };
}

export const jobDurationsInput = z
  .object({
    ...rangeShape,
    model_id: idFilter.optional(),
    status: z.enum(['succeeded', 'failed', 'canceled']).default('succeeded').describe('the jobs measured: those that ended so'),
  })
  .superRefine(checkRange);

const durationSchema = z.number().int().nullable().describe('milliseconds, percentile_cont (interpolated, rounded); null when no job has this duration');
export const jobDurationsSchema = z
  .object({
    object: z.literal('job_durations'),
    from: daySchema,
    to: daySchema,
    status: z.enum(['succeeded', 'failed', 'canceled']),
    data: z
      .array(
        z
          .object({
            model_id: z.string(),
            jobs: z.number().int().describe('jobs that ended with the status asked for'),
            run_p50_ms: durationSchema.describe('median of completed − started: the run, from the first step to the end'),
            run_p95_ms: durationSchema,
            total_p50_ms: durationSchema.describe('median of completed − created: what the client waited, queue included'),
            total_p95_ms: durationSchema,
          })
          .strict(),
      )
      .describe('one row per model, by model id'),
    as_of: asOfSchema,
  })
  .strict();

/** Durations are whole milliseconds; an interpolated percentile is rounded to one. */
const wholeMs = (v: number | null | undefined) => (v === undefined || v === null ? null : Math.round(v));

/**
 * p50 and p95 per model of two durations of the jobs that ended with `status`: run (completed
 * − started; a job canceled while queued has none) and total (completed − created). Exact
 * percentile_cont over every job, from the rollup's arrays of durations.
 */
export async function jobDurations(em: EntityManager, input: z.output<typeof jobDurationsInput>): Promise<z.infer<typeof jobDurationsSchema>> {
  const byModel = input.model_id !== undefined;
  // One pass: the two sorted arrays of each row side by side (unnest pads the shorter with
  // nulls, which percentiles skip); every job that ended has a total, so they count the jobs.
  const rows = await em.execute<{ model_id: string; jobs: number; run: number[] | null; total: number[] | null }[]>(
    `select d.model_id, count(x.total)::int as jobs,
            percentile_cont(array[0.5, 0.95]) within group (order by x.run) as run,
            percentile_cont(array[0.5, 0.95]) within group (order by x.total) as total
     from jobs_daily d, unnest(d.run_ms, d.total_ms) as x (run, total)
     where d.day >= ?::date and d.day <= ?::date and d.status = ?${byModel ? ' and d.model_id = ?' : ''}
     group by d.model_id order by d.model_id`,
    [input.from, input.to, input.status, ...(byModel ? [input.model_id] : [])],
  );
  return {
    object: 'job_durations',
    from: input.from,
    to: input.to,
    status: input.status,
    data: rows.map((r) => ({
      model_id: r.model_id,
      jobs: r.jobs,
      run_p50_ms: wholeMs(r.run?.[0]),
      run_p95_ms: wholeMs(r.run?.[1]),
      total_p50_ms: wholeMs(r.total?.[0]),
      total_p95_ms: wholeMs(r.total?.[1]),
    })),
    as_of: await readAsOf(em),
  };
}
