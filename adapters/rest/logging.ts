import type { RequestHandler } from 'express';
import type { Logger } from 'pino';
import { newId } from '../../core/ids.ts';

declare module 'node:http' {
  interface IncomingMessage {
    /** The request id: the client's `x-request-id` when it is sane, else a new one. */
    id: string;
    /** A child logger whose lines carry `request_id`. */
    log: Logger;
  }
}

const INCOMING_ID = /^[\w.:-]{1,128}$/;

/** The path as it is safe to log: no query string, no key in an MCP connector link, no key pasted anywhere else. */
export function loggablePath(url: string | undefined): string {
  const path = (url ?? '').split('?')[0] ?? '';
  return path.replace(/\/mcp\/[^/]+/, '/mcp/[redacted]').replace(/mas_[0-9A-Za-z]+/g, 'mas_[redacted]');
}

/**
 * Gives every request an id (answered as `x-request-id`) and logs one line when its response
 * is done: method, path and status, never headers (Authorization, Cookie), bodies or query
 * strings, which can carry secrets. 5xx answers log at `error`; a client that goes away
 * before the answer is complete logs at `info` with `aborted: true`.
 *
 * `req.log`, the request's child logger, is made on first use. pino-http made two child
 * loggers per request (each through the redaction paths), about 5% of the gateway's CPU on
 * chat requests that never log anything else.
 */
export function requestLogger(logger: Logger): RequestHandler {
  return (req, res, next) => {
    const incoming = req.headers['x-request-id'];
    const id = typeof incoming === 'string' && INCOMING_ID.test(incoming) ? incoming : newId('req');
    res.setHeader('x-request-id', id);
    req.id = id;
    let child: Logger | undefined;
    Object.defineProperty(req, 'log', { configurable: true, get: () => (child ??= logger.child({ request_id: id })) });
    const start = performance.now();
    let logged = false;
    const done = () => {
      if (logged) return;
      logged = true;
      const aborted = !res.writableFinished;
      const level = res.statusCode >= 500 ? 'error' : 'info';
      if (!logger.isLevelEnabled(level)) return;
      const path = loggablePath(req.originalUrl);
      logger[level](
        {
          request_id: id,
          req: { id, method: req.method, path },
          res: { statusCode: res.statusCode },
          responseTime: Math.round(performance.now() - start),
          ...(aborted ? { aborted: true } : {}),
        },
        `${req.method} ${path} ${res.statusCode}`,
      );
    };
    res.once('finish', done);
    res.once('close', done);
    next();
  };
}
