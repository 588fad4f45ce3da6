import { Router } from 'express';
import type { CoreDeps } from '../../../core/context.ts';
import { jsonObject } from '../body.ts';
import { callApi } from '../caller.ts';
import { route } from './route.ts';

/** Top-ups from a customer's own back office, with its key: a payment page to send a person to. */
export function creditRoutes(deps: CoreDeps): Router {
  const router = Router();
  route(router, '/credits/checkout', {
    post: async (req, res) => {
      res.json(await callApi(deps, req, res, (core) => core.payments.checkout({ ...jsonObject(req.body), idempotency_key: req.get('idempotency-key') } as never)));
    },
  });
  return router;
}
