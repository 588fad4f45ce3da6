import type { Page } from 'playwright-core';
import { createContext, type CoreDeps } from '../../core/context.ts';
import { createCaller } from '../../core/router.ts';
import type { SignedIn } from '../../core/accounts/sign-in.ts';
import { CapturingMailer, testMailbox } from './mail.ts';

/** The mailbox a test's deps send to (testDeps': `testMailbox`). */
export const mailboxOf = (deps: CoreDeps): CapturingMailer => (deps.mailer instanceof CapturingMailer ? deps.mailer : testMailbox);

/**
 * A new account as a person makes one: sign-up, then the confirmation link mailed to the
 * address (read from the test mailbox), which confirms it and signs in. Tests that need a
 * signed-in, confirmed account start here rather than around the rule.
 */
export async function signUpVerified(deps: CoreDeps, input: { email: string; password: string }, ctx: { clientIp?: string } = {}): Promise<SignedIn> {
  const anonymous = () => createCaller(createContext(deps, { kind: 'none' }, ctx));
  await anonymous().accounts.signUp(input);
  return anonymous().accounts.verifyEmail({ token: mailboxOf(deps).tokenFor(input.email, 'verify') });
}

/**
 * In a real browser that just submitted the sign-up form: waits for "Check your e-mail", opens
 * the link mailed to `email` (from the test mailbox) and presses its button; the page is then
 * the account's overview, signed in.
 */
export async function confirmInBrowser(page: Page, base: string, email: string): Promise<void> {
  await page.waitForURL(/\/signup\/sent$/);
  const link = new URL((await testMailbox.next(email)).link!);
  await page.goto(`${base}${link.pathname}${link.search}`);
  await page.getByRole('button', { name: 'Confirm and sign in' }).click();
  await page.waitForURL(/\/account\?verified=1$/);
}
