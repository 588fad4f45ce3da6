import type { RequestHandler, Router } from 'express';
import { sendHttpError } from '../errors.ts';

type Method = 'get' | 'post' | 'put' | 'patch' | 'delete';

/** Registers the handlers of one path, and answers 405 (with Allow) for every other method. */
export function route(router: Router, path: string, handlers: Partial<Record<Method, RequestHandler>>): void {
  const allowed = Object.keys(handlers).map((m) => m.toUpperCase());
  if (allowed.includes('GET')) allowed.push('HEAD');
  for (const [method, handler] of Object.entries(handlers) as [Method, RequestHandler][]) {
    router[method](path, (req, res, next) => {
      // The route pattern for metrics, taken here because Express restores baseUrl on the way out.
      res.locals.route = `${req.baseUrl}${path}`;
      return handler(req, res, next);
    });
  }
  router.all(path, (_req, res) => {
    res.setHeader('Allow', allowed.join(', '));
    sendHttpError(res, 'method_not_allowed', `Method not allowed. This route accepts ${allowed.join(', ')}.`);
  });
}
