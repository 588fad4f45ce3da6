import http from 'node:http';
import { ensureStripeMock, startStripeMock, type RunningStripeMock } from '../../adapters/embedded/stripe-mock.ts';
import { createLogger } from '../../config/logger.ts';

/**
 * stripe-mock as the Stripe API of one test file: found on PATH or built once per machine
 * (adapters/embedded/stripe-mock.ts), started on ports of its own, stopped by its PID in
 * afterAll. It keeps no state, so every file may run its own.
 */
export async function startTestStripeMock(): Promise<RunningStripeMock> {
  // warn: a first build (about a minute) says so, as the Temporal CLI's does.
  return startStripeMock(await ensureStripeMock(createLogger('warn', process.stderr)));
}

/** One request the service made to the Stripe API, as a recording proxy saw it. */
export interface RecordedStripeRequest {
  method: string;
  path: string;
  /** The form body (Stripe's API takes form-encoded bodies). */
  body: URLSearchParams;
  idempotencyKey: string | undefined;
}

/**
 * A proxy in front of stripe-mock that keeps each request: what the service asked Stripe for
 * (stripe-mock itself answers fixtures and keeps nothing). Point STRIPE_API_URL at `url`.
 */
export async function startRecordingProxy(target: string): Promise<{ url: string; requests: RecordedStripeRequest[]; close: () => Promise<void> }> {
  const requests: RecordedStripeRequest[] = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      requests.push({ method: req.method!, path: req.url!, body: new URLSearchParams(body.toString()), idempotencyKey: req.headers['idempotency-key'] as string | undefined });
      const upstream = http.request(`${target}${req.url}`, { method: req.method, headers: { ...req.headers, host: new URL(target).host } }, (answer) => {
        res.writeHead(answer.statusCode!, answer.headers);
        answer.pipe(res);
      });
      upstream.end(body);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as { port: number }).port}`,
    requests,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}
