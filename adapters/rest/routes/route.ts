import type { Request, RequestHandler, Router } from 'express';
import { sendHttpError } from '../errors.ts';

type Method = 'get' | 'post' | 'put' | 'patch' | 'delete';

/** The media types express.json() parses (adapters/rest/rest.ts): the only bodies a JSON route reads. */
export const JSON_TYPES = ['application/json', 'application/*+json'];

export interface RouteOptions {
  /**
   * What the request body of a POST, PUT or PATCH must be: 'json' (the default) answers 415
   * to a body of any other type, which express.json() would leave unread; 'any' leaves the
   * body to the handler (uploads).
   */
  body?: 'json' | 'any';
}

/** Whether the request carries a body (RFC 9112: a Transfer-Encoding, or a Content-Length above 0). */
function hasBody(req: Request): boolean {
  if (req.headers['transfer-encoding'] !== undefined) return true;
  const length = req.headers['content-length'];
  return length !== undefined && length !== '0';
}

/**
 * Registers the handlers of one path, and answers 405 (with Allow) for every other method.
 * A body sent to a JSON route in another type gets 415 `unsupported_media_type` naming the
 * type received, instead of reaching core as no body at all ("missing field").
 */
export function route(router: Router, path: string, handlers: Partial<Record<Method, RequestHandler>>, opts: RouteOptions = {}): void {
  const allowed = Object.keys(handlers).map((m) => m.toUpperCase());
  if (allowed.includes('GET')) allowed.push('HEAD');
  const checkJson = (opts.body ?? 'json') === 'json';
  for (const [method, handler] of Object.entries(handlers) as [Method, RequestHandler][]) {
    const takesBody = checkJson && (method === 'post' || method === 'put' || method === 'patch');
    router[method](path, (req, res, next) => {
      // The route pattern for metrics, taken here because Express restores baseUrl on the way out.
      res.locals.route = `${req.baseUrl}${path}`;
      if (takesBody && hasBody(req) && !req.is(JSON_TYPES)) {
        const received = req.headers['content-type'];
        sendHttpError(
          res,
          'unsupported_media_type',
          received
            ? `Unsupported Content-Type '${received.split(';')[0]!.trim().slice(0, 100)}': send the request body as application/json.`
            : 'The request has a body but no Content-Type: send it as application/json.',
        );
        return;
      }
      return handler(req, res, next);
    });
  }
  router.all(path, (_req, res) => {
    res.setHeader('Allow', allowed.join(', '));
    sendHttpError(res, 'method_not_allowed', `Method not allowed. This route accepts ${allowed.join(', ')}.`);
  });
}
