import type { Logger } from 'pino';
import type { MailMessage, Mailer } from '../ports.ts';

/**
 * Where the links of the service's mails lead: the account pages, wherever configuration puts
 * them (adapters/web/links.ts, wired in config/compose.ts). Core names no route itself.
 */
export interface AccountLinks {
  verifyEmail(token: string): string;
  resetPassword(token: string): string;
  /** An invitation to an organization (core/organizations/invitations.ts). */
  invitation(token: string): string;
  signIn: string;
  forgotPassword: string;
  account: string;
  /** Where a person adds credits (the billing part of the account pages): the 402 answers name it. */
  addCredits: string;
}

const SIGNATURE = '\n\n-- \nModel Access Service\n';

export function verificationMail(to: string, link: string): MailMessage {
  return {
    to,
    subject: 'Confirm your e-mail address',
    text:
      `Someone (we hope you) created an account with this e-mail address.\n\n` +
      `Open this link to confirm the address and finish signing up (valid 24 hours, once):\n\n${link}\n\n` +
      `If it was not you, ignore this mail: nothing more happens.` +
      SIGNATURE,
    link,
  };
}

export function accountExistsMail(to: string, links: AccountLinks): MailMessage {
  return {
    to,
    subject: 'Someone tried to sign up with your e-mail address',
    text:
      `Someone (maybe you) tried to create an account with this e-mail address, but it already has one.\n\n` +
      `To sign in: ${links.signIn}\n` +
      `Forgot your password? Set a new one: ${links.forgotPassword}\n\n` +
      `If it was not you, ignore this mail: your account is unchanged.` +
      SIGNATURE,
  };
}

export function passwordResetMail(to: string, link: string): MailMessage {
  return {
    to,
    subject: 'Reset your password',
    text:
      `Someone (we hope you) asked to reset the password of the account with this e-mail address.\n\n` +
      `Open this link to choose a new password (valid 30 minutes, once):\n\n${link}\n\n` +
      `Setting a new password signs the account out everywhere. If you did not ask, ignore this mail: your password is unchanged.` +
      SIGNATURE,
    link,
  };
}

export function lowBalanceMail(to: string, v: { balance: string; threshold: string; account: string }): MailMessage {
  return {
    to,
    subject: `Your balance is below ${v.threshold} coins`,
    text:
      `Your balance is ${v.balance} coins, below the ${v.threshold} coins you asked to be told about.\n\n` +
      `Add credits or change this notice: ${v.account}\n\n` +
      `You get this mail once each time the balance falls below the threshold.` +
      SIGNATURE,
  };
}

/**
 * Sends a mail after the answer: the answer must not wait for (nor, by its timing, tell about)
 * the mail. A failure is logged without the message's link (a secret).
 */
export function sendLater(deps: { mailer: Mailer; logger: Logger }, message: MailMessage): void {
  void deps.mailer.send(message).catch((err: unknown) => {
    deps.logger.error({ err: err instanceof Error ? { message: err.message, name: err.name } : String(err), subject: message.subject }, 'mail not sent');
  });
}
