import http from 'node:http';
import net from 'node:net';
import express from 'express';
import type { MikroORM } from '@mikro-orm/postgresql';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listen, type ListeningServer } from '../../adapters/http/server.ts';
import { errorHandler } from '../../adapters/rest/errors.ts';
import { makeAccount, makeKey, openTestOrm, silentLogger, testDeps } from '../support/db.ts';
import { createTestApp, getJson, serve } from '../support/http.ts';

/**
 * Requests the HTTP parser itself cannot read (Node's 'clientError': a body shorter than its
 * Content-Length, then a half-close; a malformed header; headers too large) are answered in the
 * service's error shape, as JSON with `Connection: close`, on the server as the service starts
 * it (adapters/http/server.ts), instead of Node's bare `400 Bad Request`.
 */
let orm: MikroORM;
let server: ListeningServer;
let key: string;

beforeAll(async () => {
  orm = await openTestOrm();
  server = await listen(createTestApp({ deps: testDeps(orm) }), { port: 0, host: '127.0.0.1', shutdownTimeoutSeconds: 1, logger: silentLogger });
  const account = await makeAccount(orm, { coins: '1' });
  key = (await makeKey(orm, account.id)).key;
});
afterAll(async () => {
  await server.drain();
  await orm.close();
});

interface RawResponse {
  status: number;
  headers: Record<string, string>;
  body: string;
}

/** Writes `bytes` on a raw socket, then half-closes it (FIN: nothing more will come), and reads whatever comes back until the server closes. */
function exchange(bytes: string | Buffer): Promise<{ raw: string; response?: RawResponse }> {
  return new Promise((resolve) => {
    const socket = net.connect(server.port, '127.0.0.1');
    const chunks: Buffer[] = [];
    socket.on('data', (c: Buffer) => chunks.push(c));
    // A reset after the answer still leaves the answer read.
    socket.on('error', () => undefined);
    socket.on('close', () => {
      const raw = Buffer.concat(chunks).toString('latin1');
      resolve({ raw, response: parse(raw) });
    });
    socket.write(bytes, () => socket.end());
  });
}

function parse(raw: string): RawResponse | undefined {
  const split = raw.indexOf('\r\n\r\n');
  if (split < 0) return undefined;
  const [statusLine, ...lines] = raw.slice(0, split).split('\r\n');
  const headers = Object.fromEntries(lines.map((l) => [l.slice(0, l.indexOf(':')).toLowerCase(), l.slice(l.indexOf(':') + 1).trim()]));
  return { status: Number(statusLine!.split(' ')[1]), headers, body: raw.slice(split + 4) };
}

function expectJsonError(got: { raw: string; response?: RawResponse }, status: number, code: string) {
  const res = got.response;
  expect(res, got.raw).toBeDefined();
  expect(res!.status, got.raw).toBe(status);
  expect(res!.headers['content-type'], got.raw).toMatch(/^application\/json/);
  expect(res!.headers.connection?.toLowerCase(), got.raw).toBe('close');
  expect(Number(res!.headers['content-length']), got.raw).toBe(Buffer.byteLength(res!.body));
  const body = JSON.parse(res!.body);
  expect(Object.keys(body)).toEqual(['error']);
  expect(Object.keys(body.error)).toEqual(['message', 'type', 'param', 'code']);
  expect(body.error.param).toBeNull();
  expect(body.error).toMatchObject({ type: 'invalid_request_error', code, message: expect.any(String) });
  return body.error as { message: string; type: string; code: string };
}

const truncated = (path: string, headers: string) =>
  `POST ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${key}\r\n${headers}Content-Length: 100\r\n\r\n{"model":"`;

describe('requests the HTTP parser cannot read', () => {
  it('a JSON body shorter than its Content-Length, then a half-close: 400 incomplete_body in the error shape', async () => {
    const got = await exchange(truncated('/api/v1/chat/completions', 'Content-Type: application/json\r\n'));
    const error = expectJsonError(got, 400, 'incomplete_body');
    expect(error.message).toMatch(/Content-Length/);
    // The server keeps serving.
    expect((await getJson(`http://127.0.0.1:${server.port}/healthz`)).status).toBe(200);
  });

  it('the same on an upload (multipart) and on the MCP server', async () => {
    expectJsonError(await exchange(truncated('/api/v1/files', 'Content-Type: multipart/form-data; boundary=x\r\n')), 400, 'incomplete_body');
    expectJsonError(await exchange(truncated('/api/v1/mcp', 'Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n')), 400, 'incomplete_body');
  });

  it('a malformed request: 400 malformed_request; headers over the limit: 431', async () => {
    expectJsonError(await exchange('GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nNot a header\r\n\r\n'), 400, 'malformed_request');
    expectJsonError(await exchange('\x00\x01\x02 nothing like HTTP\r\n\r\n'), 400, 'malformed_request');
    expectJsonError(await exchange(`GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: ${'a'.repeat(20 * 1024)}\r\n\r\n`), 431, 'request_headers_too_large');
    expect((await getJson(`http://127.0.0.1:${server.port}/healthz`)).status).toBe(200);
  });

  it('a kept-alive connection whose second request is cut short gets the first answer, then the error', async () => {
    const first = 'GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n';
    const got = await exchange(first + truncated('/api/v1/chat/completions', 'Content-Type: application/json\r\n'));
    expect(got.raw.match(/^HTTP\/1\.1 200 OK/)).not.toBeNull();
    const second = got.raw.slice(got.raw.indexOf('HTTP/1.1', 1));
    expectJsonError({ raw: second, response: parse(second) }, 400, 'incomplete_body');
  });

  it('a client that resets its connection gets nothing written, and the server keeps serving', async () => {
    await new Promise<void>((resolve) => {
      const socket = net.connect(server.port, '127.0.0.1', () => {
        socket.write(truncated('/api/v1/chat/completions', 'Content-Type: application/json\r\n'), () => socket.resetAndDestroy());
      });
      socket.on('error', () => undefined);
      socket.on('close', () => resolve());
    });
    expect((await getJson(`http://127.0.0.1:${server.port}/healthz`)).status).toBe(200);
  });
});

describe('a body over the limit, on a kept-alive connection', () => {
  /**
   * Sends a body larger than the route's limit with Content-Length over a kept-alive connection,
   * as the Python SDK's httpx does: the server must read the body to its end (or close the
   * connection), or the client stays blocked writing it and never reads the 413. Then a second
   * request on the same connection.
   */
  async function overLimit(path: string, bytes: number, extra: Record<string, string>, chunked: boolean) {
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    try {
      const body = Buffer.alloc(bytes, 'A');
      body.write('{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"upload_file","arguments":{"filename":"x","content":"');
      const first = await new Promise<{ status: number; body: string; sent: boolean }>((resolve, reject) => {
        let sent = false;
        const req = http.request(`http://127.0.0.1:${server.port}${path}`, {
          agent,
          method: 'POST',
          headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...extra, ...(chunked ? {} : { 'content-length': String(body.length) }) },
        });
        req.on('error', reject);
        req.on('response', (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () => {
            // The client finishes writing its body before it reads the next answer: wait for it, as httpx does.
            const done = () => resolve({ status: res.statusCode!, body: Buffer.concat(chunks).toString(), sent });
            if (req.writableFinished) done();
            else req.once('finish', done);
          });
        });
        // Chunked: no Content-Length, so the limit is found while reading.
        if (chunked) for (let at = 0; at < body.length - 1024 * 1024; at += 1024 * 1024) req.write(body.subarray(at, at + 1024 * 1024));
        req.end(chunked ? body.subarray(Math.floor((body.length - 1) / (1024 * 1024)) * 1024 * 1024) : body, () => {
          sent = true;
        });
      });
      const second = await new Promise<{ status: number; reused: boolean }>((resolve, reject) => {
        const req = http.get(`http://127.0.0.1:${server.port}/api/v1/balance`, { agent, headers: { authorization: `Bearer ${key}` } }, (res) => {
          res.resume();
          res.on('end', () => resolve({ status: res.statusCode!, reused: req.reusedSocket }));
        });
        req.on('error', reject);
      });
      return { first, second };
    } finally {
      agent.destroy();
    }
  }

  const mcp = { accept: 'application/json, text/event-stream' };
  const modern = { ...mcp, 'mcp-protocol-version': '2026-07-28', 'mcp-method': 'tools/call', 'mcp-name': 'upload_file' };
  it.each([
    ['REST', '/api/v1/chat/completions', 5 * 1024 * 1024, { accept: 'application/json' }, false],
    ['MCP (2025 revisions)', '/api/v1/mcp', 17 * 1024 * 1024, mcp, false],
    ['MCP (2025 revisions), chunked', '/api/v1/mcp', 17 * 1024 * 1024, mcp, true],
    ['MCP (2026-07-28)', '/api/v1/mcp', 17 * 1024 * 1024, modern, false],
  ])('%s reads the whole body, answers 413, and serves the next request on the same connection', { timeout: 10_000 }, async (_surface, path, bytes, extra, chunked) => {
    const { first, second } = await overLimit(path, bytes, extra, chunked);
    expect(first.status, first.body).toBe(413);
    expect(first.sent).toBe(true);
    expect(second).toEqual({ status: 200, reused: true });
  });
});

describe("REST's error table", () => {
  it("answers express's 'request aborted' (raw-body) as incomplete_body in the error shape", async () => {
    const app = express();
    app.post('/aborted', (_req, _res, next) => next(Object.assign(new Error('request aborted'), { type: 'request.aborted', status: 400, expose: true })));
    app.post('/size', (_req, _res, next) => next(Object.assign(new Error('request size did not match content length'), { type: 'request.size.invalid', status: 400, expose: true })));
    app.use(errorHandler(silentLogger));
    const served = await serve(app);
    try {
      for (const path of ['/aborted', '/size']) {
        const res = await getJson(`${served.base}${path}`, { method: 'POST' });
        expect(res.status).toBe(400);
        expect(res.body).toEqual({ error: { message: expect.stringMatching(/Content-Length/), type: 'invalid_request_error', param: null, code: 'incomplete_body' } });
      }
    } finally {
      await served.close();
    }
  });
});
