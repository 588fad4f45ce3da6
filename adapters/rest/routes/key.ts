import { Router } from 'express';
import type { CoreDeps } from '../../../core/context.ts';
import { callApi } from '../caller.ts';
import { route } from './route.ts';

/** `GET /key`: the calling key's limits and usage (docs/api.md, "Key limits"). */
export function keyRoutes(deps: CoreDeps): Router {
  const router = Router();
  route(router, '/key', {
    get: async (req, res) => {
      res.json(await callApi(deps, req, res, (core) => core.keys.current()));
    },
  });
  return router;
}
