import type { Request } from 'express';
import { createContext, type Caller, type CoreDeps } from '../../core/context.ts';
import { createCaller } from '../../core/router.ts';

/** The bearer token of `Authorization: Bearer <key>`, or null. Keys in query strings are never read. */
export function bearerToken(req: Request): string | null {
  const header = req.headers.authorization;
  if (!header) return null;
  const match = /^Bearer[ ]+(\S+)\s*$/i.exec(header);
  return match ? match[1]! : null;
}

export type CoreCaller = ReturnType<typeof createCaller>;

/** The core, called in-process on behalf of the key in this request. */
export function apiCaller(deps: CoreDeps, req: Request): CoreCaller {
  return coreCaller(deps, req, { kind: 'api', bearer: bearerToken(req) });
}

export function publicCaller(deps: CoreDeps, req: Request): CoreCaller {
  return coreCaller(deps, req, { kind: 'public' });
}

function coreCaller(deps: CoreDeps, req: Request, caller: Caller): CoreCaller {
  return createCaller(createContext(deps, caller, String(req.id)));
}
