import fs from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { MailMessage, Mailer } from '../../core/ports.ts';

/**
 * The mail of tests. `testDeps` wires `testMailbox`, a Mailer that keeps every message in
 * memory (the service sends mail only to people, a third party's inbox: a fake is right here;
 * test/support/mailpit.ts and test/integration/mail.test.ts send through a real SMTP server).
 * Sign-up sends its mail as it answers, so the message is in the box when the call returns.
 */
export class CapturingMailer implements Mailer {
  readonly sent: MailMessage[] = [];
  private waiters: { to: string; after: number; resolve: (m: MailMessage) => void }[] = [];

  send(message: MailMessage): Promise<void> {
    this.sent.push(message);
    for (const w of [...this.waiters]) {
      const found = this.find(w.to, w.after);
      if (found) {
        this.waiters = this.waiters.filter((x) => x !== w);
        w.resolve(found);
      }
    }
    return Promise.resolve();
  }

  /** The messages sent to this address (any case). */
  to(email: string): MailMessage[] {
    return this.sent.filter((m) => m.to.toLowerCase() === email.toLowerCase());
  }

  private find(email: string, after: number): MailMessage | undefined {
    return this.to(email).slice(after).at(-1);
  }

  /** The newest message to the address after the first `after` of them; waits for it (the test's timeout bounds the wait). */
  next(email: string, after = 0): Promise<MailMessage> {
    const found = this.find(email, after);
    if (found) return Promise.resolve(found);
    return new Promise((resolve) => this.waiters.push({ to: email, after, resolve }));
  }

  /** The token of the newest link of this kind mailed to the address. */
  tokenFor(email: string, kind: 'verify' | 'reset'): string {
    const link = this.to(email)
      .map((m) => m.link)
      .filter((l): l is string => l !== undefined && tokenOf(l).startsWith(`mas_${kind}_`))
      .at(-1);
    if (!link) throw new Error(`no ${kind} link was mailed to ${email} (mailed: ${this.to(email).map((m) => m.subject).join(', ') || 'nothing'})`);
    return tokenOf(link);
  }
}

/** The token in a mailed link (`…?token=…`). */
export const tokenOf = (link: string) => new URL(link).searchParams.get('token') ?? '';

/** The one mailbox of this test process: every `testDeps` sends here; addresses are unique per test. */
export const testMailbox = new CapturingMailer();

/** The first link of a mail's text. */
export const linkIn = (text: string) => /https?:\/\/\S+/.exec(text)?.[0];

/** The text part of an RFC 822 message (as nodemailer writes it: 7bit or quoted-printable). */
export function textOfEml(eml: string): string {
  const qp = /content-transfer-encoding:\s*quoted-printable/i.test(eml);
  const body = eml.slice(eml.search(/\r?\n\r?\n/) + 1);
  return qp ? body.replace(/=\r?\n/g, '').replace(/=([0-9A-F]{2})/g, (_m, hex: string) => String.fromCharCode(parseInt(hex, 16))) : body;
}

/**
 * The link of the newest .eml under `dir` (DATA_DIR/mail: the no-SMTP mode) addressed to
 * `email` whose link contains `contains`; waits for it (the test's timeout bounds the wait).
 */
export async function linkFromMailDir(dir: string, email: string, contains: string): Promise<string> {
  for (;;) {
    const names = (await fs.readdir(dir).catch(() => [] as string[])).filter((n) => n.endsWith('.eml')).sort().reverse();
    for (const name of names) {
      const eml = await fs.readFile(path.join(dir, name), 'utf8');
      if (!new RegExp(`^To: ${email.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}$`, 'im').test(eml)) continue;
      const link = linkIn(textOfEml(eml));
      if (link?.includes(contains)) return link;
    }
    await sleep(50);
  }
}
