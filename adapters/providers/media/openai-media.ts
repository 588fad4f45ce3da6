import type OpenAI from 'openai';
import type { InputReader, MediaJobSpec, MediaPollResult, MediaProvider, MediaResult } from '../../../core/ports.ts';
import { MediaProviderError } from '../../../core/ports.ts';
import { forLog, oversizeIn, resultTooLarge, retryAfterMs, sizeLimitedFetch } from './upstream-limits.ts';

/**
 * OpenAI's media APIs through the official SDK (its `baseURL` points it at any compatible
 * upstream or a test's mock). The catalog entry's type picks the API:
 *   image  images.generate, or images.edit when the job has an `image` input (b64_json decoded)
 *   audio  audio.speech.create
 *   video  videos.create, retrieve until completed or failed, downloadContent, delete to cancel
 * Images and speech answer synchronously, so submit only records the job in the handle and the
 * call is made by fetchResult, in the result-copy step (minutes and a heartbeat, and the only
 * step after which nothing can fail before the bytes are stored). docs/providers.md says why.
 * The SDK never retries (maxRetries 0): Temporal retries the step, after Retry-After.
 */
export interface OpenAIMediaConfig {
  baseUrl: string;
  apiKey?: string | undefined;
  timeoutMs: number;
  organization?: string | undefined;
  project?: string | undefined;
  maxResultBytes: number;
  log?: { warn(fields: object, message: string): void } | undefined;
}

type Handle =
  | { family: 'image' | 'speech'; job: string; model: string; prompt: string; settings: Record<string, unknown>; image?: string | undefined }
  | { family: 'video'; id: string };

const IMAGE_SETTINGS = ['size', 'quality', 'background', 'output_format', 'output_compression', 'moderation'] as const;
const SPEECH_SETTINGS = ['voice', 'response_format', 'speed', 'instructions'] as const;
const AUDIO_TYPES: Record<string, string> = { mp3: 'audio/mpeg', opus: 'audio/ogg', aac: 'audio/aac', flac: 'audio/flac', wav: 'audio/wav', pcm: 'audio/pcm' };
const IMAGE_TYPES: Record<string, string> = { png: 'image/png', jpeg: 'image/jpeg', webp: 'image/webp' };

type Sdk = typeof import('openai');
let sdk: Sdk | undefined;
const loadSdk = async (): Promise<Sdk> => (sdk ??= await import('openai'));

export function openaiMediaProvider(config: OpenAIMediaConfig): MediaProvider {
  // The SDK is imported on the first call (loadSdk): a process that never runs an OpenAI media job never holds it.
  let made: Promise<OpenAI> | undefined;
  const client = () =>
    (made ??= loadSdk().then(
      ({ default: OpenAISdk }) =>
        new OpenAISdk({
          apiKey: config.apiKey ?? 'missing',
          baseURL: config.baseUrl,
          organization: config.organization ?? null,
          project: config.project ?? null,
          timeout: config.timeoutMs,
          maxRetries: 0,
          fetch: sizeLimitedFetch(config.maxResultBytes),
        }),
      (err: unknown) => {
        made = undefined;
        throw err;
      },
    ));
  // A synchronous result kept for a retried copy step on this worker, so one job is not paid twice.
  const recent = new Map<string, MediaResult>();
  const call = <T>(what: string, work: () => Promise<T>) => work().catch((err: unknown) => Promise.reject(translate(err, what, config)));

  async function makeSynchronous(h: Extract<Handle, { family: 'image' | 'speech' }>, inputs: InputReader): Promise<MediaResult> {
    if (h.family === 'speech') {
      const format = String(h.settings.response_format ?? 'mp3');
      const res = await call('audio.speech', async () => (await client()).audio.speech.create({ model: h.model, input: h.prompt, ...pick(h.settings, SPEECH_SETTINGS), response_format: format } as OpenAI.Audio.SpeechCreateParams));
      const bytes = await call('audio.speech', async () => new Uint8Array(await res.arrayBuffer()));
      return { bytes, mimeType: AUDIO_TYPES[format] ?? 'application/octet-stream', extension: format };
    }
    const params = { model: h.model, prompt: h.prompt, n: 1, ...pick(h.settings, IMAGE_SETTINGS) };
    const answer = h.image
      ? await call('images.edit', async () => (await client()).images.edit({ ...params, image: await (await loadSdk()).toFile(await inputs.read(h.image!), 'image.png') } as OpenAI.Images.ImageEditParamsNonStreaming))
      : await call('images.generate', async () => (await client()).images.generate(params as OpenAI.Images.ImageGenerateParamsNonStreaming));
    const b64 = answer.data?.[0]?.b64_json;
    if (typeof b64 !== 'string') throw badAnswer(config, 'images', 'no b64_json in the answer');
    const bytes = Buffer.from(b64, 'base64');
    if (bytes.length > config.maxResultBytes) throw resultTooLarge(config.maxResultBytes);
    const format = String(h.settings.output_format ?? answer.output_format ?? 'png');
    return { bytes: new Uint8Array(bytes), mimeType: IMAGE_TYPES[format] ?? 'image/png', extension: format === 'jpeg' ? 'jpg' : format };
  }

  return {
    async submit(spec: MediaJobSpec) {
      if (spec.type === 'video') {
        const params = { model: spec.model, prompt: spec.prompt, ...(spec.settings.seconds !== undefined ? { seconds: String(spec.settings.seconds) } : {}), ...(spec.settings.size !== undefined ? { size: String(spec.settings.size) } : {}) };
        // The job id as Idempotency-Key: a submit retried after a worker died does not start a second video where honoured.
        const video = await call('videos.create', async () => (await client()).videos.create(params as OpenAI.Videos.VideoCreateParams, { headers: { 'Idempotency-Key': spec.jobId } }));
        return JSON.stringify({ family: 'video', id: video.id } satisfies Handle);
      }
      if (spec.type !== 'image' && spec.type !== 'audio') throw new MediaProviderError('refused', 'invalid_input', `The OpenAI provider makes no ${spec.type} results.`);
      const image = spec.inputs.image;
      const handle: Handle = {
        family: spec.type === 'image' ? 'image' : 'speech',
        job: spec.jobId,
        model: spec.model,
        prompt: spec.prompt,
        settings: spec.settings,
        image: Array.isArray(image) ? image[0] : image,
      };
      return JSON.stringify(handle);
    },
    async poll(raw): Promise<MediaPollResult> {
      const h = JSON.parse(raw) as Handle;
      if (h.family !== 'video') return { status: 'succeeded' };
      const video = await call('videos.retrieve', async () => (await client()).videos.retrieve(h.id));
      if (video.status === 'completed') return { status: 'succeeded' };
      if (video.status !== 'failed') return { status: 'running' };
      config.log?.warn({ provider: 'openai', call: 'videos.retrieve', video: h.id, upstream_error: forLog(video.error, config.apiKey) }, 'the upstream failed a video');
      return videoFailure(video.error?.code);
    },
    async fetchResult(raw, inputs): Promise<MediaResult> {
      const h = JSON.parse(raw) as Handle;
      if (h.family === 'video') {
        const res = await call('videos.downloadContent', async () => (await client()).videos.downloadContent(h.id));
        const bytes = await call('videos.downloadContent', async () => new Uint8Array(await res.arrayBuffer()));
        return { bytes, mimeType: 'video/mp4', extension: 'mp4' };
      }
      const known = recent.get(h.job);
      if (known) return known;
      const result = await makeSynchronous(h, inputs);
      recent.set(h.job, result);
      if (recent.size > 8) recent.delete(recent.keys().next().value!);
      return result;
    },
    async cancel(raw) {
      const h = JSON.parse(raw) as Handle;
      // Images and speech are one call, nothing to stop; a video is deleted, which stops it upstream.
      if (h.family === 'video') await call('videos.delete', async () => (await client()).videos.delete(h.id));
    },
  };
}

function pick(settings: Record<string, unknown>, keys: readonly string[]): Record<string, unknown> {
  return Object.fromEntries(keys.filter((k) => settings[k] !== undefined && settings[k] !== '').map((k) => [k, settings[k]]));
}

const POLICY = new Set(['moderation_blocked', 'content_policy_violation', 'content_filter']);
export const CONTENT_POLICY_MESSAGE = 'The provider refused the prompt under its content policy.';

function videoFailure(code: string | undefined): MediaPollResult {
  if (code && POLICY.has(code)) return { status: 'failed', message: CONTENT_POLICY_MESSAGE, code: 'content_policy' };
  return { status: 'failed', message: 'The provider could not make the video.', code: 'provider_failed' };
}

function badAnswer(config: OpenAIMediaConfig, what: string, detail: string): MediaProviderError {
  config.log?.warn({ provider: 'openai', call: what, detail }, 'the upstream answered something unreadable');
  return new MediaProviderError('retryable', 'provider_bad_response', 'The provider answered something this server could not read.');
}

/** An SDK or network failure as a MediaProviderError in our words; the upstream's body goes to the log only. */
export function translate(err: unknown, what: string, config: Pick<OpenAIMediaConfig, 'log' | 'apiKey'>): MediaProviderError {
  if (err instanceof MediaProviderError) return err;
  const oversize = oversizeIn(err);
  if (oversize) return oversize;
  // The SDK's errors come from the SDK once loaded (every call loads it first); before that, no error is one of them.
  const OpenAI = sdk;
  if (OpenAI && err instanceof OpenAI.APIConnectionTimeoutError) return new MediaProviderError('retryable', 'provider_timeout', 'The provider did not answer in time.');
  if (OpenAI && err instanceof OpenAI.APIError && err.status !== undefined) {
    const body = (err.error ?? {}) as { code?: unknown; type?: unknown; param?: unknown };
    config.log?.warn({ provider: 'openai', call: what, status: err.status, upstream_error: forLog(err.error, config.apiKey) }, 'the upstream refused a call');
    const code = String(body.code ?? '');
    const type = String(body.type ?? '');
    if (POLICY.has(code) || POLICY.has(type)) return new MediaProviderError('refused', 'content_policy', CONTENT_POLICY_MESSAGE);
    if (err.status === 401 || err.status === 403) {
      return new MediaProviderError('refused', 'provider_auth_failed', 'The provider refused this server\u2019s credentials; the operator has to fix them. You were not charged.');
    }
    if (err.status === 429) {
      return new MediaProviderError('retryable', 'provider_rate_limited', 'The provider is rate limiting this server; tried again later.', retryAfterMs(err.headers));
    }
    if (err.status >= 500) return new MediaProviderError('retryable', 'provider_unavailable', 'The provider is unavailable.', retryAfterMs(err.headers));
    const param = typeof body.param === 'string' && /^[A-Za-z0-9_.[\]]{1,64}$/.test(body.param) ? ` (about '${body.param}')` : '';
    return new MediaProviderError('refused', 'invalid_input', `The provider refused the request as invalid${param}.`);
  }
  if (OpenAI && err instanceof OpenAI.APIConnectionError) return new MediaProviderError('retryable', 'provider_unavailable', 'The provider could not be reached.');
  if (err instanceof SyntaxError) {
    config.log?.warn({ provider: 'openai', call: what, detail: err.message }, 'the upstream answered malformed JSON');
    return new MediaProviderError('retryable', 'provider_bad_response', 'The provider answered something this server could not read.');
  }
  return new MediaProviderError('retryable', 'provider_failed', 'The provider call failed.');
}
