import type { EntityManager } from '@mikro-orm/postgresql';
import { z } from 'zod';
import type { SessionPrincipal, SpendingPrincipal } from '../auth/principals.ts';
import { CoreError } from '../errors.ts';
import { isOrganization } from '../organizations/organizations.ts';
import { organizationIdSchema, requireRole } from '../organizations/roles.ts';

/**
 * Whose wallet a payment use case acts on (docs/payments.md, docs/organizations.md): the
 * caller's own account, or, with `organization_id`, an organization the caller owns. Every
 * `payments.*` procedure resolves its payer here first, so the rule is one:
 * - no `organization_id`: the caller's account (a person signed in, or a personal API key);
 * - `organization_id`: a person signed in to the account pages who is an owner of it (a member
 *   below owner gets 403, a non-member 404, as for every organization route); an API key never
 *   acts as an owner, whoever made it (403): paying is a person's act, and a leaked key should
 *   not open the organization's billing;
 * - an API key of an organization's wallet (a member's key, an app connected on it) without
 *   `organization_id`: 403, for the same reason: the organization's payments are its owners'.
 */

/** The optional wallet choice every payments procedure takes. */
export const organizationChoice = z.object({
  organization_id: organizationIdSchema.optional().describe("an organization you own: act on its wallet instead of your own (the account pages only)"),
});

export interface Payer {
  /** The wallet paid into: the caller's account, or the organization's. */
  accountId: string;
  /** Set when the wallet is an organization's: Stripe's metadata names it. */
  organizationId: string | null;
  /** The person acting (an owner, for an organization); null for an API key on its own account. */
  actingAccountId: string | null;
}

export async function payerOf(em: EntityManager, principal: SessionPrincipal | SpendingPrincipal, organizationId: string | undefined): Promise<Payer> {
  if (organizationId !== undefined) {
    if (principal.kind !== 'session') {
      throw new CoreError('forbidden', "An organization's payments are made by an owner signed in to the account pages; an API key cannot act as an owner.", {
        param: 'organization_id',
        reason: 'owner_session_required',
      });
    }
    await requireRole(em, { personId: principal.accountId, organizationId: null }, organizationId, 'owner', { param: 'organization_id' });
    return { accountId: organizationId, organizationId, actingAccountId: principal.accountId };
  }
  if (principal.kind !== 'session') {
    if (await isOrganization(em, principal.accountId)) {
      throw new CoreError('forbidden', "This key spends an organization's wallet: only the organization's owners manage its payments, signed in to the account pages.", {
        reason: 'organization_key_cannot_pay',
      });
    }
    return { accountId: principal.accountId, organizationId: null, actingAccountId: null };
  }
  return { accountId: principal.accountId, organizationId: null, actingAccountId: principal.accountId };
}

/** What Stripe's requests carry for the payer: the organization and the person acting, and the organization's billing address. */
export async function stripeFieldsOf(em: EntityManager, payer: Payer): Promise<{ organizationId?: string; actingAccountId?: string; customerEmail?: string }> {
  if (!payer.organizationId) return {};
  const [row] = await em.execute<{ email: string }[]>('select email from accounts where id = ?', [payer.organizationId]);
  return { organizationId: payer.organizationId, ...(payer.actingAccountId ? { actingAccountId: payer.actingAccountId } : {}), ...(row ? { customerEmail: row.email } : {}) };
}

/** A return URL of the pages for the organization's wallet: the pages then show that wallet again. */
export function withOrganization(url: string, organizationId: string | null): string {
  if (!organizationId) return url;
  const hash = url.indexOf('#');
  const [base, fragment] = hash === -1 ? [url, ''] : [url.slice(0, hash), url.slice(hash)];
  return `${base}${base.includes('?') ? '&' : '?'}organization=${encodeURIComponent(organizationId)}${fragment}`;
}
