import { Router } from 'express';
import type { CoreDeps } from '../../../core/context.ts';
import { callApi } from '../caller.ts';
import { route } from './route.ts';

export function walletRoutes(deps: CoreDeps): Router {
  const router = Router();
  route(router, '/balance', {
    get: async (req, res) => {
      res.json(await callApi(deps, req, res, (core) => core.wallet.balance()));
    },
  });
  route(router, '/wallet/history', {
    get: async (req, res) => {
      res.json(await callApi(deps, req, res, (core) => core.wallet.history(req.query)));
    },
  });
  return router;
}
