import type { IncomingHttpHeaders } from 'node:http';
import { ProviderError } from '../../core/ports.ts';
import { retryAfterMs } from './media/upstream-limits.ts';
import { UPSTREAM_SAYS } from './upstream-words.ts';

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
  // Our words, the same as any chat upstream's (upstream-words.ts): the customer never reads the vendor's name.
  if (status === 400 && isContentPolicy(message)) return new ProviderError('refused', UPSTREAM_SAYS.contentPolicy, status, { code: 'content_policy' });
  if (status === 400 || status === 413) return new ProviderError('refused', UPSTREAM_SAYS.invalid, status, { code: 'invalid_input' });
  if (status === 429) return new ProviderError('failed', UPSTREAM_SAYS.rateLimited, status, { retryAfterMs: retryAfterMs(webHeaders(headers)) });
  if (status === 529 || type === 'overloaded_error') return new ProviderError('failed', UPSTREAM_SAYS.overloaded, status, { retryAfterMs: retryAfterMs(webHeaders(headers)) });
  if (status === 401 || status === 403) return new ProviderError('failed', UPSTREAM_SAYS.keyRefused, status);
  if (status === 404) return new ProviderError('failed', UPSTREAM_SAYS.unknownModel, status);
  // 402 (billing), 500 (api_error), 504 (timeout_error) and any other: the status, as for any upstream.
  return new ProviderError('failed', UPSTREAM_SAYS.status(status), status);
}

/** An `error` event in a stream that had started: a failure whatever its type (overloaded, api_error). */
export function anthropicStreamError(event: { error?: { type?: unknown; message?: unknown } }, log: AnthropicLog | undefined): ProviderError {
  const type = typeof event.error?.type === 'string' ? event.error.type : 'error';
  log?.({ type, message: event.error?.message }, 'Anthropic sent an error event');
  return new ProviderError('failed', type === 'overloaded_error' ? UPSTREAM_SAYS.overloaded : UPSTREAM_SAYS.failedWhileAnswering);
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
