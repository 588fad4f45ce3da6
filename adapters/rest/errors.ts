import type { ErrorRequestHandler, Response } from 'express';
import type { Logger } from 'pino';
import type { CoreError, CoreErrorCode } from '../../core/errors.ts';
import { toCoreError } from '../../core/trpc.ts';
import { restMessage } from './phrasing.ts';

/**
 * The one table that turns errors into HTTP answers for this adapter, documented in
 * docs/errors.md. Every answer has the shape {"error":{"message","type","code"}}.
 */
const CORE_ERRORS: Record<CoreErrorCode, { status: number; type: string; code: string }> = {
  invalid_request: { status: 400, type: 'invalid_request_error', code: 'invalid_value' },
  limit_reached: { status: 400, type: 'invalid_request_error', code: 'limit_reached' },
  unauthorized: { status: 401, type: 'authentication_error', code: 'invalid_api_key' },
  insufficient_balance: { status: 402, type: 'billing_error', code: 'insufficient_balance' },
  paid_account_required: { status: 403, type: 'permission_error', code: 'paid_account_required' },
  forbidden: { status: 403, type: 'permission_error', code: 'forbidden' },
  not_found: { status: 404, type: 'not_found_error', code: 'not_found' },
  conflict: { status: 409, type: 'invalid_request_error', code: 'conflict' },
  idempotency_conflict: { status: 422, type: 'idempotency_error', code: 'idempotency_key_reused' },
  rate_limited: { status: 429, type: 'rate_limit_error', code: 'rate_limit_exceeded' },
  upstream_failed: { status: 502, type: 'upstream_error', code: 'upstream_error' },
  upstream_timeout: { status: 504, type: 'upstream_error', code: 'upstream_timeout' },
  unavailable: { status: 503, type: 'server_error', code: 'service_unavailable' },
};

/** Errors raised by the HTTP layer itself, before any use case runs. */
const HTTP_ERRORS = {
  invalid_json: { status: 400, type: 'invalid_request_error', message: 'The request body is not valid JSON.' },
  request_too_large: { status: 413, type: 'invalid_request_error', message: 'The request body is too large.' },
  unsupported_media_type: { status: 415, type: 'invalid_request_error', message: 'The request body encoding is not supported.' },
  unknown_route: { status: 404, type: 'not_found_error', message: 'Unknown route.' },
  method_not_allowed: { status: 405, type: 'invalid_request_error', message: 'Method not allowed.' },
  internal_error: { status: 500, type: 'server_error', message: 'Internal server error. The request id is in the x-request-id header.' },
} as const;
export type HttpErrorCode = keyof typeof HTTP_ERRORS;

export function sendError(res: Response, status: number, type: string, code: string, message: string): void {
  res.status(status).json({ error: { message, type, code } });
}

export function sendHttpError(res: Response, code: HttpErrorCode, message?: string): void {
  const e = HTTP_ERRORS[code];
  sendError(res, e.status, e.type, code, message ?? e.message);
}

/** The status and body of a core error, for a response or for an error event in a stream. */
export function coreErrorBody(err: CoreError): { status: number; body: { error: { message: string; type: string; code: string } } } {
  const e = CORE_ERRORS[err.code];
  return { status: e.status, body: { error: { message: restMessage(err), type: e.type, code: err.reason ?? e.code } } };
}

export function sendCoreError(res: Response, err: CoreError): void {
  if (err.retryAfterSeconds !== undefined) res.setHeader('Retry-After', String(Math.max(1, Math.ceil(err.retryAfterSeconds))));
  const { status, body } = coreErrorBody(err);
  res.status(status).json(body);
}

/** body-parser's error types, by what the client did wrong. */
const BODY_ERRORS: Record<string, HttpErrorCode> = {
  'entity.parse.failed': 'invalid_json',
  'entity.too.large': 'request_too_large',
  'encoding.unsupported': 'unsupported_media_type',
  'charset.unsupported': 'unsupported_media_type',
};

export function errorHandler(logger: Logger): ErrorRequestHandler {
  return (err: unknown, req, res, _next) => {
    if (res.headersSent) {
      res.destroy();
      return;
    }
    const core = toCoreError(err);
    if (core) return sendCoreError(res, core);
    const bodyError = BODY_ERRORS[(err as { type?: string }).type ?? ''];
    if (bodyError) return sendHttpError(res, bodyError);
    const status = (err as { status?: number }).status;
    if (typeof status === 'number' && status >= 400 && status < 500) {
      return sendError(res, status, 'invalid_request_error', 'invalid_request', 'The request could not be read.');
    }
    (req.log ?? logger).error({ err }, 'unhandled error');
    sendHttpError(res, 'internal_error');
  };
}
