import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { png, seededRandom, wav } from '../../adapters/providers/media/formats.ts';

/**
 * A fake fal.ai queue (https://queue.fal.run), speaking the protocol of fal's public reference
 * (docs.fal.ai, "Queue"):
 *
 *   POST /{model_id}                               the input as the JSON body; 200
 *        {request_id, status_url, response_url, cancel_url, queue_position}
 *   GET  /{app_id}/requests/{id}/status            202 {status: IN_QUEUE, queue_position} → 202 {status: IN_PROGRESS}
 *                                                  → 200 {status: COMPLETED} (with `error`, `error_type` when the runner failed)
 *   GET  /{app_id}/requests/{id}                   200 the model's output, e.g. {images: [{url, content_type, width, height}]}
 *   PUT  /{app_id}/requests/{id}/cancel            202 {status: CANCELLATION_REQUESTED}; 400 {status: ALREADY_COMPLETED}; 404 {status: NOT_FOUND}
 *
 * `app_id` is the model id without its subpath (`fal-ai/flux/dev` → `fal-ai/flux`): requests
 * under the full model id answer 404 here, as a wrong path does at fal. Every call needs
 * `Authorization: Key fal-secret` (else 401 {detail}). Errors are `{detail: …}`: a string, or
 * FastAPI's list of {loc, msg, type}. The model id's last part, less a `fake-` prefix, picks the behaviour:
 *
 *   image, video, audio, audio-file, mesh     queue, progress, complete with that output shape
 *   nourls        as image, but the submit answer carries no URLs (the adapter builds them)
 *   fail          completes with `error` (the runner failed)
 *   slow          in progress until canceled
 *   invalid       422 with a validation error on `num_images`
 *   policy        422 content_policy_violation
 *   bad-request   400 {detail: "…"}
 *   forbidden     403
 *   busy          429 with Retry-After: 7
 *   busy-once     the first submit answers 429 with Retry-After: 3, later ones as image
 *   broken        500
 *   malformed     200 with a body that is not JSON
 *   hang          never answers the submit
 *   elsewhere     answers a status_url on another host (`localhost` instead of 127.0.0.1)
 *   huge          its file declares a 2 GB Content-Length
 *   endless       its file streams past the 50 MB limit without a length
 */
export interface FalRequest {
  id: string;
  model: string;
  app: string;
  input: Record<string, unknown>;
  state: 'IN_QUEUE' | 'IN_PROGRESS' | 'COMPLETED' | 'CANCELED';
  polls: number;
}

export interface FakeFal {
  /** The base URL to configure (`base_url`). */
  url: string;
  requests: Map<string, FalRequest>;
  /** Request ids whose cancel endpoint was called, in order (once per call). */
  cancels: string[];
  /** Megabytes written of each oversized file before the client went away. */
  oversizedSent: Map<string, number>;
  /** Every call: method, Host header, path and whether it carried the right key. */
  calls: { method: string; host: string; path: string; authorized: boolean; at: number }[];
  close(): Promise<void>;
}

export const FAL_KEY = 'fal-secret';

/** The first bytes of an MP4 (an `ftyp` box): what file-type reads as video/mp4. */
const MP4 = Buffer.concat([Buffer.from([0, 0, 0, 0x18]), Buffer.from('ftypmp42'), Buffer.from([0, 0, 0, 0]), Buffer.from('mp42isom'), Buffer.alloc(64)]);
/** A binary glTF header (magic, version 2, length). */
const GLB = (() => {
  const b = Buffer.alloc(12);
  b.write('glTF', 0, 'ascii');
  b.writeUInt32LE(2, 4);
  b.writeUInt32LE(12, 8);
  return b;
})();

export async function startFakeFal(): Promise<FakeFal> {
  const requests = new Map<string, FalRequest>();
  const cancels: string[] = [];
  const calls: FakeFal['calls'] = [];
  const oversizedSent = new Map<string, number>();
  let busyOnce = true;
  let next = 1;
  let base = '';
  const json = (res: http.ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}) =>
    res.writeHead(status, { 'content-type': 'application/json', ...headers }).end(JSON.stringify(body));
  const behaviour = (model: string) => model.split('/').at(-1)!.replace(/^fake-/, '');
  const appOf = (model: string) => model.split('/').slice(0, 2).join('/');
  const urls = (r: FalRequest) => {
    const at = `${base}/${r.app}/requests/${r.id}`;
    return { status_url: `${at}/status`, response_url: at, cancel_url: `${at}/cancel` };
  };

  const output = (r: FalRequest): unknown => {
    const file = (ext: string) => `${base}/files/${r.id}.${ext}`;
    switch (behaviour(r.model)) {
      case 'video':
        return { video: { url: file('mp4'), content_type: 'video/mp4', file_name: 'out.mp4', file_size: MP4.length } };
      case 'audio':
        return { audio: { url: file('wav'), content_type: 'audio/wav' } };
      case 'audio-file':
        return { audio_file: { url: file('wav'), content_type: 'audio/wav' } };
      case 'mesh':
        return { model_mesh: { url: file('glb'), content_type: 'model/gltf-binary', file_name: 'model.glb' }, timings: { inference: 1.2 } };
      case 'huge':
        return { images: [{ url: file('huge'), content_type: 'image/png' }] };
      case 'endless':
        return { images: [{ url: file('endless'), content_type: 'image/png' }] };
      default:
        return { images: [{ url: file('png'), content_type: 'image/png', width: 16, height: 16 }], seed: 42, has_nsfw_concepts: [false], prompt: r.input.prompt };
    }
  };

  const serveFile = (res: http.ServerResponse, id: string, ext: string) => {
    if (ext === 'png') return res.writeHead(200, { 'content-type': 'image/png' }).end(png(16, 16, seededRandom(Buffer.from(id))));
    if (ext === 'mp4') return res.writeHead(200, { 'content-type': 'video/mp4' }).end(MP4);
    if (ext === 'wav') return res.writeHead(200, { 'content-type': 'audio/wav' }).end(wav(0.1, seededRandom(Buffer.from(id))));
    if (ext === 'glb') return res.writeHead(200, { 'content-type': 'model/gltf-binary' }).end(GLB);
    const chunk = Buffer.alloc(1024 * 1024);
    const endless = ext === 'endless';
    res.writeHead(200, endless ? { 'content-type': 'image/png' } : { 'content-type': 'image/png', 'content-length': String(2 * 1024 ** 3) });
    // Writes until the client goes away (the guard's limit), at most a little over 60 MB.
    let sent = 0;
    const pump = () => {
      while (sent < 61 && !res.destroyed) {
        sent++;
        oversizedSent.set(id, sent);
        if (!res.write(chunk)) return void res.once('drain', pump);
      }
      res.end();
    };
    pump();
  };

  const server = http.createServer((req, res) => {
    let raw = '';
    req.on('data', (c: Buffer) => (raw += c.toString()));
    req.on('end', () => {
      const url = new URL(req.url ?? '/', 'http://fake');
      const path = url.pathname;
      const authorized = req.headers.authorization === `Key ${FAL_KEY}`;
      calls.push({ method: req.method ?? '', host: req.headers.host ?? '', path, authorized, at: Date.now() });
      const file = /^\/files\/(\w+)\.(\w+)$/.exec(path);
      if (file && req.method === 'GET') return serveFile(res, file[1]!, file[2]!);
      if (!authorized) return json(res, 401, { detail: 'No user found for Key ID and Secret' });

      const request = /^\/([\w.-]+\/[\w.-]+)\/requests\/(\w+)(\/status|\/cancel)?$/.exec(path);
      if (request) {
        const r = requests.get(request[2]!);
        // Under the full model id (with its subpath) or another app: not found, as at fal.
        if (!r || r.app !== request[1]) return json(res, 404, { detail: 'Request not found' });
        if (request[3] === '/status' && req.method === 'GET') {
          r.polls++;
          if (r.state === 'IN_QUEUE' && r.polls >= 2) r.state = 'IN_PROGRESS';
          else if (r.state === 'IN_PROGRESS' && r.polls >= 3 && behaviour(r.model) !== 'slow') r.state = 'COMPLETED';
          if (r.state === 'IN_QUEUE') return json(res, 202, { status: 'IN_QUEUE', queue_position: 1, ...urls(r) });
          if (r.state === 'IN_PROGRESS') return json(res, 202, { status: 'IN_PROGRESS', logs: null, ...urls(r) });
          if (r.state === 'CANCELED') return json(res, 200, { status: 'CANCELED', ...urls(r) });
          if (behaviour(r.model) === 'fail') {
            return json(res, 200, { status: 'COMPLETED', logs: null, metrics: {}, error: 'Runner crashed: CUDA out of memory (secret-internal-detail)', error_type: 'runner_server_error', ...urls(r) });
          }
          return json(res, 200, { status: 'COMPLETED', logs: null, metrics: { inference_time: 0.5 }, ...urls(r) });
        }
        if (request[3] === '/cancel' && req.method === 'PUT') {
          cancels.push(r.id);
          if (r.state === 'COMPLETED') return json(res, 400, { status: 'ALREADY_COMPLETED' });
          r.state = 'CANCELED';
          return json(res, 202, { status: 'CANCELLATION_REQUESTED' });
        }
        if (request[3] === undefined && req.method === 'GET') {
          if (r.state !== 'COMPLETED') return json(res, 400, { detail: 'Request is still in progress' });
          if (behaviour(r.model) === 'fail') return json(res, 500, { detail: 'Runner crashed (secret-internal-detail)' });
          return json(res, 200, output(r));
        }
        return json(res, 405, { detail: 'Method Not Allowed' });
      }

      if (req.method === 'POST' && /^\/[\w.-]+\/[\w.-]+(\/[\w.-]+)*$/.test(path)) {
        const model = path.slice(1);
        switch (behaviour(model)) {
          case 'invalid':
            return json(res, 422, { detail: [{ loc: ['body', 'num_images'], msg: 'Input should be less than or equal to 4 (secret-internal-detail)', type: 'less_than_equal', ctx: { le: 4 } }] });
          case 'policy':
            return json(res, 422, { detail: [{ loc: ['body', 'prompt'], msg: 'The content could not be processed because it contained material flagged by a content checker (secret-internal-detail).', type: 'content_policy_violation' }] });
          case 'bad-request':
            return json(res, 400, { detail: 'Invalid request body (secret-internal-detail)' });
          case 'forbidden':
            return json(res, 403, { detail: `Key ${FAL_KEY} is not allowed to use this app` });
          case 'busy-once':
            if (busyOnce) {
              busyOnce = false;
              return json(res, 429, { detail: 'Rate limit exceeded' }, { 'retry-after': '3' });
            }
            break;
          case 'busy':
            return json(res, 429, { detail: 'Rate limit exceeded' }, { 'retry-after': '7' });
          case 'broken':
            return json(res, 500, { detail: 'Internal Server Error (secret-internal-detail)' });
          case 'malformed':
            return res.writeHead(200, { 'content-type': 'application/json' }).end('{"request_id": "r1", "status_url": ');
          case 'hang':
            return; // never answers
        }
        let input: Record<string, unknown>;
        try {
          input = JSON.parse(raw) as Record<string, unknown>;
        } catch {
          return json(res, 422, { detail: [{ loc: ['body'], msg: 'JSON decode error', type: 'json_invalid' }] });
        }
        const r: FalRequest = { id: `r${next++}x${Date.now().toString(36)}`, model, app: appOf(model), input, state: 'IN_QUEUE', polls: 0 };
        requests.set(r.id, r);
        const answer: Record<string, unknown> = { request_id: r.id, ...urls(r), queue_position: 0 };
        if (behaviour(model) === 'nourls') {
          delete answer.status_url;
          delete answer.response_url;
          delete answer.cancel_url;
        }
        if (behaviour(model) === 'elsewhere') answer.status_url = String(answer.status_url).replace('127.0.0.1', 'localhost');
        return json(res, 200, answer);
      }
      json(res, 404, { detail: 'Not Found' });
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    url: base,
    requests,
    cancels,
    oversizedSent,
    calls,
    close: () =>
      new Promise((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}
