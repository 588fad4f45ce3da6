import type { IncomingMessage, ServerResponse } from 'node:http';
import { context, propagation, ROOT_CONTEXT, SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import { tracer, tracingOn } from '../../core/telemetry.ts';
import { loggablePath } from './logging.ts';

/**
 * A server span per HTTP request (docs/observability.md), mounted first by createHttpApp only
 * when tracing is on. Named `METHOD route` with the route pattern each adapter already sets for
 * the metrics (`res.locals.route`: `/api/v1/generations/:id`, `/api/v1/mcp/:key`), never the
 * raw path. Its attributes are the method, the route, the status and the path as the logs
 * show it (no query string; the connector link's key and any `mas_…` token redacted:
 * `loggablePath`). No header, cookie, body or query string is recorded. An incoming W3C
 * `traceparent` is honoured, so a caller's trace continues into ours.
 *
 * The request and response emitters are bound to the span's context: listeners (the body
 * parsers', the request log's `finish`) run inside it, so their work and their log lines
 * belong to the request's trace.
 */
export function traceRequests(): (req: IncomingMessage, res: ServerResponse, next: () => void) => void {
  return (req, res, next) => {
    if (!tracingOn()) return next();
    const parent = propagation.extract(ROOT_CONTEXT, req.headers);
    const method = req.method ?? 'GET';
    const span = tracer().startSpan(
      method,
      {
        kind: SpanKind.SERVER,
        attributes: {
          'http.request.method': method,
          'url.path': loggablePath((req as IncomingMessage & { originalUrl?: string }).originalUrl ?? req.url),
          'network.protocol.version': req.httpVersion,
        },
      },
      parent,
    );
    const ctx = trace.setSpan(parent, span);
    const done = () => {
      res.removeListener('finish', done);
      res.removeListener('close', done);
      const route = (res as { locals?: { route?: unknown } }).locals?.route;
      const label = typeof route === 'string' ? route : 'unmatched';
      span.updateName(`${method} ${label}`);
      span.setAttribute('http.route', label);
      span.setAttribute('http.response.status_code', res.statusCode);
      if (res.statusCode >= 500) span.setStatus({ code: SpanStatusCode.ERROR });
      if (!res.writableFinished) span.setAttribute('mas.aborted', true);
      span.end();
    };
    res.on('finish', done);
    res.on('close', done);
    context.bind(ctx, req);
    context.bind(ctx, res);
    context.with(ctx, next);
  };
}
