import type { ContentBlock } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';
import { invalid } from '../../../core/errors.ts';
import { generationSchema, type GenerationView } from '../../../core/generations/views.ts';
import { RESULT_VIEW_URI } from '../apps/index.ts';
import { defineTool } from '../tool.ts';

const ended = (g: GenerationView) => g.status !== 'queued' && g.status !== 'running';
/** Progress is sent about this often while `generate` waits (many clients give up after 60 s without it). */
const PROGRESS_EVERY_SECONDS = 10;

/** The text and the result link of a job, as both tools answer it. */
function describe(g: GenerationView, waited?: number): { text: string; content: ContentBlock[] } {
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
  return { text: `Job ${g.id} is ${g.status}${after}. Call get_generation with id "${g.id}" later for its result. Its price, ${g.price_coins} coins, is reserved and refunded in full if it fails.`, content: [] };
}

export const generate = defineTool({
  name: 'generate',
  title: 'Generate an image, video, audio or 3D model',
  description:
    'Starts a media job on an image, video, audio or 3D model and waits for it, by default up to about 100 seconds, ' +
    'then returns the result as a link (valid one hour). A job still running then is returned with its id: call get_generation later. ' +
    "The price of the chosen settings is reserved when the job starts and charged when it succeeds; a failed job is refunded in full. " +
    'While it waits, the tool sends progress notifications every 10 s when the call carries a progressToken: clients that time out ' +
    'after 60 s without progress should send one. Cancelling the call (or disconnecting) does not stop the job: it keeps running and is billed.',
  input: z.object({
    model: z.string().min(1).max(200).describe('A media model id from list_models, e.g. "mas/image-demo".'),
    prompt: z.string().max(20_000).optional().describe('What to make.'),
    settings: z.record(z.string(), z.unknown()).optional().describe("The model's settings (see get_model), e.g. {\"size\": 512}; left-out settings take their defaults."),
    inputs: z
      .record(z.string(), z.union([z.string(), z.array(z.string())]))
      .optional()
      .describe("The model's file inputs (see get_model): a public URL or a file id from upload_file, e.g. {\"reference_image\": \"file_…\"}."),
    wait_seconds: z.number().int().min(0).optional().describe('How long to wait for the result, from 0 (return at once) to the server\'s maximum (about 100 s, the default).'),
    idempotency_key: z.string().min(1).max(255).optional().describe('Retrying with the same key and arguments returns the same job instead of starting (and paying for) another.'),
  }),
  output: generationSchema,
  annotations: { readOnlyHint: false, destructiveHint: false, idempotentHint: false, openWorldHint: true },
  ui: RESULT_VIEW_URI,
  async run(args, { core, signal, progress, generateWaitSeconds }) {
    const { wait_seconds: wanted, ...request } = args;
    if (wanted !== undefined && wanted > generateWaitSeconds) {
      throw invalid('wait_seconds', `Invalid value for 'wait_seconds': at most ${generateWaitSeconds} seconds on this server.`);
    }
    const wait = wanted ?? generateWaitSeconds;
    let { generation: job } = await core.generations.create(request);
    const started = Date.now();
    const waited = () => Math.round((Date.now() - started) / 1000);
    if (!ended(job) && wait > 0) await progress(`Job ${job.id} accepted (${job.status}).`, 0, wait);
    while (!ended(job) && !signal.aborted && waited() < wait) {
      job = await core.generations.wait({ id: job.id, seconds: Math.min(PROGRESS_EVERY_SECONDS, wait - waited()) });
      if (!ended(job)) await progress(`Job ${job.id} is ${job.status} after ${waited()} s.`, Math.min(waited(), wait), wait);
    }
    const shown = describe(job, ended(job) ? undefined : waited());
    return { structured: job, text: shown.text, content: shown.content };
  },
});

export const getGeneration = defineTool({
  name: 'get_generation',
  title: 'Get a generation job',
  description: "A job started with generate: its status (queued, running, succeeded, failed, canceled), its cost, and when it has succeeded a fresh link to its result (valid one hour). Free to call.",
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
