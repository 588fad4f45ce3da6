import { createContext, type CoreDeps } from '../core/context.ts';
import { createCaller } from '../core/router.ts';

/**
 * Activities call core through the same router as every adapter, as the operator. Built by a
 * factory so the worker passes real dependencies and tests pass their own.
 */
export function createActivities(deps: CoreDeps) {
  const core = () => createCaller(createContext(deps, { kind: 'operator' }));
  return {
    async releaseExpiredHolds(): Promise<number> {
      return (await core().holds.releaseExpired()).released;
    },
  };
}

export type Activities = ReturnType<typeof createActivities>;
