import type { IncomingMessage, ServerResponse } from 'node:http';
import { pinoHttp } from 'pino-http';
import type { Logger } from 'pino';
import { newId } from '../../core/ids.ts';

const INCOMING_ID = /^[\w.:-]{1,128}$/;

/** The path as it is safe to log: no query string, and no key in an MCP connector link. */
export function loggablePath(url: string | undefined): string {
  const path = (url ?? '').split('?')[0] ?? '';
  return path.replace(/\/mcp\/[^/]+/, '/mcp/[redacted]');
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
    customSuccessMessage: (req, res) => `${req.method} ${loggablePath(req.url)} ${res.statusCode}`,
    customErrorMessage: (req, res) => `${req.method} ${loggablePath(req.url)} ${res.statusCode}`,
    customAttributeKeys: { reqId: 'request_id' },
  });
}
