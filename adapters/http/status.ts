import type { CoreErrorCode } from '../../core/errors.ts';

/** The HTTP status of each core error, for every HTTP surface (REST answers, pages, the MCP door). */
export const HTTP_STATUS: Record<CoreErrorCode, number> = {
  invalid_request: 400,
  limit_reached: 400,
  unauthorized: 401,
  insufficient_balance: 402,
  negative_balance: 402,
  spend_cap_reached: 402,
  paid_account_required: 403,
  forbidden: 403,
  not_found: 404,
  gone: 410,
  conflict: 409,
  idempotency_conflict: 422,
  rate_limited: 429,
  upstream_failed: 502,
  upstream_timeout: 504,
  unavailable: 503,
};
