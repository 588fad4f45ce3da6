import type { AddressInfo } from 'node:net';
import http from 'node:http';
import express from 'express';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { createLogger } from '../../config/logger.ts';
import { requestLogger } from '../../adapters/http/logging.ts';

const lines: Record<string, unknown>[] = [];
let slowReached: (() => void) | undefined;
let server: http.Server;
let url: string;
beforeAll(async () => {
  const logger = createLogger('info', { write: (s: string) => void lines.push(JSON.parse(s)) });
  const app = express();
  app.use(requestLogger(logger));
  app.get('/inside', (req, res) => {
    req.log.info({ step: 'handler' }, 'inside');
    res.json({ id: req.id });
  });
  app.get('/fail', (_req, res) => void res.status(503).json({}));
  // Never answers; tells the test it has the request.
  app.get('/slow', () => slowReached?.());
  app.use((_req, res) => void res.status(404).json({}));
  server = app.listen(0, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(() => new Promise((resolve) => server.close(resolve)));

const forRequest = (id: string) => lines.filter((l) => l.request_id === id);

describe('request log', () => {
  it('logs one line per request with its id, method, path and status; handler lines carry the id', async () => {
    const res = await fetch(`${url}/inside?api_key=mas_QUERYSECRET`, { headers: { authorization: 'Bearer mas_HEADERSECRET', cookie: 's=COOKIESECRET' } });
    const id = res.headers.get('x-request-id')!;
    expect(id).toMatch(/^req_/);
    expect(await res.json()).toEqual({ id });
    await vi.waitFor(() => expect(forRequest(id)).toHaveLength(2));
    const [inside, done] = forRequest(id);
    expect(inside).toMatchObject({ msg: 'inside', step: 'handler', level: 30 });
    expect(done).toMatchObject({ msg: 'GET /inside 200', level: 30, req: { id, method: 'GET', path: '/inside' }, res: { statusCode: 200 } });
    expect(done!.responseTime).toEqual(expect.any(Number));
    expect(JSON.stringify(lines)).not.toMatch(/SECRET/);
  });

  it('takes a sane incoming id, redacts keys in paths, logs 5xx at error and a client that left as aborted', async () => {
    await fetch(`${url}/fail`, { headers: { 'x-request-id': 'trace-7' } });
    await vi.waitFor(() => expect(forRequest('trace-7')).toMatchObject([{ level: 50, msg: 'GET /fail 503' }]));

    const res = await fetch(`${url}/keys/mas_PATHSECRET`, { headers: { 'x-request-id': 'trace-8' } });
    expect(res.status).toBe(404);
    await vi.waitFor(() => expect(forRequest('trace-8')).toMatchObject([{ req: { path: '/keys/mas_[redacted]' } }]));

    // The client leaves once the server has its request (not after a pause that hoped it had).
    const reached = new Promise<void>((resolve) => (slowReached = resolve));
    const req = http.get(`${url}/slow`, { headers: { 'x-request-id': 'trace-9' } });
    req.on('error', () => undefined);
    await reached;
    req.destroy();
    await vi.waitFor(() => expect(forRequest('trace-9')).toMatchObject([{ level: 30, msg: 'GET /slow aborted' }]));
    expect(forRequest('trace-9')).toHaveLength(1);
    expect(JSON.stringify(lines)).not.toMatch(/SECRET/);
  });

  it('at level warn, logs only the 5xx answers, and still gives every request its id and logger', async () => {
    const quiet: Record<string, unknown>[] = [];
    const app = express();
    app.use(requestLogger(createLogger('warn', { write: (s: string) => void quiet.push(JSON.parse(s)) })));
    app.get('/ok', (req, res) => void res.json({ id: req.id, logs: typeof req.log.warn }));
    app.get('/down', (_req, res) => void res.status(503).json({}));
    const local = app.listen(0, '127.0.0.1');
    await new Promise((resolve) => local.once('listening', resolve));
    try {
      const base = `http://127.0.0.1:${(local.address() as AddressInfo).port}`;
      const ok = await fetch(`${base}/ok`);
      expect(await ok.json()).toEqual({ id: ok.headers.get('x-request-id'), logs: 'function' });
      await fetch(`${base}/down`, { headers: { 'x-request-id': 'trace-down' } });
      await vi.waitFor(() => expect(quiet).toMatchObject([{ level: 50, msg: 'GET /down 503', request_id: 'trace-down' }]));
      expect(quiet).toHaveLength(1);
    } finally {
      await new Promise((resolve) => local.close(resolve));
    }
  });

  it('makes the request\'s child logger only when a line is written: an answer not logged costs no child', async () => {
    const logger = createLogger('warn', { write: () => undefined });
    const child = vi.spyOn(logger, 'child');
    const app = express();
    app.use(requestLogger(logger));
    app.get('/quiet', (req, res) => void res.json({ id: req.id }));
    app.get('/down', (_req, res) => void res.status(503).json({}));
    const local = app.listen(0, '127.0.0.1');
    await new Promise((resolve) => local.once('listening', resolve));
    try {
      const base = `http://127.0.0.1:${(local.address() as AddressInfo).port}`;
      for (let i = 0; i < 3; i++) expect((await fetch(`${base}/quiet`)).status).toBe(200);
      expect(child).not.toHaveBeenCalled();
      await fetch(`${base}/down`, { headers: { 'x-request-id': 'trace-child' } });
      await vi.waitFor(() => expect(child).toHaveBeenCalledTimes(1));
      expect(child).toHaveBeenCalledWith({ request_id: 'trace-child' });
    } finally {
      await new Promise((resolve) => local.close(resolve));
    }
  });
});
