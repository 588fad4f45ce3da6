import type { ViteUserConfig } from 'vitest/config';

/**
 * Resolve packages as Node does in production, without Vite's `development` condition.
 * graphql 17 ships a development build under that condition: the sources vitest transforms
 * would load `graphql/__dev__` while the packages Node loads itself (Pothos, yoga) load
 * `graphql/index.mjs`, and graphql refuses two copies of itself in one process.
 */
export const nodeConditions: Pick<ViteUserConfig, 'resolve' | 'ssr'> = {
  resolve: { conditions: ['module-sync', 'node'] },
  ssr: { resolve: { conditions: ['module-sync', 'node'], externalConditions: ['module-sync', 'node'] } },
};
