import express, { Router } from 'express';
import type { Logger } from 'pino';
import type { CoreDeps } from '../../core/context.ts';
import type { HttpAdapter } from '../http/app.ts';
import { publicCaller } from '../rest/caller.ts';
import { errorHandler, sendHttpError } from '../rest/errors.ts';

/** Stripe's events are small (tens of KB); anything far larger is not one. */
const BODY_LIMIT = '1mb';

/**
 * Webhooks the service receives, outside /api/v1 since no API key signs them: today Stripe's
 * (`POST /webhooks/stripe`, docs/payments.md). The body is read raw, on this route only: the
 * signature is over the exact bytes, which parsing JSON first would lose. Verifying and acting
 * are core's (`payments.webhook`); errors have the REST API's shape and table.
 */
export function webhooksAdapter(deps: CoreDeps, opts: { logger: Logger }): HttpAdapter {
  const router = Router();
  router.post('/stripe', express.raw({ type: () => true, limit: BODY_LIMIT }), async (req, res) => {
    res.locals.route = '/webhooks/stripe';
    const body = Buffer.isBuffer(req.body) ? req.body : Buffer.alloc(0);
    // No key: the signature over the raw body is the credential, checked by core.
    res.json(await publicCaller(deps, req).payments.webhook({ body, signature: req.get('stripe-signature') }));
  });
  router.all('/stripe', (_req, res) => {
    res.setHeader('Allow', 'POST');
    sendHttpError(res, 'method_not_allowed', 'Method not allowed. This route accepts POST.');
  });
  // Any other path under /webhooks falls through to the app's JSON 404, which names the API's base URL.
  router.use(errorHandler(opts.logger));
  return { path: '/webhooks', router };
}
