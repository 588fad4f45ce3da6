import { invalid } from '../../core/errors.ts';

/** The JSON body as the fields of a core call: it must be an object. */
export function jsonObject(body: unknown): Record<string, unknown> {
  if (typeof body === 'object' && body !== null && !Array.isArray(body)) return body as Record<string, unknown>;
  throw invalid('body', 'The request body must be a JSON object.', 'invalid_body');
}
