import { fieldError, html, invalidAttrs, notice } from '../html.ts';

type Nav = { email: string; csrf: string };

/** The mail pieces: the unconfirmed address on the overview (with "send it again"), the low-balance notice form on Settings. */
export function verificationSection(nav: Nav, v: { verified: boolean; sent?: boolean | undefined; verifiedNow?: boolean | undefined; error?: string | undefined }) {
  if (v.verified) return v.verifiedNow ? notice('info', 'Your e-mail address is confirmed.') : '';
  return html`<section class="info" id="verify" aria-labelledby="verify-heading">
  <h2 id="verify-heading">Confirm your e-mail address</h2>
  <p>We sent a link to ${nav.email}. Until you open it, this account cannot create API keys, connect apps or pay.</p>
  ${notice('error', v.error)}${v.sent ? notice('info', 'A new link is on its way.') : ''}
  <form method="post" action="/account/verify/resend">
    <input type="hidden" name="_csrf" value="${nav.csrf}">
    <button type="submit">Send the link again</button>
  </form>
</section>`;
}

export function lowBalanceSection(nav: Nav, v: { threshold: string | null; value?: string | undefined; saved?: boolean | undefined; error?: string | undefined }) {
  return html`<h2 id="low-balance">Low-balance e-mail</h2>
${notice('error', v.error)}${v.saved ? notice('info', v.threshold ? `Saved: we e-mail you when the balance falls below ${v.threshold} coins.` : 'Saved: no low-balance e-mail.') : ''}
<form method="post" action="/account/low-balance" class="stack">
  <input type="hidden" name="_csrf" value="${nav.csrf}">
  <label>E-mail me when my balance falls below (coins; empty: never) ${fieldError('threshold_coins', v.error)}<input type="text" name="threshold_coins" inputmode="numeric" pattern="[0-9]*" maxlength="10" value="${v.value ?? v.threshold ?? ''}"${invalidAttrs('threshold_coins', v.error)}></label>
  <button type="submit">Save</button>
</form>`;
}
