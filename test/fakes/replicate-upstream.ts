import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { png, seededRandom } from '../../adapters/providers/media/formats.ts';

/**
 * A fake provider speaking Replicate's predictions protocol. The `version` picks the behaviour:
 *   ok     starting, processing, then succeeded with an output URL (a PNG this server serves)
 *   fail   failed with an error
 *   slow   processing until canceled
 *   broken   the create answers 500 {detail}
 *   busy     the create answers 429 with Retry-After: 400
 *   invalid  the create answers 422 {detail}
 *   held     the create is answered (as slow) only once `releaseCreates()` is called
 * Error details carry `secret-internal-detail`, which must reach no customer. It honours an
 * Idempotency-Key header, as the adapter sends one.
 */
interface Prediction {
  id: string;
  version: string;
  input: Record<string, unknown>;
  status: string;
  polls: number;
  output?: string[];
  error?: string;
}

export interface FakeReplicate {
  url: string;
  predictions: Map<string, Prediction>;
  cancels: string[];
  /** Every create request received (its version), answered or not. */
  creates: string[];
  /** Answers the creates of `held` versions waiting so far, and those to come. */
  releaseCreates(): void;
  close(): Promise<void>;
}

export async function startFakeReplicate(): Promise<FakeReplicate> {
  const predictions = new Map<string, Prediction>();
  const byKey = new Map<string, string>();
  const cancels: string[] = [];
  const creates: string[] = [];
  let held: (() => void)[] | undefined = [];
  let next = 1;
  let base = '';
  const json = (res: http.ServerResponse, status: number, body: unknown) => res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
  const view = (p: Prediction) => ({ id: p.id, version: p.version, input: p.input, status: p.status, output: p.output ?? null, error: p.error ?? null });

  const server = http.createServer((req, res) => {
    let raw = '';
    req.on('data', (c: Buffer) => (raw += c.toString()));
    req.on('end', () => {
      const url = new URL(req.url ?? '/', 'http://fake');
      const out = /^\/outputs\/(\w+)\.png$/.exec(url.pathname);
      if (out) {
        res.writeHead(200, { 'content-type': 'image/png' }).end(png(16, 16, seededRandom(Buffer.from(out[1]!))));
        return;
      }
      if (req.headers.authorization !== 'Bearer replicate-secret') return json(res, 401, { detail: 'Unauthenticated' });
      const cancel = /^\/v1\/predictions\/(\w+)\/cancel$/.exec(url.pathname);
      const one = /^\/v1\/predictions\/(\w+)$/.exec(url.pathname);
      if (req.method === 'POST' && url.pathname === '/v1/predictions') {
        const key = req.headers['idempotency-key'];
        const known = typeof key === 'string' ? byKey.get(key) : undefined;
        if (known) return json(res, 201, view(predictions.get(known)!));
        const body = JSON.parse(raw) as { version: string; input: Record<string, unknown> };
        creates.push(body.version);
        if (body.version === 'broken') return json(res, 500, { detail: 'Internal error in worker pool (secret-internal-detail)' });
        if (body.version === 'busy') return res.writeHead(429, { 'content-type': 'application/json', 'retry-after': '400' }).end(JSON.stringify({ detail: 'Request was throttled (secret-internal-detail)' }));
        if (body.version === 'invalid') return json(res, 422, { detail: '- input.steps: must be less than or equal to 50 (secret-internal-detail)' });
        const create = () => {
          const p: Prediction = { id: `p${next++}`, version: body.version, input: body.input, status: 'starting', polls: 0 };
          predictions.set(p.id, p);
          if (typeof key === 'string') byKey.set(key, p.id);
          json(res, 201, view(p));
        };
        if (body.version === 'held' && held) return void held.push(create);
        return create();
      }
      if (req.method === 'POST' && cancel) {
        const p = predictions.get(cancel[1]!);
        if (!p) return json(res, 404, { detail: 'Not found' });
        cancels.push(p.id);
        if (p.status === 'starting' || p.status === 'processing') p.status = 'canceled';
        return json(res, 200, view(p));
      }
      if (req.method === 'GET' && one) {
        const p = predictions.get(one[1]!);
        if (!p) return json(res, 404, { detail: 'Not found' });
        if (p.status === 'starting' || p.status === 'processing') {
          p.polls++;
          if (p.version === 'ok' && p.polls >= 2) Object.assign(p, { status: 'succeeded', output: [`${base}/outputs/${p.id}.png`] });
          else if (p.version === 'fail') Object.assign(p, { status: 'failed', error: 'NSFW content detected (secret-internal-detail)' });
          else p.status = 'processing';
        }
        return json(res, 200, view(p));
      }
      json(res, 404, { detail: 'Not found' });
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const releaseCreates = () => {
    const waiting = held ?? [];
    held = undefined;
    for (const create of waiting) create();
  };
  return {
    url: `${base}/v1`,
    predictions,
    cancels,
    creates,
    releaseCreates,
    close: () =>
      new Promise((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}
