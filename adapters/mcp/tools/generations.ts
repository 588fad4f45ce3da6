import type { ContentBlock } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';
import { invalid } from '../../../core/errors.ts';
import { jsonRecord } from '../../../core/json-record.ts';
import { generationListSchema } from '../../../core/generations/list-generations.ts';
import { generationSchema, type GenerationView } from '../../../core/generations/views.ts';
import { RESULT_VIEW_URI } from '../apps/index.ts';
import { defineTool } from '../tool.ts';

const ended = (g: GenerationView) => g.status !== 'queued' && g.status !== 'running';

/** The text and the result link of a job, as both tools (and tasks/result, tasks.ts) answer it. */
export function describe(g: GenerationView, waited?: number): { text: string; content: ContentBlock[] } {
  if (g.status === 'succeeded' && g.output) {
    return {
      text: `Job ${g.id} succeeded: ${g.output.url}\n(${g.output.mime_type}, ${g.output.bytes} bytes; the link expires at ${g.output.expires_at}, one hour after the job ended: call get_generation for a fresh one.) Cost: ${g.cost_coins} coins.`,
      content: [
        {
          type: 'resource_link',
          uri: g.output.url,
          name: `${g.id} result`,
          mimeType: g.output.mime_type,
          description: `The result of ${g.id}; the link expires at ${g.output.expires_at} (one hour).`,
        },
      ],
    };
  }
  if (g.status === 'failed') return { text: `Job ${g.id} failed: ${g.error?.message ?? 'unknown error'} (${g.error?.code ?? 'failed'}). Its ${g.price_coins} coins were refunded in full.`, content: [] };
  if (g.status === 'canceled') return { text: `Job ${g.id} was canceled and refunded in full.`, content: [] };
  const after = waited === undefined ? '' : ` after ${waited} s`;
  return {
    text: `Job ${g.id} is ${g.status}${after}; it keeps running. Call get_generation with id "${g.id}" later for its result (list_generations lists it too). Its price, ${g.price_coins} coins, is reserved and refunded in full if it fails.`,
    content: [],
  };
}

/** Seconds since the job was accepted (its `created_at`), never below 0 whatever the clocks say. */
const ageSeconds = (g: GenerationView) => Math.max(0, Math.floor((Date.now() - Date.parse(g.created_at)) / 1000));

export const generate = defineTool({
  name: 'generate',
  title: 'Generate an image, video, audio or 3D model',
  description:
    'Starts a media job on an image, video, audio or 3D model and waits for it, up to about 100 seconds when the call carries a progressToken ' +
    'and about 50 seconds when it does not (clients give up on a call after 60 s without progress), ' +
    'then returns the result as a link (valid one hour). A job still running then is returned with its id: call get_generation later. ' +
    "The price of the chosen settings is reserved when the job starts and charged when it succeeds; a failed job is refunded in full. " +
    'While it waits, the tool sends progress notifications every 10 s when the call carries a progressToken (the job\'s status and elapsed seconds; ' +
    'a total only when the model gives an expected duration): clients that time out after 60 s without progress should send one. ' +
    'The first notification names the job id (gen_…). If the call times out or the connection drops, the job is not lost: find it with ' +
    'list_generations (newest first) or, with its id, get_generation, instead of calling generate again. ' +
    'To retry safely, pass an idempotency_key: the same key with the same arguments returns the same job instead of starting (and paying for) another. ' +
    'Cancelling the call (or disconnecting) does not stop the job: it keeps running and is billed.',
  input: z.object({
    model: z.string().min(1).max(200).describe('A media model id from list_models, e.g. "mas/image-demo".'),
    prompt: z.string().max(20_000).optional().describe('What to make.'),
    settings: jsonRecord(z.unknown()).optional().describe("The model's settings (see get_model), e.g. {\"size\": 512}; left-out settings take their defaults."),
    inputs: jsonRecord(z.union([z.string(), z.array(z.string())]))
      .optional()
      .describe("The model's file inputs (see get_model): a public URL or a file id from upload_file, e.g. {\"reference_image\": \"file_…\"}."),
    wait_seconds: z
      .number()
      .int()
      .min(0)
      .optional()
      .describe("How long to wait for the result, from 0 (return at once) to the server's maximum (about 100 s, the default); without a progressToken, at most about 50 s."),
    idempotency_key: z
      .string()
      .min(1)
      .max(255)
      .optional()
      .describe('Any unique text you choose, e.g. a UUID. Retrying with the same key and the same arguments returns the same job instead of starting (and paying for) another; the key is kept 24 hours.'),
  }),
  output: generationSchema,
  annotations: { readOnlyHint: false, destructiveHint: false, idempotentHint: false, openWorldHint: true },
  // A task (2025-11-25) is the job row itself: adapters/mcp/tasks.ts.
  execution: { taskSupport: 'optional' },
  ui: RESULT_VIEW_URI,
  async run(args, { core, signal, progress, generateWaitSeconds, maxWaitSeconds, progressEverySeconds }) {
    const { wait_seconds: wanted, ...request } = args;
    if (wanted !== undefined && wanted > maxWaitSeconds) {
      throw invalid('wait_seconds', `Invalid value for 'wait_seconds': at most ${maxWaitSeconds} seconds on this server.`);
    }
    // Without a progressToken the call's wait is shorter (the client's 60 s timeout is never reset): the running job comes back instead.
    const wait = Math.min(wanted ?? generateWaitSeconds, generateWaitSeconds);
    const created = await core.generations.create(request);
    let job = created.generation;
    const started = Date.now();
    // Whole seconds waited, rounded down: the wait ends when they reach `wait`, never half a second early.
    const waited = () => Math.floor((Date.now() - started) / 1000);
    const report = jobProgress(job.id, created.expected_seconds, progress);
    if (!ended(job) && wait > 0) await report.accepted(job);
    while (!ended(job) && !signal.aborted && waited() < wait) {
      job = await core.generations.wait({ id: job.id, seconds: Math.min(progressEverySeconds, wait - waited()) });
      if (!ended(job)) await report.update(job);
    }
    const shown = describe(job, ended(job) ? undefined : waited());
    return { structured: job, text: shown.text, content: shown.content };
  },
});

/**
 * The progress notifications of one job: each names its status and the seconds since it was
 * accepted. `progress` is those seconds, sent only when it grew (the MCP spec: progress must
 * increase with each notification); `total` is the model's expected duration, sent only while
 * the job is within it (a job that overruns it has no known length any more).
 */
export function jobProgress(id: string, expectedSeconds: number | null, send: (message: string, progress: number, total?: number) => Promise<void>) {
  let last = -1;
  const expected = (age: number) => (expectedSeconds !== null && age < expectedSeconds ? expectedSeconds : undefined);
  const post = async (age: number, message: string) => {
    if (age <= last) return;
    last = age;
    await send(message, age, expected(age));
  };
  const usually = expectedSeconds === null ? '' : `; jobs on this model usually take about ${expectedSeconds} s`;
  return {
    accepted: (job: GenerationView) => {
      const age = ageSeconds(job);
      return post(
        age,
        `Job ${id} accepted (${job.status}, ${age} s elapsed${usually}). If this call times out, call get_generation with id "${id}" or list_generations: the job keeps running and is billed once.`,
      );
    },
    update: (job: GenerationView) => {
      const age = ageSeconds(job);
      return post(age, `Job ${id} is ${job.status}, ${age} s elapsed${expected(age) === undefined ? '' : ` of about ${expectedSeconds} s expected`}.`);
    },
  };
}

export const getGeneration = defineTool({
  name: 'get_generation',
  title: 'Get a generation job',
  description:
    "A job started with generate: its status (queued, running, succeeded, failed, canceled), its cost, and when it has succeeded a fresh link to its result (valid one hour). " +
    'Use it for a generate call that timed out: its first progress notification named the id, and list_generations finds it otherwise. Free to call.',
  input: z.object({ id: z.string().min(1).max(100).describe('The job id that generate returned, e.g. "gen_…".') }),
  output: generationSchema,
  annotations: { readOnlyHint: true, idempotentHint: true, openWorldHint: false },
  ui: RESULT_VIEW_URI,
  async run(args, { core }) {
    const job = await core.generations.get({ id: args.id });
    const shown = describe(job);
    return { structured: job, text: shown.text, content: shown.content };
  },
});

/** One line of list_generations' text: id, status, model, cost and, once succeeded, the link. */
function line(g: GenerationView): string {
  const head = `${g.id} · ${g.status} · ${g.model} · created ${g.created_at}`;
  if (g.status === 'succeeded') return `${head} · ${g.cost_coins} coins · ${g.output ? `${g.output.url} (expires ${g.output.expires_at})` : 'result no longer kept'}`;
  if (g.status === 'failed') return `${head} · refunded (${g.error?.code ?? 'failed'})`;
  if (g.status === 'canceled') return `${head} · refunded`;
  return `${head} · ${g.price_coins} coins reserved`;
}

export const listGenerations = defineTool({
  name: 'list_generations',
  title: 'List generation jobs',
  description:
    "The account's media jobs, newest first: each one's id, status, model, cost and, once succeeded, a fresh link to its result (valid one hour). " +
    'Use it to find a job whose generate call timed out or was lost, then get_generation for its details. ' +
    'Pages of `limit` jobs (default 20, at most 100); when has_more is true, pass the last id as starting_after for the next page. `status` keeps one status only. Free to call.',
  input: z.object({
    limit: z.number().int().min(1).max(100).optional().describe('How many jobs, 1 to 100 (default 20).'),
    starting_after: z.string().min(1).max(100).optional().describe('The id of the last job of the previous page (gen_…): the jobs after it.'),
    status: generationSchema.shape.status.optional().describe('Only the jobs in this status.'),
  }),
  output: generationListSchema,
  annotations: { readOnlyHint: true, idempotentHint: true, openWorldHint: false },
  // The result viewer shows a list of jobs too (adapters/mcp/apps/views/result.js).
  ui: RESULT_VIEW_URI,
  async run(args, { core }) {
    const page = await core.generations.list(args);
    const which = args.status ? ` ${args.status}` : '';
    const head = page.data.length === 0 ? `No${which} jobs${args.starting_after ? ` after ${args.starting_after}` : ''}.` : `${page.data.length}${which} job${page.data.length === 1 ? '' : 's'}, newest first:`;
    const more = page.has_more ? `\nMore jobs: call list_generations with starting_after "${page.data.at(-1)!.id}".` : '';
    return {
      structured: page,
      text: [head, ...page.data.map(line)].join('\n') + more,
      content: page.data.flatMap((g) => describe(g).content),
    };
  },
});
