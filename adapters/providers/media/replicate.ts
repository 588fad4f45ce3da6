import { MediaProviderError, type InputReader, type MediaJobSpec, type MediaPollResult, type MediaProvider, type MediaResult } from '../../../core/ports.ts';
import { forLog, retryAfterMs } from './upstream-limits.ts';

/**
 * A Replicate-style predictions upstream: `POST /predictions` with `{version, input}`,
 * `GET /predictions/{id}` until `status` is `succeeded`, `failed` or `canceled`, the result
 * at the URL in `output`, and `POST /predictions/{id}/cancel`. Settings and inputs go into
 * `input` by name; uploaded files become signed links the upstream can fetch. The job id is
 * sent as an `Idempotency-Key` header, so a submit retried after a worker died does not start
 * a second run on upstreams that honour it.
 *
 * What the upstream says when it refuses a call or fails a prediction (its `detail`, the
 * prediction's `error`) goes to the operator's log, never to the customer: every failure is a
 * MediaProviderError with our code and our words (docs/providers.md, "Replicate").
 */
export interface ReplicateConfig {
  baseUrl: string;
  apiKey?: string | undefined;
  timeoutMs: number;
  /** Downloads the output through the URL guard (no private addresses). */
  download: (url: string) => Promise<Uint8Array>;
  /** Where the upstream's own words go: for the operator, never to the customer. */
  log?: { warn(fields: object, message: string): void } | undefined;
}

interface Prediction {
  id: string;
  status: 'starting' | 'processing' | 'succeeded' | 'failed' | 'canceled';
  output?: unknown;
  error?: unknown;
}

export function replicateProvider(config: ReplicateConfig): MediaProvider {
  const base = config.baseUrl.replace(/\/+$/, '');
  const log = (fields: object, message: string) => config.log?.warn(fields, message);
  /** One call; answers the prediction (null on a 404 about one). Every failure is thrown in our words. */
  const call = async (method: 'GET' | 'POST', path: string, what: string, body?: unknown, headers: Record<string, string> = {}): Promise<Prediction | null> => {
    let res: Response;
    let text: string;
    try {
      res = await fetch(`${base}${path}`, {
        method,
        signal: AbortSignal.timeout(config.timeoutMs),
        headers: {
          'content-type': 'application/json',
          ...(config.apiKey ? { authorization: `Bearer ${config.apiKey}` } : {}),
          ...headers,
        },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });
      text = await res.text();
    } catch (err) {
      const name = (err as Error).name;
      if (name === 'TimeoutError' || name === 'AbortError') throw new MediaProviderError('retryable', 'provider_timeout', 'The provider did not answer in time.');
      throw new MediaProviderError('retryable', 'provider_unavailable', 'The provider could not be reached.');
    }
    // A prediction the upstream no longer knows: nothing to poll, nothing left to stop.
    if (res.status === 404 && what !== 'submit') return null;
    if (!res.ok) {
      log({ call: what, status: res.status, upstream_error: forLog(text, config.apiKey) }, 'the upstream refused a call');
      throw refusal(res.status, res.headers);
    }
    try {
      return JSON.parse(text) as Prediction;
    } catch {
      log({ call: what, status: res.status, upstream_error: forLog(text, config.apiKey) }, 'the upstream answered malformed JSON');
      throw new MediaProviderError('retryable', 'provider_bad_response', 'The provider answered something this server could not read.');
    }
  };

  return {
    async submit(spec: MediaJobSpec, inputs: InputReader) {
      const input: Record<string, unknown> = { prompt: spec.prompt, ...spec.settings };
      for (const [key, value] of Object.entries(spec.inputs)) input[key] = Array.isArray(value) ? value.map((v) => inputs.url(v)) : inputs.url(value);
      const prediction = await call('POST', '/predictions', 'submit', { version: spec.model, input }, { 'idempotency-key': spec.jobId });
      if (typeof prediction?.id !== 'string') throw new MediaProviderError('retryable', 'provider_bad_response', 'The provider answered something this server could not read.');
      return prediction.id;
    },
    async poll(id): Promise<MediaPollResult> {
      const p = await call('GET', `/predictions/${encodeURIComponent(id)}`, 'poll');
      if (!p) return { status: 'failed', message: 'The provider no longer knows this job. Nothing was charged.', code: 'provider_failed' };
      if (p.status === 'succeeded') return { status: 'succeeded' };
      if (p.status === 'failed') {
        log({ call: 'poll', prediction: id, upstream_error: forLog(String(p.error ?? 'no reason given'), config.apiKey) }, 'the upstream failed the prediction');
        return { status: 'failed', message: 'The provider failed to make the result. Nothing was charged.', code: 'provider_failed' };
      }
      if (p.status === 'canceled') return { status: 'failed', message: 'The provider canceled the job.', code: 'provider_canceled' };
      return { status: 'running' };
    },
    async fetchResult(id): Promise<MediaResult> {
      const p = await call('GET', `/predictions/${encodeURIComponent(id)}`, 'result');
      const url = Array.isArray(p?.output) ? p.output[0] : p?.output;
      if (typeof url !== 'string') throw new MediaProviderError('refused', 'provider_failed', 'The provider returned no file. Nothing was charged.');
      const bytes = await config.download(url);
      const type = await (await import('file-type')).fileTypeFromBuffer(bytes);
      return { bytes, mimeType: type?.mime ?? 'application/octet-stream', extension: type?.ext ?? 'bin' };
    },
    async cancel(id) {
      await call('POST', `/predictions/${encodeURIComponent(id)}/cancel`, 'cancel');
    },
  };
}

/** A refused call (its body already logged) as our code and words. */
function refusal(status: number, headers: Headers): MediaProviderError {
  if (status === 401 || status === 403) {
    return new MediaProviderError('refused', 'provider_auth_failed', 'The provider refused this server\u2019s credentials; the operator has to fix them. You were not charged.');
  }
  if (status === 402) return new MediaProviderError('refused', 'provider_quota_exceeded', 'The provider account behind this model is out of credits; the operator has to top it up. You were not charged.');
  if (status === 429) return new MediaProviderError('retryable', 'provider_rate_limited', 'The provider is rate limiting this server; tried again later.', retryAfterMs(headers));
  if (status >= 500) return new MediaProviderError('retryable', 'provider_unavailable', 'The provider is unavailable.', retryAfterMs(headers));
  if (status === 400 || status === 404 || status === 422) return new MediaProviderError('refused', 'invalid_input', 'The provider refused the request as invalid.');
  return new MediaProviderError('retryable', 'provider_failed', 'The provider call failed.');
}
