import { z } from 'zod';
import { revokeAnyKey, revokeKeyInput } from './admin/actions/actions.ts';
import { audited, reasonSchema } from './admin/audit.ts';
import { adminRouter } from './admin/router.ts';
import { appConnectionIdInput, listAppConnections, liveAppConnection, liveAppConnectionInput, revokeAppConnection } from './apps/connections.ts';
import { accountOverview } from './accounts/account-overview.ts';
import { accountRef, accountView, createAccount, createAccountInput, getAccount } from './accounts/accounts.ts';
import { historyCsv, historyCsvInput } from './accounts/history-csv.ts';
import { accountUsage, usageInput } from './accounts/usage.ts';
import { loginLinkFor, setPasswordInput, setPasswordFor } from './accounts/operator-access.ts';
import { lowBalanceNoticeInput, setLowBalanceNotice } from './accounts/low-balance.ts';
import {
  callerOf,
  changePassword,
  changePasswordInput,
  checkResetLink,
  loginTokenInput,
  redeemLoginLink,
  requestPasswordReset,
  resendVerification,
  resetPassword,
  resetPasswordInput,
  resetRequestInput,
  signIn,
  signInInput,
  signOut,
  signUp,
  signUpInput,
  verifyEmail,
} from './accounts/sign-in.ts';
import { adminTokenIdInput, createAdminToken, createAdminTokenInput, revokeAdminToken } from './auth/admin-tokens.ts';
import { syncCatalog } from './admin/models/sync-catalog.ts';
import { modelIdInput, modelTypeFilter } from './catalog/catalog.ts';
import { getModel, listModels } from './catalog/read-models.ts';
import { chatCompletion } from './chat/complete.ts';
import { completionIdInput, readCompletionRecord } from './chat/records.ts';
import { chatRequestSchema } from './chat/schema.ts';
import { createResponse, responsesRequestSchema } from './chat/responses.ts';
import { createFile, type SpooledUpload } from './files/files.ts';
import { importFile, importFileInput } from './files/import-file.ts';
import { getFile, readFileContent } from './files/read-file.ts';
import { cancelGeneration } from './generations/cancel-generation.ts';
import { createGeneration } from './generations/create-generation.ts';
import { listGenerations, listGenerationsInput } from './generations/list-generations.ts';
import { getGeneration, readGenerationOutput, waitForGeneration, waitInput } from './generations/read-generation.ts';
import { createGenerationInput, generationIdInput } from './generations/schema.ts';
import { checkReady, operationalFigures } from './health.ts';
import { idempotencyKeySchema } from './idempotency.ts';
import { createKeyInput, keyIdInput, keyInfo, updateKeyInput, type LimitChecks } from './keys/keys.ts';
import { createManagedKey, createManagedKeyInput, getManagedKey, listManagedKeys, listManagedKeysInput, revokeManagedKey, updateManagedKey } from './organizations/managed-keys.ts';
import { createOrganization, createOrganizationInput, deleteOrganization, getOrganization, listOrganizations, organizationIdInput } from './organizations/organizations.ts';
import { listMembers, memberRef, removeMember, updateMember, updateMemberInput } from './organizations/members.ts';
import { acceptInvitation, createInvitation, createInvitationInput, invitationRef, invitationTokenInput, listInvitations, readInvitation, readInvitationInput, revokeInvitation } from './organizations/invitations.ts';
import { organizationUsage, organizationUsageCsv, organizationUsageInput, ownMembership } from './organizations/usage.ts';
import { createKeyFor, listKeysOf, operatorKeyOptions } from './operators/account-keys.ts';
import { balanceOfAccount } from './operators/account-balance.ts';
import { creditCoins, creditCoinsInput } from './operators/credit-account.ts';
import { historyInput, listHistory } from './money/history.ts';
import { approveAuthorization, approveInput, authorizationRequestInput, checkAuthorization, denyAuthorization } from './oauth/authorize.ts';
import { clientIdSchema, registerClient, registerClientInput, resolveClient } from './oauth/clients.ts';
import { exchangeCode, exchangeCodeInput, refreshInput, refreshTokens, revokeToken, revokeTokenInput } from './oauth/tokens.ts';
import { balanceView, getBalance } from './money/wallet.ts';
import { createTopUpCheckout, topUpCheckoutInput } from './payments/create-checkout.ts';
import { receivePaymentWebhook, webhookInput } from './payments/receive-webhook.ts';
import { billingOverview, createPortalLink, createSubscriptionCheckout, subscriptionCheckoutInput, topUpStatus, topUpStatusInput } from './payments/billing.ts';
import { fillReceipts, historyWithReceipts } from './payments/receipts.ts';
import { autoTopUpInput, configureAutoTopUp, readAutoTopUp } from './payments/auto-top-up.ts';
import { organizationChoice, payerOf } from './payments/payer.ts';
import { adminProcedure, chatProcedure, createCallerFactory, managerProcedure, operatorProcedure, verifiedManagerProcedure, payerProcedure, publicProcedure, router, sessionProcedure, spenderCheckProcedure, spendingProcedure, verifiedPayerProcedure, verifiedSessionProcedure } from './trpc.ts';
import { webhookSecret } from './webhooks/webhooks.ts';
import type { CoreContext } from './context.ts';

const forAccount = z.object({ account: accountRef });
/** An operator's credit, with why (for the audit log; the admin pages always send one). */
const operatorCreditInput = creditCoinsInput.extend({ reason: reasonSchema.optional() });
/** What checking a key's limits needs (core/keys/limits.ts): now, and the catalog's open models. */
const limitChecks = (ctx: { deps: CoreContext['deps']; em: CoreContext['em'] }): LimitChecks => ({
  now: ctx.deps.clock(),
  knownModel: async (id) => (await ctx.deps.catalog.entries(ctx.em)).get(id)?.disabledAt === null,
});
const signedLink = z.object({ id: z.string().max(100), expires: z.unknown(), signature: z.unknown() });
const spooledUpload = z.custom<SpooledUpload>((v) => typeof v === 'object' && v !== null && 'path' in v);

/**
 * The use cases the adapters may call (REST, MCP, GraphQL, pages, CLI), in-process through
 * `createCaller`. Each procedure only wires its validated input to one plain function; the
 * base procedure decides who may call it. The workflow's own steps are not here: they live in
 * core/internal/router.ts, which no network adapter imports.
 */
export const appRouter = router({
  health: router({
    ready: publicProcedure.query(({ ctx }) => checkReady(ctx.em)),
    /** For /metrics only (adapters/http/operations.ts): counts and durations, no ids. */
    figures: publicProcedure
      .input(z.object({ since: z.date().optional(), afterEntry: z.string().regex(/^\d{1,19}$/).optional() }))
      .query(({ ctx, input }) => operationalFigures(ctx.em, input.since, input.afterEntry)),
  }),

  models: router({
    list: spendingProcedure.input(modelTypeFilter).query(({ ctx, input }) => listModels(ctx.deps, ctx.em, input.type)),
    get: spendingProcedure.input(modelIdInput).query(({ ctx, input }) => getModel(ctx.deps, ctx.em, input.id)),
    /** The same catalog without a key, for the public pages (/models): enabled models at the API prices in force. */
    catalog: publicProcedure.input(modelTypeFilter).query(({ ctx, input }) => listModels(ctx.deps, ctx.em, input.type)),
    /** One model without a key, for its public page; an unknown or disabled model is not_found. */
    page: publicProcedure.input(modelIdInput).query(({ ctx, input }) => getModel(ctx.deps, ctx.em, input.id)),
  }),

  chat: router({
    complete: chatProcedure.input(chatRequestSchema).mutation(({ ctx, input }) => chatCompletion(ctx.deps, ctx.em, ctx.principal, input, ctx.signal)),
    /** A past completion's model, usage, cost and time, to the account that made it (the cost for clients that drop it). */
    get: spendingProcedure.input(completionIdInput).query(({ ctx, input }) => readCompletionRecord(ctx.em, ctx.principal.accountId, 'chat.completion', input.id)),
    /** A past response's (POST /responses) model, usage, cost and time, to the account that made it. */
    getResponse: spendingProcedure.input(completionIdInput).query(({ ctx, input }) => readCompletionRecord(ctx.em, ctx.principal.accountId, 'response', input.id)),
    /** The same chat in the Responses API's shape (stateless): its billing is chat's. */
    respond: chatProcedure.input(responsesRequestSchema).mutation(({ ctx, input }) => createResponse(ctx.deps, ctx.em, ctx.principal, input, ctx.signal)),
  }),

  generations: router({
    create: spendingProcedure.input(createGenerationInput).mutation(({ ctx, input }) => createGeneration(ctx.deps, ctx.em, ctx.principal, input)),
    get: spendingProcedure.input(generationIdInput).query(({ ctx, input }) => getGeneration(ctx.deps, ctx.em, ctx.principal.accountId, input.id)),
    /** The account's jobs, newest first, in the OpenAI list envelope (REST GET /generations, MCP list_generations and tasks/list). */
    list: spendingProcedure.input(listGenerationsInput).query(({ ctx, input }) => listGenerations(ctx.deps, ctx.em, ctx.principal.accountId, input)),
    cancel: spendingProcedure.input(generationIdInput).mutation(({ ctx, input }) => cancelGeneration(ctx.deps, ctx.em, ctx.principal.accountId, input.id)),
    /** The job once it ends, or as it is after `seconds` (at most 60): callers that wait longer call again. */
    wait: spendingProcedure.input(waitInput).query(({ ctx, input }) => waitForGeneration(ctx.deps, ctx.em, ctx.principal.accountId, input.id, input.seconds, ctx.signal)),
    /** The bytes behind a signed result link: no API key, the signature is the credential. */
    output: publicProcedure.input(signedLink).query(({ ctx, input }) => readGenerationOutput(ctx.deps, ctx.em, input.id, input.expires, input.signature)),
  }),

  files: router({
    create: spendingProcedure
      .input(z.object({ upload: spooledUpload, idempotency_key: idempotencyKeySchema.optional() }))
      .mutation(({ ctx, input }) => createFile(ctx.deps, ctx.em, ctx.principal, input.upload, input.idempotency_key)),
    /** Uploads the file at a public URL (through the URL guard), for callers that cannot send multipart. */
    import: spendingProcedure.input(importFileInput).mutation(({ ctx, input }) => importFile(ctx.deps, ctx.em, ctx.principal, input)),
    get: spendingProcedure.input(z.object({ id: z.string().max(100) })).query(({ ctx, input }) => getFile(ctx.deps, ctx.em, ctx.principal.accountId, input.id)),
    /** The bytes behind a signed file link: no API key, the signature is the credential. */
    content: publicProcedure.input(signedLink).query(({ ctx, input }) => readFileContent(ctx.deps, ctx.em, input.id, input.expires, input.signature)),
  }),

  webhooks: router({
    /** The account's signing secret for webhooks (made on first use). */
    secret: spendingProcedure.query(async ({ ctx }) => ({ object: 'webhook_secret' as const, secret: await webhookSecret(ctx.em, ctx.principal.accountId) })),
  }),

  wallet: router({
    balance: spendingProcedure.query(async ({ ctx }) => balanceView(await getBalance(ctx.em, ctx.principal.accountId))),
    history: spendingProcedure.input(historyInput).query(({ ctx, input }) => listHistory(ctx.em, ctx.principal.accountId, input)),
    balanceOf: adminProcedure.input(forAccount).query(({ ctx, input }) => balanceOfAccount(ctx.em, input.account)),
    topUp: operatorProcedure.input(operatorCreditInput).mutation(({ ctx, input }) =>
      audited(ctx.em, ctx.principal, ctx.requestId, (tx) => creditCoins(tx, 'topup', input), (r) => r.applied ? { action: 'wallet.top_up', targetType: 'wallet', targetId: r.account, reason: input.reason, after: { coins: r.coins, entry_id: r.entry_id } } : null),
    ),
    grantSubscription: operatorProcedure.input(operatorCreditInput).mutation(({ ctx, input }) =>
      audited(ctx.em, ctx.principal, ctx.requestId, (tx) => creditCoins(tx, 'subscription_grant', input), (r) => r.applied ? { action: 'wallet.grant_subscription', targetType: 'wallet', targetId: r.account, reason: input.reason, after: { coins: r.coins, entry_id: r.entry_id } } : null),
    ),
  }),

  /** Customers paying for themselves (docs/payments.md): coins enter only from a verified webhook. */
  payments: router({
    // Each takes an optional `organization_id`: an organization the signed-in person owns, whose wallet it acts on (core/payments/payer.ts).
    /** A payment page for a top-up; its coins come with the payment's webhook, never with the customer's return. */
    checkout: verifiedPayerProcedure.input(topUpCheckoutInput.extend(organizationChoice.shape)).mutation(async ({ ctx, input }) => createTopUpCheckout(ctx.deps, ctx.em, await payerOf(ctx.em, ctx.principal, input.organization_id), input)),
    /** A payment page for a plan (subscription mode); each paid invoice grants its coins. */
    subscribe: verifiedPayerProcedure.input(subscriptionCheckoutInput.extend(organizationChoice.shape)).mutation(async ({ ctx, input }) => createSubscriptionCheckout(ctx.deps, ctx.em, await payerOf(ctx.em, ctx.principal, input.organization_id), input)),
    /** A link to the provider's customer portal: change the card, cancel the plan. */
    portal: payerProcedure.input(organizationChoice.optional()).mutation(async ({ ctx, input }) => {
      const payer = await payerOf(ctx.em, ctx.principal, input?.organization_id);
      return createPortalLink(ctx.deps, ctx.em, payer.accountId, payer.organizationId);
    }),
    /** What the account may pay and has paid: bounds, plans, its subscription, recent top-ups. */
    billing: payerProcedure.input(organizationChoice.optional()).query(async ({ ctx, input }) => billingOverview(ctx.deps, ctx.em, (await payerOf(ctx.em, ctx.principal, input?.organization_id)).accountId)),
    /** Whether a top-up's Checkout Session of this account has been credited yet (the success page). */
    topUpStatus: payerProcedure.input(topUpStatusInput.extend(organizationChoice.shape)).query(async ({ ctx, input }) => topUpStatus(ctx.em, (await payerOf(ctx.em, ctx.principal, input.organization_id)).accountId, input.session_id)),
    /** The account's auto top-up: its threshold, amount, saved card and why it turned off, if it did. */
    autoTopUp: payerProcedure.input(organizationChoice.optional()).query(async ({ ctx, input }) => readAutoTopUp(ctx.deps, ctx.em, (await payerOf(ctx.em, ctx.principal, input?.organization_id)).accountId)),
    /** Turns auto top-up on (a Checkout saves the card first when none is saved) or off. */
    configureAutoTopUp: verifiedPayerProcedure.input(autoTopUpInput.and(organizationChoice)).mutation(async ({ ctx, input }) => configureAutoTopUp(ctx.deps, ctx.em, await payerOf(ctx.em, ctx.principal, input.organization_id), input)),
    /** A delivery of the payment provider's webhook: no key, its signature over the raw body is the credential. */
    webhook: publicProcedure.input(webhookInput).mutation(({ ctx, input }) => receivePaymentWebhook(ctx.deps, ctx.em, input)),
  }),

  keys: router({
    create: operatorProcedure.input(forAccount.extend(createKeyInput.shape).extend(operatorKeyOptions.shape)).mutation(({ ctx, input }) =>
      audited(ctx.em, ctx.principal, ctx.requestId, (tx) => createKeyFor(tx, input.account, input, limitChecks(ctx)), (k) => ({ action: 'key.create', targetType: 'api_key', targetId: k.id, after: { account: k.account, user_id: k.user_id, type: k.type, name: k.name, spend_limit_coins: k.spend_limit_coins, spend_limit_period: k.spend_limit_period, expires_at: k.expires_at, allowed_models: k.allowed_models } })),
    ),
    list: adminProcedure.input(forAccount).query(({ ctx, input }) => listKeysOf(ctx.em, input.account)),
    revoke: operatorProcedure.input(revokeKeyInput).mutation(({ ctx, input }) => revokeAnyKey({ em: ctx.em, operator: ctx.principal, requestId: ctx.requestId }, input)),
    /** Checks the caller's key (and counts the request): transports call it before costly work such as reading an upload. */
    whoami: spendingProcedure.query(({ ctx }) => ({ account: ctx.principal.accountId, key: ctx.principal.keyId })),
    /** The same check without counting a request: transports that refuse a bad key at their door (MCP). */
    verify: spenderCheckProcedure.query(({ ctx }) => ({ account: ctx.principal.accountId, key: ctx.principal.keyId })),
    /** The calling key: its limits, usage and what remains (`GET /api/v1/key`). */
    current: spendingProcedure.query(({ ctx }) => keyInfo(ctx.em, ctx.principal.keyId)),
  }),

  accounts: router({
    create: operatorProcedure.input(createAccountInput).mutation(({ ctx, input }) =>
      audited(ctx.em, ctx.principal, ctx.requestId, async (tx) => accountView(await createAccount(tx, input)), (a) => ({ action: 'account.create', targetType: 'account', targetId: a.id, after: { email: a.email } })),
    ),
    get: adminProcedure.input(forAccount).query(({ ctx, input }) => getAccount(ctx.em, input.account)),
    /** The signed-in person's own account and balance (the account pages). */
    me: sessionProcedure.query(({ ctx }) => accountOverview(ctx.em, ctx.principal.accountId)),
    /** Whether `signUp` is open (SIGNUP), for the pages to offer it or not. */
    signUpOpen: publicProcedure.query(({ ctx }) => ({ object: 'signup' as const, open: ctx.deps.config.signupOpen })),
    /** A new, unconfirmed account with its password (SIGNUP=open); the mailed link confirms it. One answer whether the e-mail was new or taken. */
    signUp: publicProcedure.input(signUpInput).mutation(({ ctx, input }) => signUp(ctx.deps, ctx.em, input, callerOf(ctx))),
    /** The sign-up mail's link: confirms the address and signs in. */
    verifyEmail: publicProcedure.input(loginTokenInput).mutation(({ ctx, input }) => verifyEmail(ctx.deps, ctx.em, input.token, callerOf(ctx))),
    /** Another confirmation mail for the signed-in, unconfirmed account. */
    resendVerification: sessionProcedure.mutation(({ ctx }) => resendVerification(ctx.deps, ctx.em, ctx.principal, callerOf(ctx))),
    /** "Forgot your password?": a reset link by mail when the e-mail has an account; one answer either way. */
    requestPasswordReset: publicProcedure.input(resetRequestInput).mutation(({ ctx, input }) => requestPasswordReset(ctx.deps, ctx.em, input, callerOf(ctx))),
    /** Whether a reset link still works, without using it. */
    checkResetLink: publicProcedure.input(loginTokenInput).query(({ ctx, input }) => checkResetLink(ctx.deps, ctx.em, input.token, callerOf(ctx))),
    /** A reset link and a new password: every session ends, this caller is signed in. */
    resetPassword: publicProcedure.input(resetPasswordInput).mutation(({ ctx, input }) => resetPassword(ctx.deps, ctx.em, input, callerOf(ctx))),
    /** Email and password to a new session; an unknown email and a wrong password get one answer. */
    signIn: publicProcedure.input(signInInput).mutation(({ ctx, input }) => signIn(ctx.deps, ctx.em, input, callerOf(ctx))),
    signOut: sessionProcedure.mutation(({ ctx }) => signOut(ctx.em, ctx.principal)),
    /** Ends every session of the account and starts a new one for the caller. */
    changePassword: sessionProcedure.input(changePasswordInput).mutation(({ ctx, input }) => changePassword(ctx.deps, ctx.em, ctx.principal, input)),
    setPassword: operatorProcedure.input(setPasswordInput).mutation(({ ctx, input }) =>
      audited(ctx.em, ctx.principal, ctx.requestId, (tx) => setPasswordFor(tx, input), (a) => ({ action: 'account.set_password', targetType: 'account', targetId: a.id, after: { sessions_ended: a.sessions_ended } })),
    ),
    /** A one-time sign-in token for the account, valid 15 minutes. */
    loginLink: operatorProcedure.input(forAccount).mutation(({ ctx, input }) =>
      audited(ctx.em, ctx.principal, ctx.requestId, (tx) => loginLinkFor(ctx.deps, tx, input.account), (l) => ({ action: 'account.login_link', targetType: 'account', targetId: l.account })),
    ),
    redeemLoginLink: publicProcedure.input(loginTokenInput).mutation(({ ctx, input }) => redeemLoginLink(ctx.deps, ctx.em, input.token, callerOf(ctx))),
  }),

  /** The signed-in person's own things (the account pages): each use case takes the session's account, never an account from the input. */
  account: router({
    /** "E-mail me when my balance falls below N coins" (empty: off). */
    setLowBalanceNotice: sessionProcedure.input(lowBalanceNoticeInput).mutation(({ ctx, input }) => setLowBalanceNotice(ctx.em, ctx.principal.accountId, input)),
    /**
     * The keys the person manages (core/organizations/managed-keys.ts): personal ones, or an
     * organization's with `organization_id`. The pages (session) and REST /api/v1/keys (a
     * management key) call the same procedures.
     */
    keys: router({
      list: managerProcedure.input(listManagedKeysInput).query(({ ctx, input }) => listManagedKeys(ctx.em, ctx.actor, input)),
      create: verifiedManagerProcedure.input(createManagedKeyInput).mutation(({ ctx, input }) => createManagedKey(ctx.em, ctx.actor, input, limitChecks(ctx))),
      get: managerProcedure.input(keyIdInput).query(({ ctx, input }) => getManagedKey(ctx.em, ctx.actor, input)),
      /** The key's name, limits and whether it is disabled. */
      update: managerProcedure.input(updateKeyInput).mutation(({ ctx, input }) => updateManagedKey(ctx.em, ctx.actor, input, limitChecks(ctx))),
      revoke: managerProcedure.input(keyIdInput).mutation(({ ctx, input }) => revokeManagedKey(ctx.em, ctx.actor, input)),
    }),
    /** The models open to requests (for the keys page's list of allowed models). */
    models: sessionProcedure.input(modelTypeFilter).query(({ ctx, input }) => listModels(ctx.deps, ctx.em, input.type)),
    /** The history, each top-up with its receipt. */
    history: sessionProcedure.input(historyInput).query(({ ctx, input }) => historyWithReceipts(ctx.deps, ctx.em, ctx.principal.accountId, input)),
    /** The history (at most 10,000 rows, the newest; optionally of a date range, a model, a key) as CSV text, top-ups with their receipts. */
    historyCsv: sessionProcedure.input(historyCsvInput).query(async ({ ctx, input }) => {
      await fillReceipts(ctx.deps, ctx.em, ctx.principal.accountId);
      return historyCsv(ctx.em, ctx.principal.accountId, { filters: input, now: ctx.deps.clock() });
    }),
    /** Spend, requests and tokens per day, per model and per key over a range of days (at most 366). */
    usage: sessionProcedure.input(usageInput).query(({ ctx, input }) => accountUsage(ctx.em, ctx.principal.accountId, input, ctx.deps.clock())),
    apps: router({
      list: sessionProcedure.query(({ ctx }) => listAppConnections(ctx.em, ctx.principal.accountId)),
      /** The live connection of an app that allowing it again replaces (the consent page says so), or null. */
      live: sessionProcedure.input(liveAppConnectionInput).query(({ ctx, input }) => liveAppConnection(ctx.em, ctx.principal.accountId, input, ctx.deps.clock())),
      revoke: sessionProcedure.input(appConnectionIdInput).mutation(({ ctx, input }) => revokeAppConnection(ctx.em, ctx.principal.accountId, input.id)),
    }),
    generations: router({
      list: sessionProcedure.input(listGenerationsInput).query(({ ctx, input }) => listGenerations(ctx.deps, ctx.em, ctx.principal.accountId, input)),
      get: sessionProcedure.input(generationIdInput).query(({ ctx, input }) => getGeneration(ctx.deps, ctx.em, ctx.principal.accountId, input.id)),
    }),
  }),

  /**
   * Organizations (docs/organizations.md): a team's shared wallet, its members and invitations.
   * A person in the pages (session) or a management key (REST) calls the same procedures; roles
   * are checked in core/organizations/roles.ts.
   */
  organizations: router({
    list: managerProcedure.query(({ ctx }) => listOrganizations(ctx.em, ctx.actor)),
    create: verifiedManagerProcedure.input(createOrganizationInput).mutation(({ ctx, input }) => createOrganization(ctx.em, ctx.actor, input)),
    get: managerProcedure.input(organizationIdInput).query(({ ctx, input }) => getOrganization(ctx.em, ctx.actor, input.id)),
    /** The caller's own membership: role, spend limit and what they spent in its period. */
    membership: managerProcedure.input(organizationIdInput).query(({ ctx, input }) => ownMembership(ctx.em, ctx.actor, input.id)),
    /** Spend per member and per key over a range of days (an admin: every member; a member: their own). */
    usage: managerProcedure.input(organizationUsageInput).query(({ ctx, input }) => organizationUsage(ctx.em, ctx.actor, input, ctx.deps.clock())),
    /** The same as CSV: a row per day, key and model. */
    usageCsv: managerProcedure.input(organizationUsageInput).query(({ ctx, input }) => organizationUsageCsv(ctx.em, ctx.actor, input, ctx.deps.clock())),
    /** Owners only; refused while the wallet holds coins or a plan runs. */
    delete: managerProcedure.input(organizationIdInput).mutation(({ ctx, input }) => deleteOrganization(ctx.em, ctx.actor, input.id, ctx.deps.clock())),
    members: router({
      list: managerProcedure.input(organizationIdInput).query(({ ctx, input }) => listMembers(ctx.em, ctx.actor, input.id)),
      update: managerProcedure.input(updateMemberInput).mutation(({ ctx, input }) => updateMember(ctx.em, ctx.actor, input, ctx.deps.clock())),
      remove: managerProcedure.input(memberRef).mutation(({ ctx, input }) => removeMember(ctx.em, ctx.actor, input)),
    }),
    invitations: router({
      list: managerProcedure.input(organizationIdInput).query(({ ctx, input }) => listInvitations(ctx.em, ctx.actor, input.id, ctx.deps.clock())),
      create: managerProcedure.input(createInvitationInput).mutation(({ ctx, input }) => createInvitation(ctx.deps, ctx.em, ctx.actor, input)),
      revoke: managerProcedure.input(invitationRef).mutation(({ ctx, input }) => revokeInvitation(ctx.em, ctx.actor, input, ctx.deps.clock())),
      /** The invitation behind a link, for its page: anyone holding the link; `viewer` checks the signed-in person's address. */
      read: publicProcedure.input(readInvitationInput).query(({ ctx, input }) => readInvitation(ctx.em, ctx.credential, input, ctx.deps.clock())),
      accept: verifiedSessionProcedure.input(invitationTokenInput).mutation(({ ctx, input }) => acceptInvitation(ctx.em, ctx.principal, input.token, ctx.deps.clock())),
    }),
  }),

  /**
   * The OAuth authorization server for MCP clients (docs/oauth.md): an app registers, a
   * signed-in person allows or denies it, and the app trades its code for tokens that spend
   * through its own key. The checks (PKCE, binding, rotation, caps) are all here.
   */
  oauth: router({
    registerClient: publicProcedure.input(registerClientInput).mutation(({ ctx, input }) => registerClient(ctx.em, input, ctx.deps.clock())),
    client: publicProcedure.input(z.object({ client_id: clientIdSchema })).query(({ ctx, input }) => resolveClient(ctx.deps, ctx.em, input.client_id)),
    /** An authorization request, checked: what the consent page shows, or the error to send back to the app. */
    authorization: publicProcedure.input(authorizationRequestInput).query(({ ctx, input }) => checkAuthorization(ctx.deps, ctx.em, input)),
    approve: verifiedSessionProcedure.input(approveInput).mutation(({ ctx, input }) => approveAuthorization(ctx.deps, ctx.em, ctx.principal, input)),
    deny: sessionProcedure.input(authorizationRequestInput).mutation(({ ctx, input }) => denyAuthorization(ctx.deps, ctx.em, input)),
    exchangeCode: publicProcedure.input(exchangeCodeInput).mutation(({ ctx, input }) => exchangeCode(ctx.deps, ctx.em, input)),
    refresh: publicProcedure.input(refreshInput).mutation(({ ctx, input }) => refreshTokens(ctx.deps, ctx.em, input)),
    revoke: publicProcedure.input(revokeTokenInput).mutation(({ ctx, input }) => revokeToken(ctx.em, input)),
  }),

  /** The admin API's use cases (core/admin/router.ts). */
  admin: adminRouter,

  admins: router({
    createToken: operatorProcedure.input(createAdminTokenInput).mutation(({ ctx, input }) =>
      audited(ctx.em, ctx.principal, ctx.requestId, (tx) => createAdminToken(tx, input), (t) => ({ action: 'admin_token.create', targetType: 'admin_token', targetId: t.id, after: { name: t.name, role: t.role } })),
    ),
    revokeToken: operatorProcedure.input(adminTokenIdInput).mutation(({ ctx, input }) =>
      audited(ctx.em, ctx.principal, ctx.requestId, (tx) => revokeAdminToken(tx, input.id), (t) => ({ action: 'admin_token.revoke', targetType: 'admin_token', targetId: t.id, after: { revoked_at: t.revoked_at } })),
    ),
  }),

  catalog: router({
    /** Makes the models table match a catalog file (parsed, not yet validated). */
    sync: operatorProcedure.input(z.object({ catalog: z.unknown() })).mutation(({ ctx, input }) => syncCatalog(ctx.deps, ctx.em, input.catalog, ctx.principal, ctx.requestId)),
  }),
});

export type AppRouter = typeof appRouter;
export const createCaller = createCallerFactory(appRouter);
