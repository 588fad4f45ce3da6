import type { Request, Response } from 'express';

/** OpenAI's error object: `param` names the request field concerned (a dotted path), or is null. */
export interface ErrorObject {
  message: string;
  type: string;
  param: string | null;
  code: string;
}

/** Where the request log (logging.ts) finds the code of the error a response carried. */
export const ERROR_CODE_LOCAL = 'errorCode';

/** Remembers the error's code on the response, for its line in the request log. */
export function tagErrorCode(res: Pick<Response, 'locals'>, code: string): void {
  res.locals[ERROR_CODE_LOCAL] = code;
}

/**
 * The error shape every HTTP surface of the service shares, `{"error":{message,type,param,code}}`,
 * with its code kept for the request log.
 */
export function sendErrorBody(res: Response, status: number, error: ErrorObject): void {
  tagErrorCode(res, error.code);
  res.status(status).json({ error: { message: error.message, type: error.type, param: error.param, code: error.code } });
}

/** The API's base address as clients must configure it: `{PUBLIC_BASE_URL}/api/v1`. */
export function apiBaseUrl(publicBaseUrl: string): string {
  return `${publicBaseUrl.replace(/\/+$/, '')}/api/v1`;
}

/**
 * The 404 of a path no route has. It names the base URL, because the usual mistake is a client
 * configured with `…/v1` (most OpenAI-compatible servers) instead of `…/api/v1`.
 */
export function sendUnknownRoute(req: Request, res: Response, publicBaseUrl: string): void {
  const path = ((req.originalUrl || req.url).split('?')[0] ?? '').slice(0, 200);
  sendErrorBody(res, 404, {
    message: `Unknown route: ${req.method} ${path}. This API's base URL is ${apiBaseUrl(publicBaseUrl)} (for example POST ${apiBaseUrl(publicBaseUrl)}/chat/completions).`,
    type: 'not_found_error',
    param: null,
    code: 'unknown_route',
  });
}
