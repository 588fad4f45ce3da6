import { Router } from 'express';
import type { CoreDeps } from '../../../core/context.ts';
import { callApi } from '../caller.ts';
import { route } from './route.ts';

export function modelRoutes(deps: CoreDeps): Router {
  const router = Router();
  route(router, '/models', {
    get: async (req, res) => {
      res.json(await callApi(deps, req, res, (core) => core.models.list(req.query as never)));
    },
  });
  // Model ids may contain "/": /models/acme/vision-1 is the model "acme/vision-1".
  route(router, '/models/*id', {
    get: async (req, res) => {
      const id = ([] as string[]).concat(req.params.id ?? []).join('/');
      res.json(await callApi(deps, req, res, (core) => core.models.get({ id })));
    },
  });
  return router;
}
