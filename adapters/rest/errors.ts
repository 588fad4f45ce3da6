import type { ErrorRequestHandler, Response } from 'express';
import type { Logger } from 'pino';
import { publicError, type CoreError } from '../../core/errors.ts';
import { sendErrorBody, type ErrorObject } from '../http/error-body.ts';
import { HTTP_STATUS } from '../http/status.ts';
import { toCoreError } from '../../core/trpc.ts';
import { restMessage } from './phrasing.ts';

/**
 * How this adapter answers errors, documented in docs/errors.md: the status of each core error
 * (adapters/http/status.ts), its type and code (core's ERROR_VOCABULARY) and REST's own
 * phrasing. Every answer has the shape {"error":{"message","type","param","code"}}: `param` is the
 * request field concerned (a dotted path such as `messages.0.content`, as the zod path names it), or null.
 */

/** Errors raised by the HTTP layer itself, before any use case runs. */
const HTTP_ERRORS = {
  invalid_json: { status: 400, type: 'invalid_request_error', message: 'The request body is not valid JSON.' },
  incomplete_body: {
    status: 400,
    type: 'invalid_request_error',
    message: 'The request body ended before its Content-Length (or its last chunk) arrived: the client closed its side of the connection early.',
  },
  request_too_large: { status: 413, type: 'invalid_request_error', message: 'The request body is too large.' },
  unsupported_media_type: { status: 415, type: 'invalid_request_error', message: 'The request body encoding is not supported.' },
  method_not_allowed: { status: 405, type: 'invalid_request_error', message: 'Method not allowed.' },
  internal_error: { status: 500, type: 'server_error', message: 'Internal server error. The request id is in the x-request-id header.' },
} as const;
export type HttpErrorCode = keyof typeof HTTP_ERRORS;

export function sendError(res: Response, status: number, type: string, code: string, message: string, param: string | null = null): void {
  sendErrorBody(res, status, { message, type, param, code });
}

export function sendHttpError(res: Response, code: HttpErrorCode, message?: string): void {
  const e = HTTP_ERRORS[code];
  sendError(res, e.status, e.type, code, message ?? e.message);
}

/** The status and body of a core error, for a response or for an error event in a stream. */
export function coreErrorBody(err: CoreError): { status: number; body: { error: ErrorObject } } {
  const { message, type, code } = publicError(err, restMessage(err));
  return { status: HTTP_STATUS[err.code], body: { error: { message, type, param: err.param ?? null, code } } };
}

export function sendCoreError(res: Response, err: CoreError): void {
  if (err.retryAfterSeconds !== undefined) res.setHeader('Retry-After', String(Math.max(1, Math.ceil(err.retryAfterSeconds))));
  const { status, body } = coreErrorBody(err);
  sendErrorBody(res, status, body.error);
}

/** body-parser's error types, by what the client did wrong. */
const BODY_ERRORS: Record<string, HttpErrorCode> = {
  'entity.parse.failed': 'invalid_json',
  // The connection ended mid-body (raw-body); the server answers it first (adapters/http/server.ts), where it still can.
  'request.aborted': 'incomplete_body',
  'request.size.invalid': 'incomplete_body',
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
