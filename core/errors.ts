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
  | 'negative_balance' // the purchased pocket is below zero (a refund or dispute took back spent coins)
  | 'spend_cap_reached' // an app connection has spent the cap its person set, or an API key its spend limit (reason key_spend_limit_reached)
  | 'paid_account_required'
  | 'forbidden' // a signed link that is expired or tampered with; a model the API key may not use (reason model_not_allowed)
  | 'not_found'
  | 'gone' // a link that worked once and no longer does: an invitation used, expired or revoked
  | 'conflict'
  | 'idempotency_conflict' // an idempotency key reused with another request
  | 'limit_reached' // a per-account quota, such as the 10 active keys
  | 'rate_limited'
  | 'upstream_failed' // the model provider answered with an error
  | 'upstream_timeout' // the model provider did not answer in time
  | 'unavailable'; // a dependency (the database) cannot be reached

/**
 * The public `type` of each error and the `code` a client sees when the error has no finer
 * reason: the same on every surface (REST, MCP, CLI), OpenAI's vocabulary, in docs/errors.md.
 */
export const ERROR_VOCABULARY: Record<CoreErrorCode, { type: string; code: string }> = {
  invalid_request: { type: 'invalid_request_error', code: 'invalid_value' },
  limit_reached: { type: 'invalid_request_error', code: 'limit_reached' },
  unauthorized: { type: 'authentication_error', code: 'invalid_api_key' },
  insufficient_balance: { type: 'billing_error', code: 'insufficient_balance' },
  negative_balance: { type: 'billing_error', code: 'negative_balance' },
  spend_cap_reached: { type: 'billing_error', code: 'spend_cap_reached' },
  paid_account_required: { type: 'permission_error', code: 'paid_account_required' },
  forbidden: { type: 'permission_error', code: 'forbidden' },
  not_found: { type: 'not_found_error', code: 'not_found' },
  gone: { type: 'invalid_request_error', code: 'gone' },
  conflict: { type: 'invalid_request_error', code: 'conflict' },
  idempotency_conflict: { type: 'idempotency_error', code: 'idempotency_key_reused' },
  rate_limited: { type: 'rate_limit_error', code: 'rate_limit_exceeded' },
  upstream_failed: { type: 'upstream_error', code: 'upstream_error' },
  upstream_timeout: { type: 'upstream_error', code: 'upstream_timeout' },
  unavailable: { type: 'server_error', code: 'service_unavailable' },
};

/** An error as every adapter shows it: `{message, type, code}` (the adapter may phrase the message its own way). */
export function publicError(err: CoreError, message = err.message): { message: string; type: string; code: string } {
  const v = ERROR_VOCABULARY[err.code];
  return { message, type: v.type, code: err.reason ?? v.code };
}


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
  app_token: { message: 'The access token is invalid, expired or revoked, or is for another resource. Sign in again.', reason: 'invalid_token' },
} as const;

/**
 * An API key past its expiry date. Only a caller holding the secret learns this (the key's hash
 * matched), so the message may say why: the owner should make or extend a key, not debug one.
 */
export const keyExpired = (at: Date) =>
  new CoreError('unauthorized', `This API key expired on ${at.toISOString()}. Its owner can set a later expiry date or create a new key.`, { reason: 'api_key_expired' });

/** A key its owner switched off (it can be switched on again): only its holder learns why. */
export const keyDisabled = () =>
  new CoreError('unauthorized', 'This API key is disabled. Its owner can enable it again, or create a new key.', { reason: 'api_key_disabled' });

/** The one answer for every failure of a credential, so a caller learns nothing about which it was. */
export const unauthorized = (credential: keyof typeof UNAUTHORIZED = 'api_key') =>
  new CoreError('unauthorized', UNAUTHORIZED[credential].message, { reason: UNAUTHORIZED[credential].reason });

export function isCoreError(err: unknown): err is CoreError {
  return err instanceof CoreError;
}
