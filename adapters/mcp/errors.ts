import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { publicError, type CoreError } from '../../core/errors.ts';
import { HTTP_STATUS } from '../http/status.ts';

/**
 * The one place where MCP maps core errors: a domain error is a tool result with `isError`,
 * its message, and the same `type` and `code` as the REST error table (docs/errors.md), so an
 * agent can act on it, and the HTTP status REST would answer (402 for a spent balance or app
 * spend cap). Only protocol faults (a malformed request, an unknown tool) are
 * JSON-RPC errors.
 */
export function toolError(err: CoreError): CallToolResult {
  const error = publicError(err);
  const retry = err.retryAfterSeconds !== undefined ? ` Retry in ${Math.max(1, Math.ceil(err.retryAfterSeconds))} s.` : '';
  return {
    isError: true,
    content: [
      { type: 'text', text: `${error.message}${retry.length > 0 && !error.message.includes('Retry in') ? retry : ''}` },
      { type: 'text', text: JSON.stringify({ error, status: HTTP_STATUS[err.code] }) },
    ],
  };
}
