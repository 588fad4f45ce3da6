import type { EntityManager } from '@mikro-orm/postgresql';
import type { Logger } from 'pino';
import { z } from 'zod';
import type { AccountLinks } from '../accounts/mails.ts';
import { sendLater } from '../accounts/mails.ts';
import type { Actor, Credential, SessionPrincipal } from '../auth/principals.ts';
import { authenticateSession } from '../auth/sessions.ts';
import { hashSecret, newSecret } from '../auth/secrets.ts';
import { CoreError, notFound } from '../errors.ts';
import { newId } from '../ids.ts';
import type { Mailer, MailMessage } from '../ports.ts';
import { isoTimeSchema } from '../views.ts';
import { atLeast, organizationIdSchema, requireRole, roleSchema, type Role } from './roles.ts';

/**
 * Invitations to an organization (docs/organizations.md): by e-mail, bound to that address,
 * single use, valid 7 days, revocable. Only the SHA-256 of the link's token is stored. Accepting
 * needs the invited person signed in with that address (confirmed).
 */
export const INVITATION_DAYS = 7;
const PREFIX = 'mas_invite_';
/** At most this many invitations wait for an answer per organization. */
export const MAX_OPEN_INVITATIONS = 50;


export const createInvitationInput = z.object({
  id: organizationIdSchema,
  email: z.email('must be an email address').max(254).transform((e) => e.trim()),
  role: roleSchema.default('member'),
});
export const invitationRef = z.object({ id: organizationIdSchema, invitation_id: z.string().trim().regex(/^inv_[0-9A-Za-z]{1,64}$/, 'must be an invitation id such as inv_…') });
export const invitationTokenInput = z.object({ token: z.string().trim().min(1).max(200) });
/** `signed_in`: the page holds a live session, whose address the invitation must be for; false: nobody signed in yet. */
export const readInvitationInput = invitationTokenInput.extend({ signed_in: z.boolean().default(false) });

export const invitationSchema = z
  .object({
    id: z.string(),
    object: z.literal('organization_invitation'),
    organization_id: z.string(),
    email: z.string(),
    role: roleSchema,
    status: z.enum(['pending', 'accepted', 'revoked', 'expired']),
    created_at: isoTimeSchema,
    expires_at: isoTimeSchema,
  })
  .strict();
export type InvitationView = z.infer<typeof invitationSchema>;

type Row = { id: string; organization_id: string; email: string; role: Role; created_at: Date; expires_at: Date; accepted_at: Date | null; revoked_at: Date | null };

function status(r: Row, now: Date): InvitationView['status'] {
  if (r.accepted_at) return 'accepted';
  if (r.revoked_at) return 'revoked';
  return new Date(r.expires_at).getTime() <= now.getTime() ? 'expired' : 'pending';
}

function view(r: Row, now: Date): InvitationView {
  return {
    id: r.id,
    object: 'organization_invitation' as const,
    organization_id: r.organization_id,
    email: r.email,
    role: r.role,
    status: status(r, now),
    created_at: new Date(r.created_at).toISOString(),
    expires_at: new Date(r.expires_at).toISOString(),
  };
}

export function invitationMail(to: string, v: { organization: string; inviter: string; role: Role; link: string; expiresAt: Date }): MailMessage {
  return {
    to,
    subject: `You are invited to ${v.organization}`,
    text:
      `${v.inviter} invites you to join the organization "${v.organization}" as ${v.role === 'admin' ? 'an admin' : `a ${v.role}`}: ` +
      `its members spend from its shared wallet.\n\n` +
      `Open this link and sign in (or sign up) with this e-mail address to accept (valid until ${v.expiresAt.toISOString().slice(0, 16).replace('T', ' ')} UTC, once):\n\n${v.link}\n\n` +
      `If you do not know them, ignore this mail: nothing happens.\n\n-- \nModel Access Service\n`,
    link: v.link,
  };
}

type InviteDeps = { mailer: Mailer; logger: Logger; clock: () => Date; config: { links: AccountLinks } };

/**
 * Invites an e-mail address (admins; an owner only by an owner). An address already a member
 * is refused; an earlier pending invitation of the same address is revoked by the new one.
 */
export async function createInvitation(deps: InviteDeps, em: EntityManager, actor: Actor, input: z.output<typeof createInvitationInput>): Promise<InvitationView> {
  const now = deps.clock();
  const { view: created, mail } = await em.transactional(async (tx) => {
    const mine = await requireRole(tx, actor, input.id, 'admin', { lock: true });
    if (input.role === 'owner' && !atLeast(mine, 'owner')) {
      throw new CoreError('forbidden', 'Only an owner invites an owner.', { reason: 'owner_role_required', param: 'role' });
    }
    const [member] = await tx.execute(
      `select 1 from organization_members m join accounts p on p.id = m.account_id where m.organization_id = ? and lower(p.email) = lower(?)`,
      [input.id, input.email],
    );
    if (member) throw new CoreError('conflict', `${input.email} is a member of this organization already.`, { reason: 'already_member', param: 'email' });
    await tx.execute(
      `update organization_invitations set revoked_at = ? where organization_id = ? and lower(email) = lower(?) and accepted_at is null and revoked_at is null`,
      [now, input.id, input.email],
    );
    const [open] = await tx.execute<{ n: string }[]>(
      `select count(*)::text as n from organization_invitations where organization_id = ? and accepted_at is null and revoked_at is null and expires_at > ?`,
      [input.id, now],
    );
    if (Number(open!.n) >= MAX_OPEN_INVITATIONS) {
      throw new CoreError('limit_reached', `This organization has ${MAX_OPEN_INVITATIONS} invitations waiting, the most allowed: revoke some first.`, { reason: 'invitation_limit_reached' });
    }
    const token = newSecret(PREFIX);
    const id = newId('inv');
    const expiresAt = new Date(now.getTime() + INVITATION_DAYS * 86_400_000);
    await tx.execute(
      `insert into organization_invitations (id, organization_id, email, role, token_hash, invited_by, created_at, expires_at) values (?, ?, ?, ?, ?, ?, ?, ?)`,
      [id, input.id, input.email, input.role, hashSecret(token), actor.personId, now, expiresAt],
    );
    const [names] = await tx.execute<{ organization: string; inviter: string }[]>(
      `select o.name as organization, p.email as inviter from accounts o, accounts p where o.id = ? and p.id = ?`,
      [input.id, actor.personId],
    );
    const [row] = await tx.execute<Row[]>('select * from organization_invitations where id = ?', [id]);
    const mail = invitationMail(input.email, { organization: names!.organization, inviter: names!.inviter, role: input.role, link: deps.config.links.invitation(token), expiresAt });
    return { view: view(row!, now), mail };
  });
  sendLater(deps, mail);
  return created;
}

/** The organization's invitations still waiting (admins), newest first. */
export async function listInvitations(em: EntityManager, actor: Actor, organizationId: string, now: Date) {
  await requireRole(em, actor, organizationId, 'admin');
  const rows = await em.execute<Row[]>(
    `select * from organization_invitations where organization_id = ? and accepted_at is null and revoked_at is null and expires_at > ? order by created_at desc, id`,
    [organizationId, now],
  );
  return { object: 'list' as const, data: rows.map((r) => view(r, now)) };
}

/** Revokes an invitation (admins); its link answers "revoked" from then on. Idempotent. */
export async function revokeInvitation(em: EntityManager, actor: Actor, input: z.output<typeof invitationRef>, now: Date): Promise<InvitationView> {
  return em.transactional(async (tx) => {
    await requireRole(tx, actor, input.id, 'admin');
    const [row] = await tx.execute<Row[]>(
      `update organization_invitations set revoked_at = coalesce(revoked_at, ?) where id = ? and organization_id = ? and accepted_at is null returning *`,
      [now, input.invitation_id, input.id],
    );
    if (row) return view(row, now);
    const [accepted] = await tx.execute<Row[]>('select * from organization_invitations where id = ? and organization_id = ?', [input.invitation_id, input.id]);
    if (!accepted) throw notFound('invitation_not_found', `No invitation ${input.invitation_id}.`, 'invitation_id');
    throw new CoreError('conflict', 'This invitation was accepted already: remove the member instead.', { reason: 'invitation_already_accepted', param: 'invitation_id' });
  });
}

/** What the invitation page shows. */
export interface InvitationDetails {
  object: 'organization_invitation';
  organization_id: string;
  organization_name: string;
  email: string;
  role: Role;
  invited_by: string;
  expires_at: string;
}

type Found = Row & { organization_name: string; invited_by_email: string };

/**
 * The invitation behind a link, when it still works for the viewer: unknown: 404; used, expired
 * or revoked: 410, saying which; opened by a signed-in person with another address: 403, naming
 * the address it is for (the link's holder was sent it). `signed_in`: the viewer is the session's person (a dead session: 401); else nobody yet.
 */
export async function readInvitation(em: EntityManager, credential: Credential, input: z.output<typeof readInvitationInput>, now: Date): Promise<InvitationDetails> {
  const viewer = input.signed_in ? (await authenticateSession(em, credential.kind === 'session' ? credential.token : null, now)).accountId : null;
  const found = await findByToken(em, input.token, false);
  await checkUsable(em, found, viewer, now);
  return details(found);
}

async function findByToken(em: EntityManager, token: string, lock: boolean): Promise<Found> {
  const unknown = notFound('invitation_not_found', 'This invitation link is not known. Check that it was copied whole.', 'token');
  if (!token.startsWith(PREFIX)) throw unknown;
  const [row] = await em.execute<Found[]>(
    `select i.*, o.name as organization_name, p.email as invited_by_email
     from organization_invitations i join accounts o on o.id = i.organization_id join accounts p on p.id = i.invited_by
     where i.token_hash = ?${lock ? ' for update of i' : ''}`,
    [hashSecret(token)],
  );
  if (!row) throw unknown;
  return row;
}

async function checkUsable(em: EntityManager, row: Found, viewer: string | null, now: Date): Promise<void> {
  const state = status(row, now);
  if (state !== 'pending') {
    const why = { accepted: 'has been used already', revoked: 'was revoked by the organization', expired: 'has expired' }[state];
    throw new CoreError('gone', `This invitation to ${row.organization_name} ${why}. Ask an admin of the organization for a new one.`, { reason: `invitation_${state}` });
  }
  if (viewer === null) return;
  const [person] = await em.execute<{ email: string }[]>('select email from accounts where id = ?', [viewer]);
  if (!person || person.email.toLowerCase() !== row.email.toLowerCase()) {
    throw new CoreError('forbidden', `This invitation is for ${row.email}, and you are signed in as ${person?.email ?? 'someone else'}. Sign out and sign in (or sign up) as ${row.email} to accept it.`, {
      reason: 'invitation_for_another_email',
    });
  }
}

function details(r: Found): InvitationDetails {
  return {
    object: 'organization_invitation' as const,
    organization_id: r.organization_id,
    organization_name: r.organization_name,
    email: r.email,
    role: r.role,
    invited_by: r.invited_by_email,
    expires_at: new Date(r.expires_at).toISOString(),
  };
}

/**
 * Accepts an invitation as the signed-in person (their address confirmed, `verifiedSessionProcedure`):
 * they join with the invited role, and the invitation is used up, in one transaction (two
 * acceptances at once: one wins, the other sees it used).
 */
export async function acceptInvitation(em: EntityManager, principal: SessionPrincipal, token: string, now: Date): Promise<InvitationDetails & { joined: boolean }> {
  return em.transactional(async (tx) => {
    const found = await findByToken(tx, token, true);
    await checkUsable(tx, found, principal.accountId, now);
    const joined = await tx.execute<{ account_id: string }[]>(
      `insert into organization_members (organization_id, account_id, role) values (?, ?, ?) on conflict do nothing returning account_id`,
      [found.organization_id, principal.accountId, found.role],
    );
    await tx.execute('update organization_invitations set accepted_at = ?, accepted_by = ? where id = ?', [now, principal.accountId, found.id]);
    return { ...details(found), joined: joined.length > 0 };
  });
}

/** An invitation as every reader sees it (never its token), for operators' reads (core/admin/reads/organizations.ts). */
export const invitationView = view;
export type InvitationRow = Row;
