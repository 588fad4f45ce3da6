import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { FAKE_MP3 } from './openai-media-upstream.ts';

/**
 * A fake of ElevenLabs' text-to-speech: `POST /v1/text-to-speech/{voice_id}?output_format=…`
 * with `{text, model_id, voice_settings}` and the key in `xi-api-key`, answering the audio.
 * Errors are its `{detail:{status,message}}` (a validation error: `{detail:[{loc,msg,type}]}`).
 * Voices: `rachel` exists; any other is 400 voice_not_found. A marker in the text picks a behaviour:
 *   [quota] 401 quota_exceeded   [429] 429 too_many_concurrent_requests, Retry-After: 3
 *   [500]   500                  [hang] never answers   [oversized] a body that goes on
 *   [422]   a validation list    [too-long] 400 max_character_limit_exceeded   [busy] 429 system_busy, no Retry-After
 * Any key other than `eleven-secret` gets 401 invalid_api_key.
 */
export interface FakeElevenLabs {
  url: string;
  requests: { path: string; query: Record<string, string>; headers: http.IncomingHttpHeaders; body: Record<string, unknown> }[];
  close(): Promise<void>;
}

export async function startFakeElevenLabs(): Promise<FakeElevenLabs> {
  const requests: FakeElevenLabs['requests'] = [];
  const open = new Set<http.ServerResponse>();
  const detail = (res: http.ServerResponse, status: number, code: string, message: string, headers: Record<string, string> = {}) =>
    res.writeHead(status, { 'content-type': 'application/json', ...headers }).end(JSON.stringify({ detail: { status: code, message } }));
  const server = http.createServer((req, res) => {
    let raw = '';
    req.on('data', (c: Buffer) => (raw += c.toString()));
    req.on('end', () => {
      const url = new URL(req.url ?? '/', 'http://fake');
      const tts = /^\/v1\/text-to-speech\/([^/]+)$/.exec(url.pathname);
      if (req.method !== 'POST' || !tts) return res.writeHead(404, { 'content-type': 'application/json' }).end(JSON.stringify({ detail: 'Not Found' }));
      let body: Record<string, unknown> = {};
      try {
        body = JSON.parse(raw) as Record<string, unknown>;
      } catch {
        body = {};
      }
      requests.push({ path: url.pathname, query: Object.fromEntries(url.searchParams), headers: req.headers, body });
      if (req.headers['xi-api-key'] !== 'eleven-secret') return detail(res, 401, 'invalid_api_key', `Invalid API key: ${String(req.headers['xi-api-key'])}`);
      if (typeof body.text !== 'string') {
        return res.writeHead(422, { 'content-type': 'application/json' }).end(JSON.stringify({ detail: [{ loc: ['body', 'text'], msg: 'field required', type: 'value_error.missing' }] }));
      }
      const text = body.text;
      if (decodeURIComponent(tts[1]!) !== 'rachel') return detail(res, 400, 'voice_not_found', `A voice with the voice_id ${tts[1]} was not found.`);
      if (text.includes('[422]')) {
        return res.writeHead(422, { 'content-type': 'application/json' }).end(JSON.stringify({ detail: [{ loc: ['body', 'voice_settings', 'stability'], msg: 'ensure this value is less than or equal to 1.0', type: 'value_error' }] }));
      }
      if (text.includes('[too-long]')) return detail(res, 400, 'max_character_limit_exceeded', 'Text is too long: 12000 characters, the limit is 10000. upstream-secret-detail');
      if (text.includes('[busy]')) return detail(res, 429, 'system_busy', 'Our services are experiencing high traffic.');
      if (text.includes('[quota]')) return detail(res, 401, 'quota_exceeded', 'This request exceeds your quota of 10000. You have 12 credits remaining.');
      if (text.includes('[429]')) return detail(res, 429, 'too_many_concurrent_requests', 'Too many concurrent requests.', { 'retry-after': '3' });
      if (text.includes('[500]')) return detail(res, 500, 'internal_error', 'upstream-secret-detail');
      if (text.includes('[hang]')) return void open.add(res);
      if (text.includes('[oversized]')) {
        res.writeHead(200, { 'content-type': 'audio/mpeg' });
        const chunk = Buffer.alloc(256 * 1024);
        const timer = setInterval(() => (res.destroyed ? clearInterval(timer) : res.write(chunk)), 1);
        return;
      }
      res.writeHead(200, { 'content-type': 'audio/mpeg', 'content-length': String(FAKE_MP3.length) }).end(FAKE_MP3);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    requests,
    close: () =>
      new Promise((r) => {
        for (const res of open) res.destroy();
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}
