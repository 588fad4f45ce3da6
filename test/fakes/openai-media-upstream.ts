import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { png, seededRandom } from '../../adapters/providers/media/formats.ts';

/**
 * A fake of OpenAI's media APIs, as its API reference describes them: `POST /v1/images/generations`
 * (JSON) and `/v1/images/edits` (multipart, the image as a file) answering `{created, data:[{b64_json}]}`;
 * `POST /v1/audio/speech` answering the audio; `POST /v1/videos` (multipart), `GET /v1/videos/{id}`
 * (queued → in_progress → completed), `GET /v1/videos/{id}/content`, `DELETE /v1/videos/{id}`.
 * Errors are OpenAI's `{error:{message,type,param,code}}`. A marker in the prompt picks a behaviour:
 *   [policy]     400 moderation_blocked             [invalid]    400 invalid_value on `size`
 *   [policy-violation] 400 content_policy_violation
 *   [429]        429 with Retry-After: 7 (always)   [429once]    429 Retry-After: 3, then as usual
 *   [500]        500 server_error                   [malformed]  200 with a cut-off JSON body
 *   [hang]       never answers                      [oversized]  Content-Length of 2 GB
 *   [endless]    a chunked body that goes on        [video-policy] a video that fails on moderation
 *   [video-slow] a video that stays in_progress     [video-fail] a video that fails (internal_error)
 * The key is `Bearer openai-secret`; any other gets 401 invalid_api_key naming the key as OpenAI does.
 */
export interface FakeVideo {
  id: string;
  prompt: string;
  status: 'queued' | 'in_progress' | 'completed' | 'failed';
  polls: number;
  fields: Record<string, string>;
}
export interface SeenRequest {
  method: string;
  path: string;
  at: number;
  headers: http.IncomingHttpHeaders;
  json?: Record<string, unknown>;
  form?: Record<string, string | { name: string; type: string; bytes: number }>;
}
export interface FakeOpenAIMedia {
  url: string;
  requests: SeenRequest[];
  videos: Map<string, FakeVideo>;
  deletes: string[];
  close(): Promise<void>;
}

export const FAKE_MP4 = Buffer.concat([Buffer.from([0, 0, 0, 24]), Buffer.from('ftypmp42'), Buffer.alloc(12), Buffer.from('fake video frames')]);
export const FAKE_MP3 = Buffer.concat([Buffer.from('ID3'), Buffer.from([4, 0, 0, 0, 0, 0, 0]), Buffer.alloc(64, 0xff)]);

export async function startFakeOpenAIMedia(): Promise<FakeOpenAIMedia> {
  const requests: SeenRequest[] = [];
  const videos = new Map<string, FakeVideo>();
  const deletes: string[] = [];
  const onceSeen = new Set<string>();
  const open = new Set<http.ServerResponse>();
  let next = 1;
  const error = (res: http.ServerResponse, status: number, message: string, type: string, code: string | null, param: string | null = null, headers: Record<string, string> = {}) =>
    res.writeHead(status, { 'content-type': 'application/json', ...headers }).end(JSON.stringify({ error: { message, type, param, code } }));
  const json = (res: http.ServerResponse, body: unknown) => res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(body));
  const videoView = (v: FakeVideo) => ({
    id: v.id,
    object: 'video',
    model: v.fields.model ?? 'sora-2',
    status: v.status,
    progress: v.status === 'completed' ? 100 : 0,
    created_at: 1_790_000_000,
    seconds: v.fields.seconds ?? '4',
    size: v.fields.size ?? '720x1280',
    error: v.status === 'failed' ? { code: v.prompt.includes('[video-policy]') ? 'moderation_blocked' : 'internal_error', message: 'upstream-secret-detail: frame 3 rejected' } : null,
  });

  /** The behaviours every POST shares; true when it answered. */
  function misbehave(res: http.ServerResponse, prompt: string): boolean {
    if (prompt.includes('[policy]')) return error(res, 400, 'Your request was rejected as a result of our safety system. upstream-secret-detail', 'image_generation_user_error', 'moderation_blocked'), true;
    if (prompt.includes('[policy-violation]')) return error(res, 400, 'Your prompt may contain content that is not allowed by our safety system.', 'invalid_request_error', 'content_policy_violation'), true;
    if (prompt.includes('[invalid]')) return error(res, 400, "Invalid value: 'huge'. Supported values are: '1024x1024'. upstream-secret-detail", 'invalid_request_error', 'invalid_value', 'size'), true;
    if (prompt.includes('[429]')) return error(res, 429, 'Rate limit reached for requests', 'requests', 'rate_limit_exceeded', null, { 'retry-after': '7' }), true;
    if (prompt.includes('[429once]') && !onceSeen.has(prompt)) {
      onceSeen.add(prompt);
      return error(res, 429, 'Rate limit reached for requests', 'requests', 'rate_limit_exceeded', null, { 'retry-after': '3' }), true;
    }
    if (prompt.includes('[500]')) return error(res, 500, 'The server had an error while processing your request.', 'server_error', null), true;
    if (prompt.includes('[malformed]')) return res.writeHead(200, { 'content-type': 'application/json' }).end('{"created":1,"data":[{"b64_json":"iVBOR'), true;
    if (prompt.includes('[hang]')) return open.add(res), true;
    if (prompt.includes('[oversized]')) {
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': String(2 * 1024 ** 3) });
      res.write('{"data":[');
      open.add(res);
      return true;
    }
    if (prompt.includes('[endless]')) {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.write('{"data":[{"b64_json":"');
      const chunk = 'A'.repeat(64 * 1024);
      const timer = setInterval(() => (res.destroyed ? clearInterval(timer) : res.write(chunk)), 1);
      return true;
    }
    return false;
  }

  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      void (async () => {
        const raw = Buffer.concat(chunks);
        const url = new URL(req.url ?? '/', 'http://fake');
        const seen: SeenRequest = { method: req.method ?? 'GET', path: url.pathname, at: Date.now(), headers: req.headers };
        requests.push(seen);
        if (req.headers.authorization !== 'Bearer openai-secret') {
          const shown = String(req.headers.authorization ?? '').replace(/^Bearer /, '');
          return error(res, 401, `Incorrect API key provided: ${shown}. You can find your API key at https://platform.openai.com/account/api-keys.`, 'invalid_request_error', 'invalid_api_key');
        }
        const type = req.headers['content-type'] ?? '';
        if (req.method === 'POST' && type.startsWith('multipart/form-data')) {
          const form = await new Request('http://fake', { method: 'POST', headers: { 'content-type': type }, body: raw }).formData();
          seen.form = {};
          for (const [k, v] of form.entries()) seen.form[k] = typeof v === 'string' ? v : { name: v.name, type: v.type, bytes: v.size };
        } else if (req.method === 'POST' && raw.length) {
          try {
            seen.json = JSON.parse(raw.toString()) as Record<string, unknown>;
          } catch {
            return error(res, 400, 'We could not parse the JSON body of your request.', 'invalid_request_error', null);
          }
        }
        const fields = (seen.json ?? seen.form ?? {}) as Record<string, unknown>;
        const prompt = String(fields.prompt ?? fields.input ?? '');
        const one = /^\/v1\/videos\/([\w-]+)(\/content)?$/.exec(url.pathname);

        if (req.method === 'POST' && (url.pathname === '/v1/images/generations' || url.pathname === '/v1/images/edits')) {
          if (url.pathname === '/v1/images/edits' && typeof fields.image !== 'object') return error(res, 400, "Missing required parameter: 'image'.", 'invalid_request_error', 'missing_required_parameter', 'image');
          if (misbehave(res, prompt)) return;
          const image = png(8, 8, seededRandom(Buffer.from(prompt)));
          return json(res, { created: 1_790_000_000, data: [{ b64_json: Buffer.from(image).toString('base64') }], output_format: 'png', quality: fields.quality ?? 'auto', size: fields.size ?? '1024x1024' });
        }
        if (req.method === 'POST' && url.pathname === '/v1/audio/speech') {
          if (!fields.voice) return error(res, 400, "Missing required parameter: 'voice'.", 'invalid_request_error', 'missing_required_parameter', 'voice');
          if (misbehave(res, prompt)) return;
          return res.writeHead(200, { 'content-type': 'audio/mpeg' }).end(FAKE_MP3);
        }
        if (req.method === 'POST' && url.pathname === '/v1/videos') {
          if (misbehave(res, prompt)) return;
          const v: FakeVideo = { id: `video_${next++}`, prompt, status: 'queued', polls: 0, fields: Object.fromEntries(Object.entries(fields).map(([k, x]) => [k, String(x)])) };
          videos.set(v.id, v);
          return json(res, videoView(v));
        }
        if (one) {
          const v = videos.get(one[1]!);
          if (!v) return error(res, 404, `Video with id '${one[1]}' not found.`, 'invalid_request_error', null, 'video_id');
          if (req.method === 'DELETE' && !one[2]) {
            deletes.push(v.id);
            videos.delete(v.id);
            return json(res, { id: v.id, object: 'video.deleted', deleted: true });
          }
          if (req.method === 'GET' && one[2]) {
            if (v.status !== 'completed') return error(res, 400, 'Video is not ready yet.', 'invalid_request_error', null);
            if (v.prompt.includes('[video-oversized]')) {
              res.writeHead(200, { 'content-type': 'video/mp4' });
              const chunk = Buffer.alloc(256 * 1024);
              const timer = setInterval(() => (res.destroyed ? clearInterval(timer) : res.write(chunk)), 1);
              return;
            }
            return res.writeHead(200, { 'content-type': 'video/mp4', 'content-length': String(FAKE_MP4.length) }).end(FAKE_MP4);
          }
          if (req.method === 'GET') {
            v.polls++;
            if (v.status === 'queued') v.status = 'in_progress';
            else if (v.status === 'in_progress' && !v.prompt.includes('[video-slow]') && v.polls >= 3) {
              v.status = v.prompt.includes('[video-policy]') || v.prompt.includes('[video-fail]') ? 'failed' : 'completed';
            }
            return json(res, videoView(v));
          }
        }
        error(res, 404, `Invalid URL (${req.method} ${url.pathname})`, 'invalid_request_error', null);
      })();
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    url: `${base}/v1`,
    requests,
    videos,
    deletes,
    close: () =>
      new Promise((r) => {
        for (const res of open) res.destroy();
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}
