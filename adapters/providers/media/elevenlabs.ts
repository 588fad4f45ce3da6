import type { MediaPollResult, MediaProvider, MediaResult } from '../../../core/ports.ts';
import { MediaProviderError } from '../../../core/ports.ts';
import { forLog, oversizeIn, retryAfterMs, sizeLimitedFetch } from './upstream-limits.ts';

/**
 * ElevenLabs text-to-speech: `POST /v1/text-to-speech/{voice_id}?output_format=…` with
 * `{text, model_id, voice_settings}` and the key in `xi-api-key`; the answer is the audio.
 * The call is synchronous, so, as with OpenAI's speech, submit records the job in the handle
 * and fetchResult (the result-copy step) makes it. Plain fetch rather than the official SDK:
 * docs/providers.md says why.
 * Settings: `voice` (a voice id), `model` (overrides the catalog's upstream model name),
 * `output_format`, and the voice settings `stability`, `similarity_boost`, `style`, `speed`.
 */
export interface ElevenLabsConfig {
  baseUrl: string;
  apiKey?: string | undefined;
  timeoutMs: number;
  maxResultBytes: number;
  log?: { warn(fields: object, message: string): void } | undefined;
}

interface Handle {
  job: string;
  model: string;
  prompt: string;
  settings: Record<string, unknown>;
}

const VOICE_SETTINGS = ['stability', 'similarity_boost', 'style', 'speed', 'use_speaker_boost'] as const;
const FORMATS: Record<string, { mime: string; ext: string }> = {
  mp3: { mime: 'audio/mpeg', ext: 'mp3' },
  pcm: { mime: 'audio/pcm', ext: 'pcm' },
  ulaw: { mime: 'audio/basic', ext: 'ulaw' },
  alaw: { mime: 'audio/basic', ext: 'alaw' },
  opus: { mime: 'audio/ogg', ext: 'opus' },
  wav: { mime: 'audio/wav', ext: 'wav' },
};

export function elevenLabsProvider(config: ElevenLabsConfig): MediaProvider {
  const base = config.baseUrl.replace(/\/+$/, '');
  const limitedFetch = sizeLimitedFetch(config.maxResultBytes);
  const recent = new Map<string, MediaResult>();

  async function speak(h: Handle): Promise<MediaResult> {
    const voice = String(h.settings.voice ?? '');
    if (!voice) throw new MediaProviderError('refused', 'invalid_input', 'The model names no voice (settings.voice).');
    const format = String(h.settings.output_format ?? 'mp3_44100_128');
    const voiceSettings = Object.fromEntries(VOICE_SETTINGS.filter((k) => h.settings[k] !== undefined).map((k) => [k, h.settings[k]]));
    const body = { text: h.prompt, model_id: String(h.settings.model ?? h.model), ...(Object.keys(voiceSettings).length ? { voice_settings: voiceSettings } : {}) };
    let res: Response;
    let bytes: Uint8Array;
    try {
      res = await limitedFetch(`${base}/v1/text-to-speech/${encodeURIComponent(voice)}?output_format=${encodeURIComponent(format)}`, {
        method: 'POST',
        signal: AbortSignal.timeout(config.timeoutMs),
        headers: { 'content-type': 'application/json', accept: 'audio/*', ...(config.apiKey ? { 'xi-api-key': config.apiKey } : {}) },
        body: JSON.stringify(body),
      });
      if (!res.ok) throw await refusal(res, config);
      bytes = new Uint8Array(await res.arrayBuffer());
    } catch (err) {
      throw translate(err);
    }
    const kind = FORMATS[format.split('_')[0]!] ?? { mime: 'application/octet-stream', ext: 'bin' };
    return { bytes, mimeType: kind.mime, extension: kind.ext };
  }

  return {
    async submit(spec) {
      if (spec.type !== 'audio') throw new MediaProviderError('refused', 'invalid_input', `The ElevenLabs provider makes no ${spec.type} results.`);
      return JSON.stringify({ job: spec.jobId, model: spec.model, prompt: spec.prompt, settings: spec.settings } satisfies Handle);
    },
    poll: async (): Promise<MediaPollResult> => ({ status: 'succeeded' }),
    async fetchResult(raw) {
      const h = JSON.parse(raw) as Handle;
      // Kept for a retried copy step on this worker, so one job is not paid twice.
      const known = recent.get(h.job);
      if (known) return known;
      const result = await speak(h);
      recent.set(h.job, result);
      if (recent.size > 8) recent.delete(recent.keys().next().value!);
      return result;
    },
  };
}

/** ElevenLabs' error body, `{detail:{status,message}}` (or a validation list), as our words; the body goes to the log. */
async function refusal(res: Response, config: ElevenLabsConfig): Promise<MediaProviderError> {
  const text = await res.text().catch(() => '');
  let detail: { status?: unknown } | unknown[] | undefined;
  try {
    detail = (JSON.parse(text) as { detail?: { status?: unknown } | unknown[] }).detail;
  } catch {
    detail = undefined;
  }
  config.log?.warn({ provider: 'elevenlabs', status: res.status, upstream_error: forLog(text, config.apiKey) }, 'the upstream refused a call');
  const status = !Array.isArray(detail) && detail && typeof detail.status === 'string' ? detail.status : '';
  if (/tos|policy|moderation|blocked/i.test(status)) return new MediaProviderError('refused', 'content_policy', 'The provider refused the prompt under its content policy.');
  if (status === 'quota_exceeded') return new MediaProviderError('refused', 'provider_quota_exceeded', 'The provider account behind this model is out of credits; the operator has to top it up. You were not charged.');
  if (res.status === 401 || res.status === 403) {
    return new MediaProviderError('refused', 'provider_auth_failed', 'The provider refused this server\u2019s credentials; the operator has to fix them. You were not charged.');
  }
  if (res.status === 429) return new MediaProviderError('retryable', 'provider_rate_limited', 'The provider is rate limiting this server; tried again later.', retryAfterMs(res.headers));
  if (res.status >= 500) return new MediaProviderError('retryable', 'provider_unavailable', 'The provider is unavailable.', retryAfterMs(res.headers));
  if (status === 'voice_not_found') return new MediaProviderError('refused', 'invalid_input', 'The provider does not know this voice (settings.voice).');
  return new MediaProviderError('refused', 'invalid_input', 'The provider refused the request as invalid.');
}

function translate(err: unknown): MediaProviderError {
  if (err instanceof MediaProviderError) return err;
  const oversize = oversizeIn(err);
  if (oversize) return oversize;
  if (err instanceof Error && (err.name === 'TimeoutError' || err.name === 'AbortError')) return new MediaProviderError('retryable', 'provider_timeout', 'The provider did not answer in time.');
  return new MediaProviderError('retryable', 'provider_unavailable', 'The provider could not be reached.');
}
