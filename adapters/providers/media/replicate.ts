import { fileTypeFromBuffer } from 'file-type';
import type { InputReader, MediaJobSpec, MediaPollResult, MediaProvider, MediaResult } from '../../../core/ports.ts';

/**
 * A Replicate-style predictions upstream: `POST /predictions` with `{version, input}`,
 * `GET /predictions/{id}` until `status` is `succeeded`, `failed` or `canceled`, the result
 * at the URL in `output`, and `POST /predictions/{id}/cancel`. Settings and inputs go into
 * `input` by name; uploaded files become signed links the upstream can fetch. The job id is
 * sent as an `Idempotency-Key` header, so a submit retried after a worker died does not start
 * a second run on upstreams that honour it.
 */
export interface ReplicateConfig {
  baseUrl: string;
  apiKey?: string | undefined;
  timeoutMs: number;
  /** Downloads the output through the URL guard (no private addresses). */
  download: (url: string) => Promise<Uint8Array>;
}

interface Prediction {
  id: string;
  status: 'starting' | 'processing' | 'succeeded' | 'failed' | 'canceled';
  output?: unknown;
  error?: unknown;
}

export function replicateProvider(config: ReplicateConfig): MediaProvider {
  const base = config.baseUrl.replace(/\/+$/, '');
  const call = async (method: 'GET' | 'POST', path: string, body?: unknown, headers: Record<string, string> = {}): Promise<Prediction> => {
    const res = await fetch(`${base}${path}`, {
      method,
      signal: AbortSignal.timeout(config.timeoutMs),
      headers: {
        'content-type': 'application/json',
        ...(config.apiKey ? { authorization: `Bearer ${config.apiKey}` } : {}),
        ...headers,
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    const text = await res.text();
    if (!res.ok) throw new Error(`upstream answered ${res.status}: ${text.slice(0, 300)}`);
    return JSON.parse(text) as Prediction;
  };

  return {
    async submit(spec: MediaJobSpec, inputs: InputReader) {
      const input: Record<string, unknown> = { prompt: spec.prompt, ...spec.settings };
      for (const [key, value] of Object.entries(spec.inputs)) input[key] = Array.isArray(value) ? value.map((v) => inputs.url(v)) : inputs.url(value);
      const prediction = await call('POST', '/predictions', { version: spec.model, input }, { 'idempotency-key': spec.jobId });
      return prediction.id;
    },
    async poll(id): Promise<MediaPollResult> {
      const p = await call('GET', `/predictions/${encodeURIComponent(id)}`);
      if (p.status === 'succeeded') return { status: 'succeeded' };
      if (p.status === 'failed') return { status: 'failed', message: `The provider failed: ${String(p.error ?? 'no reason given').slice(0, 300)}`, code: 'provider_failed' };
      if (p.status === 'canceled') return { status: 'failed', message: 'The provider canceled the job.', code: 'provider_canceled' };
      return { status: 'running' };
    },
    async fetchResult(id): Promise<MediaResult> {
      const p = await call('GET', `/predictions/${encodeURIComponent(id)}`);
      const url = Array.isArray(p.output) ? p.output[0] : p.output;
      if (typeof url !== 'string') throw new Error('the provider returned no output URL');
      const bytes = await config.download(url);
      const type = await fileTypeFromBuffer(bytes);
      return { bytes, mimeType: type?.mime ?? 'application/octet-stream', extension: type?.ext ?? 'bin' };
    },
    async cancel(id) {
      await call('POST', `/predictions/${encodeURIComponent(id)}/cancel`);
    },
  };
}
