import { Router, type Response } from 'express';
import { createContext, type CoreDeps } from '../../core/context.ts';
import { createCaller } from '../../core/router.ts';
import { toCoreError } from '../../core/trpc.ts';
import { sendErrorBody } from './error-body.ts';
import type { HttpMetrics } from './metrics.ts';

/** Liveness, readiness and metrics: public (metrics behind a token when one is set), outside any adapter's prefix. */
export function operationsRoutes(deps: CoreDeps, opts: { metrics: HttpMetrics; metricsToken?: string | undefined; isDraining: () => boolean }): Router {
  const router = Router();
  const routeLabel = (path: string, res: Response) => (res.locals.route = path);
  router.get('/healthz', (_req, res) => {
    routeLabel('/healthz', res);
    res.json({ status: 'ok' });
  });
  router.get('/readyz', async (req, res) => {
    routeLabel('/readyz', res);
    if (opts.isDraining()) return sendError(res, 503, 'server_error', 'shutting_down', 'The server is shutting down.');
    try {
      res.json(await createCaller(createContext(deps, { kind: 'none' }, { requestId: String(req.id) })).health.ready());
    } catch (err) {
      const core = toCoreError(err);
      if (!core) throw err;
      sendError(res, 503, 'server_error', core.reason ?? 'service_unavailable', core.message);
    }
  });
  router.get('/metrics', async (req, res) => {
    routeLabel('/metrics', res);
    const bearer = /^Bearer[ ]+(\S+)\s*$/i.exec(req.headers.authorization ?? '')?.[1];
    if (opts.metricsToken && bearer !== opts.metricsToken) {
      return sendError(res, 401, 'authentication_error', 'invalid_metrics_token', 'Send the metrics token as "Authorization: Bearer <token>".');
    }
    res.setHeader('Content-Type', opts.metrics.registry.contentType);
    res.send(await opts.metrics.registry.metrics());
  });
  for (const path of ['/healthz', '/readyz', '/metrics']) {
    router.all(path, (_req, res) => {
      res.setHeader('Allow', 'GET, HEAD');
      sendError(res, 405, 'invalid_request_error', 'method_not_allowed', 'Method not allowed. This route accepts GET, HEAD.');
    });
  }
  return router;
}

/** The error shape every HTTP surface of the service shares: {"error":{"message","type","param","code"}}. */
export function sendError(res: Response, status: number, type: string, code: string, message: string): void {
  sendErrorBody(res, status, { message, type, param: null, code });
}
