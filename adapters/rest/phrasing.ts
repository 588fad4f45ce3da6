import type { CoreError } from '../../core/errors.ts';

/**
 * How REST phrases some core errors: core's messages name no transport, and a REST client is
 * best helped by the route or header to use. Keyed by the error's stable `reason`.
 */
const REST_HINTS: Record<string, (err: CoreError) => string> = {
  invalid_api_key: () => 'Send it as "Authorization: Bearer <key>".',
  model_not_found: () => 'GET /api/v1/models lists the models.',
  wrong_endpoint: (err) => (err.params.model_type === 'text' ? 'Use POST /api/v1/chat/completions.' : 'Start a job with POST /api/v1/generations.'),
};

export function restMessage(err: CoreError): string {
  if (err.code === 'idempotency_conflict') {
    return 'This Idempotency-Key was already used with a different request body. Use a new key for a new request.';
  }
  const hint = err.reason ? REST_HINTS[err.reason] : undefined;
  return hint ? `${err.message} ${hint(err)}` : err.message;
}
