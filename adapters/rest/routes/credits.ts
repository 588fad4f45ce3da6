import { Router } from 'express';
import type { CoreDeps } from '../../../core/context.ts';
import { jsonObject } from '../body.ts';
import { callApi } from '../caller.ts';
import { route } from './route.ts';

/** Top-ups and plans from a customer's own back office, with its key: a payment page to send a person to, and what was paid. */
export function creditRoutes(deps: CoreDeps): Router {
  const router = Router();
  route(router, '/credits/checkout', {
    post: async (req, res) => {
      res.json(await callApi(deps, req, res, (core) => core.payments.checkout({ ...jsonObject(req.body), idempotency_key: req.get('idempotency-key') } as never)));
    },
  });
  route(router, '/credits/subscription', {
    post: async (req, res) => {
      res.json(await callApi(deps, req, res, (core) => core.payments.subscribe({ ...jsonObject(req.body), idempotency_key: req.get('idempotency-key') } as never)));
    },
  });
  route(router, '/credits/billing', {
    get: async (req, res) => {
      res.json(await callApi(deps, req, res, (core) => core.payments.billing()));
    },
  });
  return router;
}
