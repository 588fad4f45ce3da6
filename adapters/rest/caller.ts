import type { Request, Response } from 'express';
import { createContext, type CallMeta, type CoreDeps } from '../../core/context.ts';
import type { RateLimitState } from '../../core/ports.ts';
import { createCaller } from '../../core/router.ts';

/** The bearer token of `Authorization: Bearer <key>`, or null. Keys in query strings are never read. */
export function bearerToken(req: Request): string | null {
  const header = req.headers.authorization;
  if (!header) return null;
  const match = /^Bearer[ ]+(\S+)\s*$/i.exec(header);
  return match ? match[1]! : null;
}

export type CoreCaller = ReturnType<typeof createCaller>;

/**
 * Runs `fn` against the core, in-process, on behalf of the key in this request. The call is
 * aborted when the client disconnects, and the rate-limit state it reports becomes the
 * x-ratelimit-* headers, on every answer (a 429 included).
 */
export async function callApi<T>(deps: CoreDeps, req: Request, res: Response, fn: (core: CoreCaller) => Promise<T>): Promise<T> {
  // One meta per request: a route that calls core twice counts once against the rate limit.
  const meta: CallMeta = ((res.locals.callMeta as CallMeta | undefined) ??= {});
  const aborted = new AbortController();
  res.once('close', () => {
    if (!res.writableFinished) aborted.abort(new Error('client disconnected'));
  });
  const core = createCaller(createContext(deps, { kind: 'bearer', token: bearerToken(req) }, { requestId: String(req.id), meta, signal: aborted.signal }));
  try {
    return await fn(core);
  } finally {
    if (meta.rateLimit && !res.headersSent) setRateLimitHeaders(res, meta.rateLimit);
  }
}

export function publicCaller(deps: CoreDeps, req: Request): CoreCaller {
  return createCaller(createContext(deps, { kind: 'none' }, { requestId: String(req.id) }));
}

/** OpenAI's header names; the reset is a duration such as "42s". */
function setRateLimitHeaders(res: Response, state: RateLimitState): void {
  res.setHeader('x-ratelimit-limit-requests', String(state.limit));
  res.setHeader('x-ratelimit-remaining-requests', String(state.remaining));
  res.setHeader('x-ratelimit-reset-requests', `${state.resetSeconds}s`);
}
