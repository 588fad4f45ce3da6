import { html, notice, page } from '../html.ts';

/** Where to go after signing in: only a path of this site, never another site. */
export const safeNext = (next: unknown) => (typeof next === 'string' && next.length <= 4000 && /^\/(?![/\\])[\w\-./?=&%+*~:@,;!()]*$/.test(next) ? next : '/account');

/** A link to another auth page that keeps where the person was going (an app's consent page, say). */
const keeping = (path: string, next: string) => (next === '/account' ? path : `${path}?${new URLSearchParams({ next }).toString()}`);

export function signUpPage(v: { csrf: string; email?: string; error?: string; open: boolean; next?: string }) {
  const next = v.next ?? '/account';
  if (!v.open) return page({ title: 'Create an account' }, html`<p class="info">Sign-up is closed on this service. Ask its operator for an account.</p><p><a href="/login">Sign in</a></p>`);
  return page(
    { title: 'Create an account' },
    html`${notice('error', v.error)}
<form method="post" action="/signup" class="stack">
  <input type="hidden" name="_csrf" value="${v.csrf}">
  <input type="hidden" name="next" value="${next}">
  <label>Email <input type="email" name="email" autocomplete="email" required maxlength="254" value="${v.email ?? ''}"></label>
  <label>Password (at least 12 characters) <input type="password" name="password" autocomplete="new-password" required minlength="12" maxlength="256"></label>
  <button type="submit">Create account</button>
</form>
<p>The account starts with an empty wallet. Already have one? <a href="${keeping('/login', next)}">Sign in</a>.</p>`,
  );
}

export function signInPage(v: { csrf: string; email?: string; error?: string; next: string; info?: string }) {
  return page(
    { title: 'Sign in' },
    html`${notice('error', v.error)}${notice('info', v.info)}
<form method="post" action="/login" class="stack">
  <input type="hidden" name="_csrf" value="${v.csrf}">
  <input type="hidden" name="next" value="${v.next}">
  <label>Email <input type="email" name="email" autocomplete="email" required maxlength="254" value="${v.email ?? ''}"></label>
  <label>Password <input type="password" name="password" autocomplete="current-password" required maxlength="256"></label>
  <button type="submit">Sign in</button>
</form>
<p><a href="/password/forgot">Forgot your password?</a></p>
<p>New here? <a href="${keeping('/signup', v.next)}">Create an account</a>.</p>`,
  );
}

/** A sign-in link opens this page; its button redeems the link (a GET never does: mail scanners fetch links). */
export function loginLinkPage(v: { csrf: string; token: string; error?: string }) {
  return page(
    { title: 'Sign in with a link' },
    html`${notice('error', v.error)}
<form method="post" action="/login/link" class="stack">
  <input type="hidden" name="_csrf" value="${v.csrf}">
  <input type="hidden" name="token" value="${v.token}">
  <button type="submit">Sign in</button>
</form>`,
  );
}

/** The one answer to a sign-up, whether the e-mail was new or already had an account. */
export function signUpSentPage(v: { email: string | null }) {
  return page(
    { title: 'Check your e-mail' },
    html`<p class="info" role="status">Check your e-mail: we sent a link to ${v.email ?? 'the address you gave'} to finish signing up.</p>
<p>The link works once, for 24 hours. No mail? Look in the spam folder, or <a href="/login">sign in</a> and have a new one sent.</p>`,
  );
}

/** The sign-up mail's link opens this page; its button confirms the address (a GET never does: mail scanners fetch links). */
export function verifyEmailPage(v: { csrf: string; token: string; error?: string }) {
  return page(
    { title: 'Confirm your e-mail address' },
    html`${notice('error', v.error)}
${v.token
  ? html`<form method="post" action="/signup/verify" class="stack">
  <input type="hidden" name="_csrf" value="${v.csrf}">
  <input type="hidden" name="token" value="${v.token}">
  <button type="submit">Confirm and sign in</button>
</form>`
  : html`<p><a href="/login">Sign in</a> to have a new link sent.</p>`}`,
  );
}

export function forgotPasswordPage(v: { csrf: string; email?: string; error?: string }) {
  return page(
    { title: 'Forgot your password?' },
    html`${notice('error', v.error)}
<p>Give the e-mail address of your account: we send it a link to choose a new password.</p>
<form method="post" action="/password/forgot" class="stack">
  <input type="hidden" name="_csrf" value="${v.csrf}">
  <label>Email <input type="email" name="email" autocomplete="email" required maxlength="254" value="${v.email ?? ''}"></label>
  <button type="submit">Send the link</button>
</form>
<p><a href="/login">Back to sign in</a></p>`,
  );
}

export function forgotPasswordSentPage() {
  return page(
    { title: 'Check your e-mail' },
    html`<p class="info" role="status">If an account exists for that address, we sent it a link to choose a new password. The link works once, for 30 minutes.</p>
<p><a href="/login">Back to sign in</a></p>`,
  );
}

/** A reset link opens this form (the link is checked first); posting it sets the password and uses the link up. */
export function resetPasswordPage(v: { csrf: string; token: string; error?: string; invalid?: boolean }) {
  if (v.invalid) {
    return page(
      { title: 'This link does not work' },
      html`<p class="error" role="alert">${v.error ?? 'This password reset link is invalid, used or expired.'}</p>
<p class="links"><a href="/password/forgot">Ask for a new link</a> <a href="/login">Sign in</a></p>`,
    );
  }
  return page(
    { title: 'Choose a new password' },
    html`${notice('error', v.error)}
<form method="post" action="/password/reset" class="stack">
  <input type="hidden" name="_csrf" value="${v.csrf}">
  <input type="hidden" name="token" value="${v.token}">
  <label>New password (at least 12 characters) <input type="password" name="new_password" autocomplete="new-password" required minlength="12" maxlength="256"></label>
  <button type="submit">Set the password</button>
</form>
<p>Every session of the account is signed out; this browser is signed in.</p>`,
  );
}
