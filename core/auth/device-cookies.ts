import { createHmac, timingSafeEqual } from 'node:crypto';

/**
 * Device cookies (OWASP, "Slow Down Online Guessing Attacks with Device Cookies"): each
 * successful sign-in gives the browser a long-lived signed token, `<account>.<issued at>.<HMAC>`,
 * that says "this browser signed in to this account before". A browser presenting a valid one
 * for the account it signs in to is not held by the lock that guessing from elsewhere puts on
 * that account's e-mail (core/accounts/attempts.ts): an attacker cannot lock the owner out.
 * It is not a credential: it signs nobody in, and its own failures still count.
 */
export const DEVICE_COOKIE_SECONDS = 180 * 24 * 3600;
const VERSION = 'd1';

export interface DeviceCookies {
  issue(accountId: string, now: Date): string;
  /** The account the token was issued for, if it is well signed and younger than `DEVICE_COOKIE_SECONDS`; else null. */
  accountOf(token: string | null | undefined, now: Date): string | null;
}

export function deviceCookies(secret: string): DeviceCookies {
  const mac = (body: string) => createHmac('sha256', secret).update(`device:${body}`).digest('base64url');
  return {
    issue(accountId, now) {
      const body = `${VERSION}.${accountId}.${Math.floor(now.getTime() / 1000)}`;
      return `${body}.${mac(body)}`;
    },
    accountOf(token, now) {
      if (!token || token.length > 300) return null;
      const parts = token.split('.');
      if (parts.length !== 4 || parts[0] !== VERSION) return null;
      const [version, accountId, issued, signature] = parts as [string, string, string, string];
      const expected = Buffer.from(mac(`${version}.${accountId}.${issued}`));
      const given = Buffer.from(signature);
      if (given.length !== expected.length || !timingSafeEqual(given, expected)) return null;
      const issuedAt = Number(issued) * 1000;
      if (!/^\d{1,12}$/.test(issued) || issuedAt > now.getTime() + 60_000 || now.getTime() - issuedAt > DEVICE_COOKIE_SECONDS * 1000) return null;
      return accountId;
    },
  };
}
