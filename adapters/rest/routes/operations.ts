import { Router } from 'express';
import type { CoreDeps } from '../../../core/context.ts';
import type { HttpMetrics } from '../metrics.ts';
import { publicCaller, bearerToken } from '../caller.ts';
import { sendError } from '../errors.ts';
import { route } from './route.ts';

/** Liveness, readiness and metrics: public, outside /api/v1. */
export function operationsRoutes(deps: CoreDeps, opts: { metrics: HttpMetrics; metricsToken?: string | undefined; isDraining: () => boolean }): Router {
  const router = Router();
  route(router, '/healthz', {
    get: (_req, res) => {
      res.json({ status: 'ok' });
    },
  });
  route(router, '/readyz', {
    get: async (req, res) => {
      if (opts.isDraining()) {
        sendError(res, 503, 'server_error', 'shutting_down', 'The server is shutting down.');
        return;
      }
      res.json(await publicCaller(deps, req).health.ready());
    },
  });
  route(router, '/metrics', {
    get: async (req, res) => {
      if (opts.metricsToken && bearerToken(req) !== opts.metricsToken) {
        sendError(res, 401, 'authentication_error', 'invalid_metrics_token', 'Send the metrics token as "Authorization: Bearer <token>".');
        return;
      }
      res.setHeader('Content-Type', opts.metrics.registry.contentType);
      res.send(await opts.metrics.registry.metrics());
    },
  });
  return router;
}
