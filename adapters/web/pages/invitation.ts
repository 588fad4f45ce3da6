import type { InvitationDetails } from '../../../core/organizations/invitations.ts';
import { html, notice, page, when } from '../html.ts';

/**
 * The page an invitation's link opens (/invitations/{token}, docs/organizations.md): the
 * organization, who invited and with which role. Signed out: sign in or sign up as the invited
 * address, then back here. Signed in as that address: Accept. A link that no longer works (410)
 * or is for another address (403) is a page saying why, with core's words.
 */
const ROLE = { owner: 'an owner', admin: 'an admin', member: 'a member' } as const;

function facts(d: InvitationDetails) {
  return html`<p><strong>${d.invited_by}</strong> invites <strong>${d.email}</strong> to join the organization <strong>${d.organization_name}</strong> as ${ROLE[d.role]}. Its members spend from its shared wallet; you keep your personal one.</p>
<p class="hint">The invitation works once, until ${when(d.expires_at)}.</p>`;
}

/** Signed out: who the invitation is for, and the way in that comes back here. */
export function invitationSignedOutPage(d: InvitationDetails, path: string) {
  const next = new URLSearchParams({ next: path }).toString();
  return page(
    { title: `Join ${d.organization_name}`, publicNav: {} },
    html`${facts(d)}
<p>To accept, sign in (or create an account) with <strong>${d.email}</strong>.</p>
<p class="links"><a class="button" href="/login?${next}">Sign in to accept</a> <a href="/signup?${next}">Create an account</a></p>`,
  );
}

/** Signed in as the invited address: the Accept button. */
export function invitationAcceptPage(nav: { email: string; csrf: string }, d: InvitationDetails, token: string, error?: string) {
  return page(
    { title: `Join ${d.organization_name}`, nav: { ...nav, current: '/account/organizations' } },
    html`${notice('error', error)}${facts(d)}
<form method="post" action="/invitations/${encodeURIComponent(token)}/accept" class="actions">
  <input type="hidden" name="_csrf" value="${nav.csrf}">
  <button type="submit">Accept and join ${d.organization_name}</button> <a href="/account/organizations">Not now</a>
</form>`,
  );
}

/** A link that cannot be used (410: used, expired or revoked; 403: another address; 404: unknown), saying why. */
export function invitationRefusedPage(status: number, message: string, nav?: { email: string; csrf: string }) {
  const title = status === 410 ? 'This invitation no longer works' : status === 403 ? 'This invitation is for someone else' : 'Unknown invitation';
  return page(
    { title, ...(nav ? { nav: { ...nav, current: '/account/organizations' } } : { publicNav: {} }) },
    html`<p class="error" role="alert">${message}</p>
<p class="links">${nav ? html`<a href="/account/organizations">Your organizations</a>` : html`<a href="/login">Sign in</a>`}</p>`,
  );
}
