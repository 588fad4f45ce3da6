import type { IncomingMessage, ServerResponse } from 'node:http';
import express, { type ErrorRequestHandler, type Express, type RequestHandler, type Router } from 'express';
import helmet from 'helmet';
import type { Logger } from 'pino';
import type { CoreDeps } from '../../core/context.ts';
import { requestLogger } from './logging.ts';
import { traceRequests } from './tracing.ts';
import { tracingOn } from '../../core/telemetry.ts';
import { createHttpMetrics, type HttpMetrics } from './metrics.ts';
import { sendUnknownRoute } from './error-body.ts';
import { createContext } from '../../core/context.ts';
import { createCaller } from '../../core/router.ts';
import { operationsRoutes, sendError } from './operations.ts';

/**
 * One HTTP surface of the service (REST today; MCP, the account pages and the admin API next):
 * a router mounted at `path` that parses its own bodies and maps its own errors (a 404 for
 * its unknown routes included), so that adding an adapter changes no other one.
 */
export interface HttpAdapter {
  path: string;
  router: Router;
}

/**
 * An adapter whose code is imported on its first request (the MCP server, the admin API):
 * their libraries (the MCP SDK; graphql, yoga and the Pothos schema) take memory that an
 * instance nobody calls them on never pays. A failed load answers that request with the
 * error and is tried again on the next.
 */
export function lazyAdapter(path: string, load: () => Promise<HttpAdapter>): HttpAdapter {
  let loading: Promise<Router> | undefined;
  const router = express.Router();
  router.use((req, res, next) => {
    loading ??= load().then((adapter) => {
      if (adapter.path !== path) throw new Error(`lazy adapter for ${path} loaded one for ${adapter.path}`);
      return adapter.router;
    });
    loading.then(
      (loaded) => loaded(req, res, next),
      (err: unknown) => {
        loading = undefined;
        next(err);
      },
    );
  });
  return { path, router };
}

export interface HttpAppOptions {
  deps: CoreDeps;
  logger: Logger;
  /** The address clients see: served over plain http, browsers are not told to switch to https. */
  publicBaseUrl: string;
  /** Mounted in this order: put a more specific path before a prefix of it (`/api/v1/mcp` before `/api/v1`). */
  adapters: HttpAdapter[];
  metrics?: HttpMetrics | undefined;
  metricsToken?: string | undefined;
  /**
   * How many proxies in front to trust for the client's address (X-Forwarded-For, read from the
   * right); false: none. Never "all": a client could then name any address it likes.
   */
  trustProxy?: number | false | undefined;
  /** True once shutdown has begun: /readyz answers 503 so load balancers move away. */
  isDraining?: (() => boolean) | undefined;
}

/**
 * The pieces every HTTP surface shares, in one place: request ids and the request log,
 * metrics, security headers, the operations routes (/healthz, /readyz, /metrics) and the
 * last-resort 404 and 500. Body limits and error mapping belong to each adapter.
 */
export function createHttpApp(opts: HttpAppOptions): Express {
  const { logger } = opts;
  const metrics =
    opts.metrics ??
    createHttpMetrics({
      routes: opts.deps.routeBreakers,
      figures: (since, afterEntry) =>
        createCaller(createContext(opts.deps, { kind: 'none' }, { requestId: 'metrics' })).health.figures({ ...(since ? { since } : {}), ...(afterEntry ? { afterEntry } : {}) }),
    });
  const app = express();
  app.disable('x-powered-by');
  // No ETag: it hashes every JSON body, and API answers (balances, completions) are not cached.
  app.set('etag', false);
  app.set('trust proxy', opts.trustProxy ?? false);

  // Tracing on (config/telemetry.ts): a server span around everything else; off, not mounted at all.
  if (tracingOn()) app.use(traceRequests());
  app.use(requestLogger(logger));
  app.use(metrics.middleware);
  // Shutting down: every answer closes its connection, so that a balancer keeping connections
  // alive holds none to this instance when it stops accepting (docs/deploy.md).
  const isDraining = opts.isDraining ?? (() => false);
  app.use((_req, res, next) => {
    if (isDraining()) res.setHeader('Connection', 'close');
    next();
  });
  // Security headers, with a CSP that allows no inline script and no inline style (every style is
  // in /assets/app.css or Swagger UI's own file), no style from other sites, and pages that may not
  // be framed: frame-ancestors 'none', and X-Frame-Options DENY, its equal, for older browsers.
  const https = opts.publicBaseUrl.startsWith('https:');
  app.use(
    fixedHeaders(helmet({
      contentSecurityPolicy: { directives: { 'frame-ancestors': ["'none'"], 'style-src': ["'self'"], 'upgrade-insecure-requests': https ? [] : null } },
      xFrameOptions: { action: 'deny' },
      strictTransportSecurity: https,
      // same-origin: no referrer leaves the site; with no-referrer, browsers send 'Origin: null' on our own forms.
      referrerPolicy: { policy: 'same-origin' },
    })),
  );

  // Operations first: an adapter mounted at / (the account pages) answers its own unknown paths.
  app.use(operationsRoutes(opts.deps, { metrics, metricsToken: opts.metricsToken, isDraining }));
  for (const adapter of opts.adapters) app.use(adapter.path, adapter.router);

  app.use((req, res) => sendUnknownRoute(req, res, opts.publicBaseUrl));
  app.use(lastResort(logger));
  return app;
}

/**
 * A middleware that sets the same headers on every answer (helmet with directives that are all
 * constants: no nonce, nothing read from the request), run once at start-up and replayed: helmet
 * still decides every header, but an answer pays for a dozen `setHeader` calls instead of
 * helmet's thirteen middlewares and its CSP string built anew (bench:profile, ~2 % of a chat).
 */
export function fixedHeaders(middleware: (req: IncomingMessage, res: ServerResponse, next: (err?: unknown) => void) => void): RequestHandler {
  const headers: [string, string | number | readonly string[]][] = [];
  const removed: string[] = [];
  const recorder = {
    setHeader: (name: string, value: string | number | readonly string[]) => void headers.push([name, value]),
    removeHeader: (name: string) => void removed.push(name),
    getHeader: () => undefined,
  };
  let called = false;
  middleware({ headers: {}, method: 'GET', url: '/' } as IncomingMessage, recorder as unknown as ServerResponse, (err) => {
    if (err) throw err;
    called = true;
  });
  if (!called) throw new Error('fixedHeaders: the middleware did not call next() at once, so its headers are not fixed');
  return (_req, res, next) => {
    for (const name of removed) res.removeHeader(name);
    for (const [name, value] of headers) res.setHeader(name, value);
    next();
  };
}

/** What no adapter handled: a logged 500 with the request id, never a stack trace. */
function lastResort(logger: Logger): ErrorRequestHandler {
  return (err: unknown, req, res, _next) => {
    if (res.headersSent) {
      res.destroy();
      return;
    }
    (req.log ?? logger).error({ err }, 'unhandled error');
    sendError(res, 500, 'server_error', 'internal_error', 'Internal server error. The request id is in the x-request-id header.');
  };
}
