import { MediaJobRefused, MediaUpstreamBusy, type InputReader, type MediaJobSpec, type MediaPollResult, type MediaProvider, type MediaResult } from '../../../core/ports.ts';
import { falInputProblem, falResultFile, falAppId } from './fal-shapes.ts';

/**
 * fal.ai's queue API: `POST {base}/{model_id}` with the input as the JSON body, then
 * `GET …/requests/{id}/status` until COMPLETED, the result at `GET …/requests/{id}`, and
 * `PUT …/requests/{id}/cancel`. The key goes in `Authorization: Key <key>`, and only ever to
 * the configured base's origin: the URLs fal answers with are used only when they are on it.
 * fal's queue has no idempotency key, so a submit retried after a worker died may start a
 * second upstream request (docs/providers.md#fal). `@fal-ai/client` is not used: by its
 * documentation its queue calls go to fal's own hosts (a proxy URL, not a base URL, is what it lets one set).
 */
export interface FalConfig {
  baseUrl: string;
  apiKey?: string | undefined;
  timeoutMs: number;
  /** Downloads the output through the URL guard (no private addresses, the size limit). */
  download: (url: string) => Promise<Uint8Array>;
  /** Where the upstream's own words go: for the operator, never to the customer. */
  log?: ((fields: Record<string, unknown>, message: string) => void) | undefined;
}

/** What poll, fetchResult and cancel need, stored as the job's handle (JSON). */
interface FalHandle {
  request_id: string;
  status_url: string;
  response_url: string;
  cancel_url: string;
}

const KEY_REFUSED = "The provider refused this service's credentials: an operator problem, not your request's. Nothing was charged.";

export function falProvider(config: FalConfig): MediaProvider {
  const base = new URL(config.baseUrl.replace(/\/+$/, ''));
  const basePath = base.pathname.replace(/\/+$/, '');
  // What fal says is logged for the operator; an answer that echoes the key (a 403 naming it) must not put it in the log.
  const log = (fields: Record<string, unknown>, message: string) => {
    if (!config.log) return;
    const text = JSON.stringify(fields);
    config.log(config.apiKey ? (JSON.parse(text.replaceAll(config.apiKey, '[the key]')) as Record<string, unknown>) : fields, message);
  };
  const onBase = (raw: string): boolean => {
    try {
      const u = new URL(raw);
      return u.origin === base.origin && (basePath === '' || u.pathname === basePath || u.pathname.startsWith(`${basePath}/`));
    } catch {
      return false;
    }
  };

  /** One call to fal with the key; answers the status and the parsed JSON. Throws on transport faults and on 429 and 5xx. */
  const call = async (method: 'GET' | 'POST' | 'PUT', url: string, body?: unknown): Promise<{ status: number; json: unknown }> => {
    // Never send the key off the configured origin, whatever a stored handle says.
    if (!onBase(url)) throw new MediaJobRefused('provider_failed', 'The provider pointed the job at an address outside its own; it was stopped and refunded.');
    let res: Response;
    try {
      res = await fetch(url, {
        method,
        redirect: 'manual',
        signal: AbortSignal.timeout(config.timeoutMs),
        headers: {
          accept: 'application/json',
          ...(body === undefined ? {} : { 'content-type': 'application/json' }),
          ...(config.apiKey ? { authorization: `Key ${config.apiKey}` } : {}),
        },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });
    } catch (err) {
      const name = (err as Error).name;
      if (name === 'TimeoutError' || name === 'AbortError') throw new Error(`the provider did not answer within ${config.timeoutMs / 1000} s`);
      throw new Error('the provider could not be reached');
    }
    let text: string;
    try {
      text = await res.text();
    } catch {
      throw new Error(`the provider's answer broke off or took longer than ${config.timeoutMs / 1000} s`);
    }
    if (res.status === 429) {
      const retryAfterMs = retryAfter(res.headers.get('retry-after'));
      log({ status: 429, retryAfterMs }, 'fal: rate limited');
      throw new MediaUpstreamBusy(`the provider is rate limiting this service; retrying after ${Math.ceil(retryAfterMs / 1000)} s`, retryAfterMs);
    }
    if (res.status >= 500 || (res.status >= 300 && res.status < 400)) {
      log({ status: res.status, upstreamBody: text.slice(0, 2000) }, 'fal: upstream error');
      throw new Error(`the provider answered HTTP ${res.status}`);
    }
    if (res.status === 401 || res.status === 403) {
      log({ status: res.status, upstreamBody: text.slice(0, 2000) }, "fal: the operator's key was refused");
      throw new MediaJobRefused('provider_unauthorized', KEY_REFUSED);
    }
    let json: unknown;
    try {
      json = text === '' ? null : JSON.parse(text);
    } catch {
      log({ status: res.status, upstreamBody: text.slice(0, 2000) }, 'fal: malformed JSON');
      // A refusal is still a refusal without a readable reason; a success must be readable.
      if (res.status >= 400) return { status: res.status, json: null };
      throw new Error(`the provider answered HTTP ${res.status} with malformed JSON`);
    }
    return { status: res.status, json };
  };

  const handleOf = (raw: string): FalHandle => {
    const h = JSON.parse(raw) as FalHandle;
    if (typeof h.request_id !== 'string' || typeof h.status_url !== 'string') throw new Error('not a fal job handle');
    return h;
  };

  return {
    async submit(spec: MediaJobSpec, inputs: InputReader) {
      const input: Record<string, unknown> = { prompt: spec.prompt, ...spec.settings };
      for (const [key, value] of Object.entries(spec.inputs)) input[key] = Array.isArray(value) ? value.map((v) => inputs.url(v)) : inputs.url(value);
      const { status, json } = await call('POST', `${base.href.replace(/\/+$/, '')}/${spec.model}`, input);
      if (status === 400 || status === 404 || status === 422) {
        log({ status, model: spec.model, job: spec.jobId, upstreamBody: JSON.stringify(json).slice(0, 2000) }, 'fal: submit refused');
        if (status === 404) throw new MediaJobRefused('provider_failed', "The provider does not know this model (a catalog problem on this service's side). Nothing was charged.");
        const problem = falInputProblem(json, spec);
        throw new MediaJobRefused(problem.code, problem.message);
      }
      if (status >= 400) {
        log({ status, upstreamBody: JSON.stringify(json).slice(0, 2000) }, 'fal: submit refused');
        throw new MediaJobRefused('provider_failed', `The provider refused the job (HTTP ${status}). Nothing was charged.`);
      }
      const answer = (json ?? {}) as Partial<Record<keyof FalHandle, unknown>>;
      if (typeof answer.request_id !== 'string' || !/^[A-Za-z0-9_-]{1,200}$/.test(answer.request_id)) throw new Error('the provider answered without a request id');
      const id = answer.request_id;
      const app = `${base.href.replace(/\/+$/, '')}/${falAppId(spec.model)}/requests/${id}`;
      const pick = (field: 'status_url' | 'response_url' | 'cancel_url', fallback: string): string => {
        const given = answer[field];
        if (given === undefined || given === null) return fallback;
        if (typeof given !== 'string' || !onBase(given)) {
          log({ field, given: String(given).slice(0, 300) }, 'fal: answered a URL outside the configured base');
          throw new MediaJobRefused('provider_failed', 'The provider pointed the job at an address outside its own; it was stopped and refunded.');
        }
        return given;
      };
      const handle: FalHandle = {
        request_id: id,
        status_url: pick('status_url', `${app}/status`),
        response_url: pick('response_url', app),
        cancel_url: pick('cancel_url', `${app}/cancel`),
      };
      return JSON.stringify(handle);
    },

    async poll(raw): Promise<MediaPollResult> {
      const h = handleOf(raw);
      const { status, json } = await call('GET', h.status_url);
      if (status === 404) return { status: 'failed', message: 'The provider no longer knows this job.', code: 'provider_failed' };
      if (status >= 400) {
        log({ status, upstreamBody: JSON.stringify(json).slice(0, 2000) }, 'fal: status refused');
        throw new Error(`the provider answered HTTP ${status} to a status request`);
      }
      const s = (json ?? {}) as { status?: unknown; error?: unknown; error_type?: unknown };
      if (s.status === 'IN_QUEUE' || s.status === 'IN_PROGRESS') return { status: 'running' };
      if (s.status === 'COMPLETED') {
        if (s.error === undefined || s.error === null) return { status: 'succeeded' };
        log({ request: h.request_id, error: String(s.error).slice(0, 2000), errorType: s.error_type }, 'fal: the request failed');
        return { status: 'failed', message: 'The provider failed to make the result. Nothing was charged.', code: 'provider_failed' };
      }
      if (s.status === 'CANCELED' || s.status === 'CANCELLED') return { status: 'failed', message: 'The provider canceled the job.', code: 'provider_canceled' };
      if (s.status === 'FAILED') return { status: 'failed', message: 'The provider failed to make the result. Nothing was charged.', code: 'provider_failed' };
      throw new Error('the provider answered a status this service does not know');
    },

    async fetchResult(raw): Promise<MediaResult> {
      const h = handleOf(raw);
      const { status, json } = await call('GET', h.response_url);
      if (status === 400 || status === 422) {
        log({ status, request: h.request_id, upstreamBody: JSON.stringify(json).slice(0, 2000) }, 'fal: the request failed');
        const problem = falInputProblem(json, undefined);
        throw new MediaJobRefused(problem.code, problem.message);
      }
      if (status >= 400) {
        log({ status, request: h.request_id, upstreamBody: JSON.stringify(json).slice(0, 2000) }, 'fal: result refused');
        throw new Error(`the provider answered HTTP ${status} to a result request`);
      }
      const file = falResultFile(json);
      if (!file) {
        log({ request: h.request_id, keys: Object.keys((json ?? {}) as object) }, 'fal: no file in the result');
        throw new MediaJobRefused('provider_failed', 'The provider returned no file. Nothing was charged.');
      }
      let bytes: Uint8Array;
      try {
        bytes = await config.download(file.url);
      } catch (err) {
        if ((err as { code?: unknown }).code === 'ETOOLARGE') throw new MediaJobRefused('result_too_large', 'The result is larger than this service accepts. Nothing was charged.');
        throw err;
      }
      return { bytes, ...(await mediaTypeOf(bytes, file.contentType, file.url)) };
    },

    async cancel(raw) {
      const h = handleOf(raw);
      // 400 ALREADY_COMPLETED and 404 NOT_FOUND: nothing left to stop.
      const { status } = await call('PUT', h.cancel_url);
      if (status >= 400 && status !== 400 && status !== 404) throw new Error(`the provider answered HTTP ${status} to a cancel`);
    },
  };
}

/** `Retry-After` as seconds or an HTTP date, bounded to 1 s … 5 min (5 s when absent or unreadable). */
function retryAfter(header: string | null): number {
  if (!header) return 5_000;
  const seconds = Number(header);
  const ms = Number.isFinite(seconds) ? seconds * 1000 : Date.parse(header) - Date.now();
  if (!Number.isFinite(ms)) return 5_000;
  return Math.min(300_000, Math.max(1_000, Math.round(ms)));
}

const EXTENSIONS: Record<string, string> = {
  'image/png': 'png',
  'image/jpeg': 'jpg',
  'image/webp': 'webp',
  'video/mp4': 'mp4',
  'video/webm': 'webm',
  'audio/mpeg': 'mp3',
  'audio/wav': 'wav',
  'audio/x-wav': 'wav',
  'audio/ogg': 'ogg',
  'model/gltf-binary': 'glb',
  'model/gltf+json': 'gltf',
  'model/obj': 'obj',
};

/**
 * The bytes decide where they can be read (file-type); fal's content_type is trusted only for
 * formats without a signature (glTF JSON, OBJ), and only from a short list.
 */
async function mediaTypeOf(bytes: Uint8Array, contentType: string | undefined, url: string): Promise<{ mimeType: string; extension: string }> {
  const sniffed = await (await import('file-type')).fileTypeFromBuffer(bytes);
  if (sniffed) return { mimeType: sniffed.mime, extension: sniffed.ext };
  const declared = contentType?.split(';')[0]?.trim().toLowerCase();
  if (declared && EXTENSIONS[declared] && !/^(image|video|audio)\//.test(declared)) return { mimeType: declared, extension: EXTENSIONS[declared] };
  const ext = /\.(gltf|obj)$/i.exec(new URL(url).pathname)?.[1]?.toLowerCase();
  if (ext === 'gltf') return { mimeType: 'model/gltf+json', extension: 'gltf' };
  if (ext === 'obj') return { mimeType: 'model/obj', extension: 'obj' };
  return { mimeType: 'application/octet-stream', extension: 'bin' };
}
