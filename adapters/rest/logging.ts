import type { IncomingMessage, ServerResponse } from 'node:http';
import { pinoHttp } from 'pino-http';
import type { Logger } from 'pino';
import { newId } from '../../core/ids.ts';

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

/**
 * One log line per request with its id. Only method, path and status are logged: never
 * headers (Authorization, Cookie), bodies or query strings, which can carry secrets.
 */
export function requestLogger(logger: Logger) {
  return pinoHttp({
    logger,
    genReqId(req: IncomingMessage, res: ServerResponse) {
      const incoming = req.headers['x-request-id'];
      const id = typeof incoming === 'string' && INCOMING_ID.test(incoming) ? incoming : newId('req');
      res.setHeader('x-request-id', id);
      return id;
    },
    serializers: {
      req: (req: { id: string; method: string; url: string }) => ({ id: req.id, method: req.method, path: loggablePath(req.url) }),
      res: (res: { statusCode: number }) => ({ statusCode: res.statusCode }),
    },
    customLogLevel: (_req, res, err) => (err || res.statusCode >= 500 ? 'error' : 'info'),
    // A client that left before the answer was complete: "aborted", not the status never sent.
    customSuccessMessage: (req, res) => `${req.method} ${loggablePath(originalUrl(req))} ${res.writableFinished ? res.statusCode : 'aborted'}`,
    customErrorMessage: (req, res) => `${req.method} ${loggablePath(originalUrl(req))} ${res.statusCode}`,
    // Lines logged while handling a request (req.log) carry its id as request_id.
    quietReqLogger: true,
    customAttributeKeys: { reqId: 'request_id' },
  });
}
