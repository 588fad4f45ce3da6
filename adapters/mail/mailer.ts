import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import type { Transporter } from 'nodemailer';
import { loadOnce } from '../load-once.ts';
import type { Logger } from 'pino';
import type { MailMessage, Mailer } from '../../core/ports.ts';

/**
 * nodemailer (about 5 MiB of heap, 15 of RSS) is imported on the first message: most processes
 * never send one. SMTP_URL's form is checked at start (config/env.ts).
 */
function onFirstUse(make: (nm: typeof import('nodemailer').default) => Transporter): () => Promise<Transporter> {
  return loadOnce(async () => make((await import('nodemailer')).default));
}

/**
 * The service's mail (core's `Mailer` port), through nodemailer:
 *
 * - with `SMTP_URL` (`smtp://user:pass@host:587`, `smtps://…`), each message goes to that
 *   server; nothing of the message (and never its link, a secret) is logged;
 * - without it (a fresh machine, the default), each message is written, as the RFC 822 bytes
 *   nodemailer would have sent, to `DATA_DIR/mail/<time>-<id>.eml`, and its link is logged at
 *   info: nothing is lost, and a person on the machine can follow it. This dev mode is the only
 *   place a link is ever logged.
 *
 * `from` is MAIL_FROM, whose default config/env.ts derives from PUBLIC_BASE_URL's host.
 */
export function createMailer(opts: { smtpUrl?: string | undefined; from: string; dataDir: string; logger: Logger }): Mailer & { mode: 'smtp' | 'files' } {
  const { from } = opts;
  if (opts.smtpUrl) {
    const smtpUrl = opts.smtpUrl;
    const transport = onFirstUse((nm) => nm.createTransport(smtpUrl));
    return {
      mode: 'smtp',
      async send(m: MailMessage) {
        await (await transport()).sendMail({ from, to: m.to, subject: m.subject, text: m.text, ...(m.html ? { html: m.html } : {}) });
      },
    };
  }
  const dir = path.join(opts.dataDir, 'mail');
  const transport = onFirstUse((nm) => nm.createTransport({ streamTransport: true, buffer: true, newline: 'unix' }));
  return {
    mode: 'files',
    async send(m: MailMessage) {
      const info = await (await transport()).sendMail({ from, to: m.to, subject: m.subject, text: m.text, ...(m.html ? { html: m.html } : {}) });
      await fs.mkdir(dir, { recursive: true, mode: 0o700 });
      const file = path.join(dir, `${new Date().toISOString().replace(/[:.]/g, '-')}-${randomBytes(4).toString('hex')}.eml`);
      await fs.writeFile(file, info.message as Buffer, { mode: 0o600 });
      // SMTP_URL is not set: this file is the only copy, so say where it is and what to open.
      opts.logger.info({ mail: { to: m.to, subject: m.subject, file, ...(m.link ? { link: m.link } : {}) } }, 'mail written to a file (no SMTP_URL set)');
    },
  };
}
