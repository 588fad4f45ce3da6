import http from 'node:http';
import { timingSafeEqual } from 'node:crypto';
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';

/**
 * The standalone worker's /metrics (WORKER_METRICS_PORT): a plain HTTP listener, as a worker
 * serves nothing else. Behind METRICS_TOKEN when one is set, like the API's /metrics; anything
 * but GET /metrics is a 404.
 */
export async function serveWorkerMetrics(registry: Registry, opts: { port: number; host: string; token?: string | undefined; logger: Logger }): Promise<http.Server> {
  const server = http.createServer((req, res) => {
    void (async () => {
      const path = (req.url ?? '/').split('?')[0];
      if (req.method !== 'GET' || path !== '/metrics') {
        res.writeHead(404, { 'content-type': 'application/json' }).end(JSON.stringify({ error: { message: 'Only GET /metrics is served here.', type: 'invalid_request_error', param: null, code: 'not_found' } }));
        return;
      }
      if (opts.token && !sameSecret(req.headers.authorization ?? '', `Bearer ${opts.token}`)) {
        res
          .writeHead(401, { 'content-type': 'application/json' })
          .end(JSON.stringify({ error: { message: 'Send the metrics token as "Authorization: Bearer <token>".', type: 'authentication_error', param: null, code: 'invalid_metrics_token' } }));
        return;
      }
      try {
        const body = await registry.metrics();
        res.writeHead(200, { 'content-type': registry.contentType }).end(body);
      } catch (err) {
        opts.logger.error({ err }, 'worker metrics failed');
        res.writeHead(500).end();
      }
    })();
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port, opts.host, () => resolve());
  });
  return server;
}

function sameSecret(given: string, expected: string): boolean {
  const a = Buffer.from(given);
  const b = Buffer.from(expected);
  return a.length === b.length && timingSafeEqual(a, b);
}
