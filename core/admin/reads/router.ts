import { adminProcedure, router } from '../../trpc.ts';
import { accountIdsInput, accountListInput, accountsByIds, listAccounts } from './accounts.ts';
import { appConnectionListInput, listAdminAppConnections } from './app-connections.ts';
import { listAdminFiles, fileListInput } from './files.ts';
import { generationIdsInput, generationListInput, generationsByIds, listAdminGenerations } from './generations.ts';
import { apiKeysByIds, keyIdsInput, keyListInput, listApiKeys } from './keys.ts';
import { ledgerListInput, listLedger } from './ledger.ts';
import { listAdminModels, modelIdsInput, modelListInput, modelsByIds } from './models.ts';
import { walletsByAccountIds } from './wallets.ts';
import {
  adminOrganizationDetail,
  invitationListInput,
  listAdminInvitations,
  listAdminOrganizations,
  membersByOrganizationIds,
  membershipsByPersonIds,
  organizationDetailInput,
  organizationIdsInput,
  organizationListInput,
  organizationsByIds,
  personIdsInput,
} from './organizations.ts';

/**
 * The admin API's reads (docs/admin.md), for any admin role: lists of every account's objects,
 * filtered and paged newest first (at most 100 rows), and look-ups by ids, each one query, for
 * the GraphQL dataloaders.
 */
export const adminReadRouter = router({
  accounts: router({
    list: adminProcedure.input(accountListInput).query(({ ctx, input }) => listAccounts(ctx.em, input)),
    byIds: adminProcedure.input(accountIdsInput).query(({ ctx, input }) => accountsByIds(ctx.em, input.ids)),
  }),
  wallets: router({
    byAccountIds: adminProcedure.input(accountIdsInput).query(({ ctx, input }) => walletsByAccountIds(ctx.em, input.ids)),
  }),
  ledger: router({
    list: adminProcedure.input(ledgerListInput).query(({ ctx, input }) => listLedger(ctx.em, input)),
  }),
  keys: router({
    list: adminProcedure.input(keyListInput).query(({ ctx, input }) => listApiKeys(ctx.em, input)),
    byIds: adminProcedure.input(keyIdsInput).query(({ ctx, input }) => apiKeysByIds(ctx.em, input.ids)),
  }),
  appConnections: router({
    list: adminProcedure.input(appConnectionListInput).query(({ ctx, input }) => listAdminAppConnections(ctx.em, input)),
  }),
  models: router({
    list: adminProcedure.input(modelListInput).query(({ ctx, input }) => listAdminModels(ctx.deps, ctx.em, input)),
    byIds: adminProcedure.input(modelIdsInput).query(({ ctx, input }) => modelsByIds(ctx.deps, ctx.em, input.ids)),
  }),
  generations: router({
    list: adminProcedure.input(generationListInput).query(({ ctx, input }) => listAdminGenerations(ctx.deps, ctx.em, input)),
    byIds: adminProcedure.input(generationIdsInput).query(({ ctx, input }) => generationsByIds(ctx.deps, ctx.em, input.ids)),
  }),
  /** Organizations (docs/organizations.md, "Operators"): their wallet, ledger and keys are read above with their `org_…` id. */
  organizations: router({
    list: adminProcedure.input(organizationListInput).query(({ ctx, input }) => listAdminOrganizations(ctx.em, input)),
    byIds: adminProcedure.input(organizationIdsInput).query(({ ctx, input }) => organizationsByIds(ctx.em, input.ids)),
    /** One organization with its balance, members and pending invitations (the CLI's `org show`). */
    get: adminProcedure.input(organizationDetailInput).query(({ ctx, input }) => adminOrganizationDetail(ctx.em, input.id, ctx.deps.clock())),
    membersByIds: adminProcedure.input(organizationIdsInput).query(({ ctx, input }) => membersByOrganizationIds(ctx.em, input.ids)),
    ofPeople: adminProcedure.input(personIdsInput).query(({ ctx, input }) => membershipsByPersonIds(ctx.em, input.ids)),
    invitations: adminProcedure.input(invitationListInput).query(({ ctx, input }) => listAdminInvitations(ctx.em, input, ctx.deps.clock())),
  }),
  files: router({
    list: adminProcedure.input(fileListInput).query(({ ctx, input }) => listAdminFiles(ctx.deps, ctx.em, input)),
  }),
});
