import { operatorProcedure, router } from '../../trpc.ts';
import {
  adjustBalance,
  adjustBalanceInput,
  cancelAnyGeneration,
  cancelAnyGenerationInput,
  endAccountSessions,
  endSessionsInput,
  refundGeneration,
  refundGenerationInput,
  revokeAnyAppConnection,
  revokeAnyKey,
  revokeAppInput,
  revokeKeyInput,
  setAccountDisabled,
  setAccountStateInput,
} from './actions.ts';

/** Operators' actions on accounts, wallets, keys, app connections and jobs: each audited. */
const act = operatorProcedure.use(({ ctx, next }) => next({ ctx: { ...ctx, act: { em: ctx.em, operator: ctx.principal, requestId: ctx.requestId } } }));

export const adminActionsRouter = router({
  adjustBalance: act.input(adjustBalanceInput).mutation(({ ctx, input }) => adjustBalance(ctx.act, input)),
  refundGeneration: act.input(refundGenerationInput).mutation(({ ctx, input }) => refundGeneration(ctx.act, ctx.deps, input)),
  cancelGeneration: act.input(cancelAnyGenerationInput).mutation(({ ctx, input }) => cancelAnyGeneration(ctx.act, ctx.deps, input)),
  revokeKey: act.input(revokeKeyInput).mutation(({ ctx, input }) => revokeAnyKey(ctx.act, input)),
  revokeAppConnection: act.input(revokeAppInput).mutation(({ ctx, input }) => revokeAnyAppConnection(ctx.act, input)),
  endSessions: act.input(endSessionsInput).mutation(({ ctx, input }) => endAccountSessions(ctx.act, input)),
  disableAccount: act.input(setAccountStateInput).mutation(({ ctx, input }) => setAccountDisabled(ctx.act, input, true)),
  enableAccount: act.input(setAccountStateInput).mutation(({ ctx, input }) => setAccountDisabled(ctx.act, input, false)),
});
