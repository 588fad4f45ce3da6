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
