import { Router } from 'express';
import type { CoreDeps } from '../../../core/context.ts';
import { apiCaller } from '../caller.ts';
import { route } from './route.ts';

export function walletRoutes(deps: CoreDeps): Router {
  const router = Router();
  route(router, '/balance', {
    get: async (req, res) => {
      res.json(await apiCaller(deps, req).wallet.balance());
    },
  });
  route(router, '/wallet/history', {
    get: async (req, res) => {
      res.json(await apiCaller(deps, req).wallet.history(req.query));
    },
  });
  return router;
}
