import { STATUS_CODES, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import type { Express } from 'express';
import type { Logger } from 'pino';

export interface ListeningServer {
  server: Server;
  port: number;
  /** Stops accepting, lets requests in flight finish up to the timeout, then closes their connections. */
  drain(): Promise<void>;
}

/** Listens, and drains on shutdown: idle connections close at once, busy ones when their request ends or the timeout passes. */
export async function listen(app: Express, opts: { port: number; host: string; shutdownTimeoutSeconds: number; logger: Logger }): Promise<ListeningServer> {
  const server = await new Promise<Server>((resolve, reject) => {
    const s = app.listen(opts.port, opts.host, (err?: Error) => (err ? reject(err) : resolve(s)));
  });
  server.keepAliveTimeout = 65_000; // longer than common load balancer idle timeouts
  answerClientErrors(server, opts.logger);
  return {
    server,
    port: (server.address() as { port: number }).port,
    async drain() {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeIdleConnections();
      // A kept-alive connection whose request (a stream) ends later stays open, idle, until its
      // keep-alive timeout: close such connections as they become idle.
      const idle = setInterval(() => server.closeIdleConnections(), 200);
      const timeout = setTimeout(() => {
        opts.logger.warn('requests still in flight after the shutdown timeout: closing their connections');
        server.closeAllConnections();
      }, opts.shutdownTimeoutSeconds * 1000);
      await closed;
      clearInterval(idle);
      clearTimeout(timeout);
    },
  };
}

/**
 * What Node's HTTP parser cannot read, answered in the service's error shape (docs/errors.md)
 * instead of Node's bare `400 Bad Request`: by the parser's error code, except that a
 * connection ending in the middle of a request's body (fewer bytes than its Content-Length,
 * or no last chunk, then a half-close) is `incomplete_body`.
 */
const CLIENT_ERRORS: Record<string, { status: number; code: string; message: string }> = {
  incomplete_body: {
    status: 400,
    code: 'incomplete_body',
    message: 'The request body ended before its Content-Length (or its last chunk) arrived: the client closed its side of the connection early.',
  },
  HPE_INVALID_EOF_STATE: { status: 400, code: 'malformed_request', message: "The connection ended before the request's headers were complete." },
  HPE_HEADER_OVERFLOW: { status: 431, code: 'request_headers_too_large', message: 'The request headers are too large.' },
  HPE_CHUNK_EXTENSIONS_OVERFLOW: { status: 413, code: 'request_too_large', message: 'The chunk extensions of the request body are too large.' },
  ERR_HTTP_REQUEST_TIMEOUT: { status: 408, code: 'request_timeout', message: 'The request did not arrive in time.' },
};
const MALFORMED = { status: 400, code: 'malformed_request', message: 'The request is not valid HTTP/1.1 and could not be read.' };

/**
 * Node's 'clientError': the parser failed on a connection (a malformed request, headers too
 * large, the body cut short by the client's half-close, a request too slow). Where the socket
 * can still take an answer, it gets one in the error shape, as JSON, with `Connection: close`,
 * and is closed once the answer is written. Nothing is written to a socket that is gone (a
 * reset: ECONNRESET), that cannot be written, or whose current response has begun: that one is
 * destroyed, as Node does. A request whose handler already answered (a 405 before its body
 * was read) is not answered twice.
 */
export function answerClientErrors(server: Server, logger: Logger): void {
  // The request each connection is on: the parser's error may be about its body.
  const current = new WeakMap<Duplex, { req: IncomingMessage; res: ServerResponse }>();
  server.on('request', (req: IncomingMessage, res: ServerResponse) => current.set(req.socket, { req, res }));
  server.on('clientError', (err: NodeJS.ErrnoException, socket: Duplex) => {
    const on = current.get(socket);
    const answering = on && !on.res.writableEnded ? on.res : undefined;
    const bodyCut = on !== undefined && !on.req.complete;
    if (err.code === 'ECONNRESET' || socket.destroyed || !socket.writable || answering?.headersSent || (bodyCut && !answering)) {
      socket.destroy();
      return;
    }
    const answer = (bodyCut ? CLIENT_ERRORS.incomplete_body : CLIENT_ERRORS[err.code ?? '']) ?? MALFORMED;
    logger.debug({ code: err.code, status: answer.status }, 'unreadable HTTP request');
    const body = JSON.stringify({ error: { message: answer.message, type: 'invalid_request_error', param: null, code: answer.code } });
    socket.end(
      `HTTP/1.1 ${answer.status} ${STATUS_CODES[answer.status]}\r\n` +
        'Content-Type: application/json; charset=utf-8\r\n' +
        `Content-Length: ${Buffer.byteLength(body)}\r\n` +
        'X-Content-Type-Options: nosniff\r\n' +
        'Connection: close\r\n\r\n' +
        body,
      // Written: the connection is closed, whether or not the client closes its side.
      () => socket.destroy(),
    );
  });
}
