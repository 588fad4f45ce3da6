import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Logger } from 'pino';
import { newId } from '../../core/ids.ts';
import { ERROR_CODE_LOCAL } from './error-body.ts';

const INCOMING_ID = /^[\w.:-]{1,128}$/;

/** The path as it is safe to log: no query string, no key in an MCP connector link, no key pasted anywhere else. */
export function loggablePath(url: string | undefined): string {
  const path = (url ?? '').split('?')[0] ?? '';
  return path.replace(/\/mcp\/[^/]+/, '/mcp/[redacted]').replace(/mas_[0-9A-Za-z]+/g, 'mas_[redacted]');
}

/** Express rewrites req.url inside routers; the path the client sent is originalUrl. */
function originalUrl(req: IncomingMessage): string | undefined {
  return (req as IncomingMessage & { originalUrl?: string }).originalUrl ?? req.url;
}

declare module 'node:http' {
  interface IncomingMessage {
    /** This request's id (x-request-id), set by requestLogger. */
    id: string;
    /** The logger for lines about this request: they carry its id as request_id. */
    log: Logger;
  }
}

/**
 * The request id (a sane incoming x-request-id, else a new one, echoed in the answer), a
 * logger for the request (`req.log`, its lines carry the id as request_id), and one line when
 * the answer is done: method, path and status (5xx at error, but for a not-ready /readyz), or `aborted` for a client that
 * left first, and `code`, the error code of an answer in the error shape (error-body.ts), 4xx and 5xx alike. Only those are logged: never headers (Authorization, Cookie), bodies or query
 * strings, which can carry secrets.
 *
 * This replaced pino-http, with the same lines out: its per-request work (a second child
 * logger bound to a serialized request, response bookkeeping) cost the chat route ~10% of its
 * completions per second at c=32, where the event loop is the limit (bench/RESULTS.md).
 */
export function requestLogger(logger: Logger): (req: IncomingMessage, res: ServerResponse, next: () => void) => void {
  return (req, res, next) => {
    const incoming = req.headers['x-request-id'];
    const id = typeof incoming === 'string' && INCOMING_ID.test(incoming) ? incoming : newId('req');
    req.id = id;
    // The request's child logger is made on first use: most answers log one line or none, and
    // pino's child (it applies the redaction paths to its bindings) costs a chat ~3 KiB and a
    // few percent of its CPU (bench:profile), for a logger that is then never used.
    let child: Logger | undefined;
    Object.defineProperty(req, 'log', { configurable: true, enumerable: true, get: () => (child ??= logger.child({ request_id: id })), set: (value: Logger) => (child = value) });
    res.setHeader('x-request-id', id);
    const started = Date.now();
    const done = () => {
      res.removeListener('finish', done);
      res.removeListener('close', done);
      const failed = res.statusCode >= 500;
      // A not-ready answer is the readiness probe doing its job (shutting down, the database
      // away: that is logged where it is found), not a failure of this request.
      const level = failed && (res as { locals?: { route?: string } }).locals?.route !== '/readyz' ? 'error' : 'info';
      if (!(child ?? logger).isLevelEnabled(level)) return;
      const path = loggablePath(originalUrl(req));
      const outcome = failed || res.writableFinished ? res.statusCode : 'aborted';
      // The error's stable code (`invalid_value`, `insufficient_balance`), never its message, which may quote the request.
      const code = (res as { locals?: Record<string, unknown> }).locals?.[ERROR_CODE_LOCAL];
      req.log[level](
        { req: { id, method: req.method, path }, res: { statusCode: res.statusCode }, ...(typeof code === 'string' ? { code } : {}), responseTime: Date.now() - started },
        `${req.method} ${path} ${outcome}`,
      );
    };
    res.on('finish', done);
    res.on('close', done);
    next();
  };
}
