/**
 * The domain errors of the service: a closed union keyed by a stable code, with a finer
 * `reason` and the parameters an adapter needs to phrase it. Core throws only these, and its
 * messages name no transport (no routes, headers or status codes): each adapter maps them to
 * its own shape in one table (REST: adapters/rest/errors.ts), and may add its own hints.
 */
export type CoreErrorCode =
  | 'invalid_request' // a value the client sent is wrong; `param` names it
  | 'unauthorized' // missing, malformed, unknown or revoked key: one answer for all four
  | 'insufficient_balance'
  | 'paid_account_required'
  | 'forbidden' // a signed link that is expired or tampered with
  | 'not_found'
  | 'conflict'
  | 'idempotency_conflict' // an idempotency key reused with another request
  | 'limit_reached' // a per-account quota, such as the 10 active keys
  | 'rate_limited'
  | 'upstream_failed' // the model provider answered with an error
  | 'upstream_timeout' // the model provider did not answer in time
  | 'unavailable'; // a dependency (the database) cannot be reached

export interface CoreErrorDetails {
  /** The request field the error is about, as a dotted path (`messages.0.content`). */
  param?: string;
  /** A more precise, stable reason within the code (`account_not_found`, `key_limit_reached`). */
  reason?: string;
  /** Seconds after which a retry may succeed (rate limits). */
  retryAfterSeconds?: number;
  /** Values an adapter may use to phrase the error its own way (`{ model_type: 'image' }`). */
  params?: Record<string, string | number>;
}

export class CoreError extends Error {
  readonly code: CoreErrorCode;
  readonly param: string | undefined;
  readonly reason: string | undefined;
  readonly retryAfterSeconds: number | undefined;
  readonly params: Record<string, string | number>;

  constructor(code: CoreErrorCode, message: string, details: CoreErrorDetails = {}) {
    super(message);
    this.name = 'CoreError';
    this.code = code;
    this.param = details.param;
    this.reason = details.reason;
    this.retryAfterSeconds = details.retryAfterSeconds;
    this.params = details.params ?? {};
  }
}

export const invalid = (param: string, message: string, reason = 'invalid_value') =>
  new CoreError('invalid_request', message, { param, reason });

export const notFound = (reason: string, message: string, param?: string) =>
  new CoreError('not_found', message, { reason, ...(param ? { param } : {}) });

const UNAUTHORIZED = {
  api_key: { message: 'Invalid or missing API key.', reason: 'invalid_api_key' },
  session: { message: 'You are not signed in, or your session has ended.', reason: 'invalid_session' },
  admin: { message: 'Invalid or missing admin token.', reason: 'invalid_admin_token' },
} as const;

/** The one answer for every failure of a credential, so a caller learns nothing about which it was. */
export const unauthorized = (credential: keyof typeof UNAUTHORIZED = 'api_key') =>
  new CoreError('unauthorized', UNAUTHORIZED[credential].message, { reason: UNAUTHORIZED[credential].reason });

export function isCoreError(err: unknown): err is CoreError {
  return err instanceof CoreError;
}
