import type { MikroORM, EntityManager } from '@mikro-orm/postgresql';
import type { Logger } from 'pino';
import type { Micro } from './money/coins.ts';
import { LastUsedRecorder } from './keys/authenticate.ts';

/** Settings core needs, taken from the environment by the composition root. */
export interface CoreConfig {
  /** How long a reservation may stay open before the sweep releases it. */
  holdTtlSeconds: number;
  /** Coins given to the demo account created on the first start. */
  demoCoins: Micro;
}

/** Everything core needs from outside, wired once per process. */
export interface CoreDeps {
  orm: MikroORM;
  config: CoreConfig;
  logger: Logger;
  clock: () => Date;
  lastUsed: LastUsedRecorder;
}

export function createCoreDeps(args: { orm: MikroORM; config: CoreConfig; logger: Logger; clock?: () => Date }): CoreDeps {
  return { ...args, clock: args.clock ?? (() => new Date()), lastUsed: new LastUsedRecorder(args.logger) };
}

/** Who is calling: an API key's bearer token, or the operator (CLI, admin API). */
export type Caller = { kind: 'api'; bearer: string | null } | { kind: 'operator' } | { kind: 'public' };

export interface CoreContext {
  deps: CoreDeps;
  /** A fork of the EntityManager for this one request: never the global one. */
  em: EntityManager;
  caller: Caller;
  requestId: string | undefined;
}

export function createContext(deps: CoreDeps, caller: Caller, requestId?: string): CoreContext {
  return { deps, em: deps.orm.em.fork(), caller, requestId };
}
