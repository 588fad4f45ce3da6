import { router } from '../../trpc.ts';

/** Operators' actions on accounts, wallets, keys, app connections and jobs: each audited. */
export const adminActionsRouter = router({});
