import { GraphQLError } from './graphql-js.ts';
import type { Logger } from 'pino';
import { publicError, type CoreError, type CoreErrorCode } from '../../core/errors.ts';
import { toCoreError } from '../../core/trpc.ts';

/**
 * The one place where GraphQL maps errors. A core error becomes a GraphQL error with its
 * message and `extensions`: `code` (GraphQL's customary upper-case codes), and the `type` and
 * `reason` of the REST error table (docs/errors.md), with `param` when one value is at fault.
 * GraphQL's own errors (syntax, validation, the limits) pass as they are; anything else is a
 * bug: logged, and answered without its details.
 */
const GRAPHQL_CODE: Record<CoreErrorCode, string> = {
  invalid_request: 'BAD_USER_INPUT',
  limit_reached: 'BAD_USER_INPUT',
  unauthorized: 'UNAUTHENTICATED',
  insufficient_balance: 'INSUFFICIENT_BALANCE',
  negative_balance: 'NEGATIVE_BALANCE',
  spend_cap_reached: 'INSUFFICIENT_BALANCE',
  paid_account_required: 'FORBIDDEN',
  forbidden: 'FORBIDDEN',
  not_found: 'NOT_FOUND',
  gone: 'GONE',
  conflict: 'CONFLICT',
  idempotency_conflict: 'CONFLICT',
  rate_limited: 'RATE_LIMITED',
  upstream_failed: 'UPSTREAM_ERROR',
  upstream_timeout: 'UPSTREAM_ERROR',
  unavailable: 'SERVICE_UNAVAILABLE',
};

export function coreExtensions(err: CoreError) {
  const { type, code: reason } = publicError(err);
  return { code: GRAPHQL_CODE[err.code], type, reason, ...(err.param ? { param: err.param } : {}) };
}

/** An error answered before GraphQL runs (the door, the body parser): the GraphQL error shape, no schema revealed. */
export function requestErrorBody(message: string, code: string, extra: Record<string, unknown> = {}) {
  return { errors: [{ message, extensions: { code, ...extra } }] };
}

/** Yoga's `maskError`: every error of a result goes through here. */
export function maskError(logger: Logger) {
  return (error: unknown): Error => {
    const located = error instanceof GraphQLError ? error : undefined;
    const original = located ? located.originalError : error;
    if (located && (original === undefined || original === null)) return located;
    if (original instanceof GraphQLError) return relocated(original.message, original.extensions, located);
    const core = toCoreError(original);
    if (core) return relocated(core.message, coreExtensions(core), located);
    logger.error({ err: original, path: located?.path }, 'graphql resolver failed');
    return relocated('Internal server error. The request id is in the x-request-id header.', { code: 'INTERNAL_SERVER_ERROR' }, located);
  };
}

function relocated(message: string, extensions: Record<string, unknown>, at: GraphQLError | undefined): GraphQLError {
  return new GraphQLError(message, { nodes: at?.nodes ?? null, path: at?.path ?? null, extensions });
}
