import type { IncomingHttpHeaders } from 'node:http';
import { ProviderError } from '../../core/ports.ts';
import { retryAfterMs } from './media/upstream-limits.ts';

/**
 * Anthropic's errors (`{type: 'error', error: {type, message}}`, docs/providers.md,
 * "Anthropic") as ProviderErrors in our words. What Anthropic said goes to the operator's log,
 * never to the customer. Our key refused (401, 403), billing (402) and an unknown model (404)
 * are failures, not refusals: another route may have a working key or the model.
 */
export type AnthropicLog = (fields: object, message: string) => void;

export function anthropicHttpError(status: number, headers: IncomingHttpHeaders, text: string, log: AnthropicLog | undefined): ProviderError {
  const { type, message } = errorBody(text);
  log?.({ status, type, message: message ?? text.slice(0, 500), requestId: header(headers, 'request-id') }, 'Anthropic refused a request');
  if (status === 400 && isContentPolicy(message)) {
    return new ProviderError('refused', 'Anthropic refused the request under its content policy', status, { code: 'content_policy' });
  }
  if (status === 400 || status === 413) {
    const why = status === 413 ? 'the request is larger than Anthropic accepts' : 'Anthropic found the request invalid';
    return new ProviderError('refused', why, status, { code: 'invalid_input' });
  }
  if (status === 429) {
    return new ProviderError('failed', 'Anthropic is rate limiting our requests', status, { retryAfterMs: retryAfterMs(webHeaders(headers)) });
  }
  if (status === 529 || type === 'overloaded_error') return new ProviderError('failed', 'Anthropic is overloaded', status);
  if (status === 401 || status === 403) return new ProviderError('failed', 'Anthropic did not accept our key', status);
  if (status === 402) return new ProviderError('failed', 'Anthropic refused to bill our account', status);
  if (status === 404) return new ProviderError('failed', 'Anthropic does not know this model', status);
  if (status === 504 || type === 'timeout_error') return new ProviderError('failed', 'Anthropic timed out', status);
  return new ProviderError('failed', `Anthropic answered ${status}`, status);
}

/** An `error` event in a stream that had started: a failure whatever its type (overloaded, api_error). */
export function anthropicStreamError(event: { error?: { type?: unknown; message?: unknown } }, log: AnthropicLog | undefined): ProviderError {
  const type = typeof event.error?.type === 'string' ? event.error.type : 'error';
  log?.({ type, message: event.error?.message }, 'Anthropic sent an error event');
  return new ProviderError('failed', type === 'overloaded_error' ? 'Anthropic is overloaded' : 'Anthropic failed while answering');
}

function errorBody(text: string): { type: string | undefined; message: string | undefined } {
  try {
    const parsed = JSON.parse(text) as { error?: { type?: unknown; message?: unknown } };
    const type = parsed.error?.type;
    const message = parsed.error?.message;
    return { type: typeof type === 'string' ? type : undefined, message: typeof message === 'string' ? message : undefined };
  } catch {
    return { type: undefined, message: undefined };
  }
}

/** Anthropic names a blocked request in the message of an invalid_request_error. */
function isContentPolicy(message: string | undefined): boolean {
  return message !== undefined && /content (filtering )?policy|usage policy/i.test(message);
}

function header(headers: IncomingHttpHeaders, name: string): string | undefined {
  const value = headers[name];
  return Array.isArray(value) ? value[0] : value;
}

/** Node's header object as the web `Headers` the shared Retry-After reader takes (`retry-after`, `retry-after-ms`, capped at 10 minutes). */
function webHeaders(raw: IncomingHttpHeaders): Headers {
  const headers = new Headers();
  for (const [k, v] of Object.entries(raw)) if (typeof v === 'string') headers.set(k, v);
  return headers;
}
