import { z } from 'zod';
import { accountRef, accountView, createAccount, createAccountInput, resolveAccount } from './accounts/accounts.ts';
import { createKey, createKeyInput, keyIdInput, listKeys, revokeKey } from './keys/keys.ts';
import { creditCoins, creditCoinsInput } from './money/credit-coins.ts';
import { historyInput, listHistory } from './money/ledger.ts';
import { balanceView, getBalance } from './money/wallet.ts';
import { releaseExpiredHolds } from './money/sweep.ts';
import { deleteOldIdempotencyKeys, idempotencyKeySchema } from './idempotency.ts';
import { createFile, getFile, readFileContent, type SpooledUpload } from './files/files.ts';
import { deliverJobWebhook, webhookSecret } from './webhooks/webhooks.ts';
import { cancelGeneration, createGeneration, getGeneration } from './generations/generations.ts';
import { beginJob, cancelUpstream, completeJob, deleteJobResult, failJob, pollJob, readJobOutput, staleQueuedJobs, storeJobResult, submitJob } from './generations/lifecycle.ts';
import { createGenerationCall, generationIdInput } from './generations/schema.ts';
import { checkReady } from './health.ts';
import { modelIdInput, modelTypeFilter, syncModels, validateCatalog } from './catalog/catalog.ts';
import { modelView } from './catalog/views.ts';
import { chatCompletion } from './chat/complete.ts';
import { chatRequestSchema } from './chat/schema.ts';
import { apiProcedure, chatProcedure, createCallerFactory, operatorProcedure, publicProcedure, router } from './trpc.ts';

const forAccount = z.object({ account: accountRef });

/**
 * The use cases of the service. Procedures only wire input to plain functions; adapters
 * (REST, MCP, GraphQL, CLI) call them in-process through `createCaller`.
 */
export const appRouter = router({
  health: router({
    ready: publicProcedure.query(({ ctx }) => checkReady(ctx.em)),
  }),

  models: router({
    list: apiProcedure.input(modelTypeFilter).query(async ({ ctx, input }) => ({
      object: 'list' as const,
      data: (await ctx.deps.catalog.list(ctx.em, input.type)).map((m) => modelView(m, ctx.deps.config.apiPricePercent)),
    })),
    get: apiProcedure
      .input(modelIdInput)
      .query(async ({ ctx, input }) => modelView(await ctx.deps.catalog.get(ctx.em, input.id), ctx.deps.config.apiPricePercent, { withExample: true })),
  }),

  chat: router({
    complete: chatProcedure
      .input(chatRequestSchema)
      .mutation(({ ctx, input }) => chatCompletion(ctx.deps, ctx.em, ctx.principal, input, ctx.signal)),
  }),

  generations: router({
    create: apiProcedure
      .input(createGenerationCall)
      .mutation(({ ctx, input }) => createGeneration(ctx.deps, ctx.em, ctx.principal, input)),
    get: apiProcedure.input(generationIdInput).query(({ ctx, input }) => getGeneration(ctx.deps, ctx.em, ctx.principal, input.id)),
    cancel: apiProcedure.input(generationIdInput).mutation(({ ctx, input }) => cancelGeneration(ctx.deps, ctx.em, ctx.principal, input.id)),
    /** The bytes behind a signed result link: no API key, the signature is the credential. */
    output: publicProcedure
      .input(z.object({ id: z.string().max(100), expires: z.unknown(), signature: z.unknown() }))
      .query(({ ctx, input }) => readJobOutput(ctx.deps, ctx.em, input.id, input.expires, input.signature)),
  }),

  /** The steps of a job's workflow, called by its activities. */
  jobs: router({
    begin: operatorProcedure.input(z.object({ id: z.string() })).mutation(({ ctx, input }) => beginJob(ctx.deps, ctx.em, input.id)),
    submit: operatorProcedure.input(z.object({ id: z.string() })).mutation(({ ctx, input }) => submitJob(ctx.deps, ctx.em, input.id)),
    poll: operatorProcedure
      .input(z.object({ provider: z.string(), handle: z.string() }))
      .query(({ ctx, input }) => pollJob(ctx.deps, input.provider, input.handle)),
    store: operatorProcedure
      .input(z.object({ id: z.string(), provider: z.string(), handle: z.string() }))
      .mutation(({ ctx, input }) => storeJobResult(ctx.deps, input.id, input.provider, input.handle)),
    complete: operatorProcedure
      .input(z.object({ id: z.string(), output: z.object({ key: z.string(), mime_type: z.string(), bytes: z.number(), filename: z.string() }) }))
      .mutation(({ ctx, input }) => completeJob(ctx.deps, ctx.em, input.id, input.output)),
    fail: operatorProcedure
      .input(z.object({ id: z.string(), error: z.object({ message: z.string(), code: z.string() }) }))
      .mutation(({ ctx, input }) => failJob(ctx.em, input.id, input.error)),
    cancelUpstream: operatorProcedure
      .input(z.object({ provider: z.string(), handle: z.string() }))
      .mutation(({ ctx, input }) => cancelUpstream(ctx.deps, input.provider, input.handle)),
    deliverWebhook: operatorProcedure.input(z.object({ id: z.string() })).mutation(({ ctx, input }) => deliverJobWebhook(ctx.deps, ctx.em, input.id)),
    deleteResult: operatorProcedure.input(z.object({ id: z.string() })).mutation(({ ctx, input }) => deleteJobResult(ctx.deps, ctx.em, input.id)),
    /** Starts the workflow of jobs left queued (a crash between accepting a job and starting it). */
    restartStale: operatorProcedure.mutation(async ({ ctx }) => {
      const ids = await staleQueuedJobs(ctx.em, 30);
      for (const id of ids) await ctx.deps.generations.start(id);
      return { started: ids.length };
    }),
  }),

  files: router({
    create: apiProcedure
      .input(z.object({ upload: z.custom<SpooledUpload>((v) => typeof v === 'object' && v !== null && 'path' in v), idempotency_key: idempotencyKeySchema.optional() }))
      .mutation(({ ctx, input }) => createFile(ctx.deps, ctx.em, ctx.principal, input.upload, input.idempotency_key)),
    get: apiProcedure.input(z.object({ id: z.string().max(100) })).query(({ ctx, input }) => getFile(ctx.deps, ctx.em, ctx.principal, input.id)),
    /** The bytes behind a signed file link: no API key, the signature is the credential. */
    content: publicProcedure
      .input(z.object({ id: z.string().max(100), expires: z.unknown(), signature: z.unknown() }))
      .query(({ ctx, input }) => readFileContent(ctx.deps, ctx.em, input.id, input.expires, input.signature)),
  }),

  webhooks: router({
    /** The account's signing secret for webhooks (made on first use). */
    secret: apiProcedure.query(async ({ ctx }) => ({ object: 'webhook_secret' as const, secret: await webhookSecret(ctx.em, ctx.principal.accountId) })),
  }),

  holds: router({
    /** Releases reservations past their expiry; run by the hold-sweep Temporal Schedule. */
    releaseExpired: operatorProcedure.mutation(async ({ ctx }) => ({
      released: await releaseExpiredHolds(ctx.em, ctx.deps.clock()),
      forgottenIdempotencyKeys: await deleteOldIdempotencyKeys(ctx.em),
    })),
  }),

  catalog: router({
    /** Makes the models table match a catalog file (parsed, not yet validated). */
    sync: operatorProcedure.input(z.object({ catalog: z.unknown() })).mutation(async ({ ctx, input }) => {
      const result = await syncModels(ctx.em, validateCatalog(input.catalog, ctx.deps.config.apiPricePercent));
      ctx.deps.catalog.invalidate();
      return result;
    }),
  }),

  accounts: router({
    create: operatorProcedure
      .input(createAccountInput)
      .mutation(async ({ ctx, input }) => accountView(await createAccount(ctx.em, input))),
    get: operatorProcedure.input(forAccount).query(async ({ ctx, input }) => accountView(await resolveAccount(ctx.em, input.account))),
  }),

  wallet: router({
    balance: apiProcedure.query(async ({ ctx }) => balanceView(await getBalance(ctx.em, ctx.principal.accountId))),
    history: apiProcedure.input(historyInput).query(({ ctx, input }) => listHistory(ctx.em, ctx.principal.accountId, input)),
    balanceOf: operatorProcedure.input(forAccount).query(async ({ ctx, input }) => {
      const account = await resolveAccount(ctx.em, input.account);
      return { account: account.id, ...balanceView(await getBalance(ctx.em, account.id)) };
    }),
    topUp: operatorProcedure.input(creditCoinsInput).mutation(({ ctx, input }) => creditCoins(ctx.em, 'topup', input)),
    grantSubscription: operatorProcedure
      .input(creditCoinsInput)
      .mutation(({ ctx, input }) => creditCoins(ctx.em, 'subscription_grant', input)),
  }),

  keys: router({
    create: operatorProcedure.input(forAccount.extend(createKeyInput.shape)).mutation(async ({ ctx, input }) => {
      const account = await resolveAccount(ctx.em, input.account);
      return { account: account.id, ...(await createKey(ctx.em, account.id, input)) };
    }),
    list: operatorProcedure.input(forAccount).query(async ({ ctx, input }) => {
      const account = await resolveAccount(ctx.em, input.account);
      return listKeys(ctx.em, account.id);
    }),
    revoke: operatorProcedure.input(keyIdInput).mutation(({ ctx, input }) => revokeKey(ctx.em, input.id)),
    /** Checks the caller's key (and counts the request): transports call it before costly work such as reading an upload. */
    whoami: apiProcedure.query(({ ctx }) => ({ account: ctx.principal.accountId, key: ctx.principal.keyId })),
  }),
});

export type AppRouter = typeof appRouter;
export const createCaller = createCallerFactory(appRouter);
