import type { Logger } from 'pino';
import type { createCaller } from '../../core/router.ts';

export type CoreCaller = ReturnType<typeof createCaller>;

/** Where a job's workflow can be looked at: the Temporal Web UI and the namespace its workflows run in. */
export interface TemporalUi {
  /** The UI's base URL (TEMPORAL_UI_URL, or the embedded dev server's); no links without it. */
  uiUrl?: string | undefined;
  namespace: string;
}

/**
 * What every resolver gets, once per request: one core caller (its context forks the
 * EntityManager for this request), the admin who passed the door, and the Temporal UI links'
 * settings. The dataloaders are cached on this object by the dataloader plugin.
 */
export interface GraphQLContext {
  core: CoreCaller;
  admin: { id: string | null; role: 'viewer' | 'operator'; via: 'token' | 'session' | 'internal' };
  temporal: TemporalUi;
  logger: Logger;
}
