import { CoreError } from '../errors.ts';
import type { RateLimiter } from '../ports.ts';

/**
 * Guessing passwords (or sign-in links) is slowed down per email and per client address:
 * each attempt counts, whether it succeeds or not, and past the limit every attempt is refused
 * for the rest of the window with the same answer.
 */
export async function countAttempt(
  deps: { attempts: { perEmail: RateLimiter; perIp: RateLimiter } },
  what: 'signin' | 'signup' | 'login_link',
  who: { email?: string | undefined; ip?: string | undefined },
): Promise<void> {
  const counts = await Promise.all([
    who.email ? deps.attempts.perEmail.consume(`${what}:${who.email.trim().toLowerCase()}`) : undefined,
    who.ip ? deps.attempts.perIp.consume(`${what}:${who.ip}`) : undefined,
  ]);
  const refused = counts.find((c) => c && !c.allowed);
  if (refused) {
    const minutes = Math.max(1, Math.ceil(refused.resetSeconds / 60));
    throw new CoreError('rate_limited', `Too many attempts. Try again in ${minutes} minute${minutes === 1 ? '' : 's'}.`, {
      reason: 'too_many_attempts',
      retryAfterSeconds: refused.resetSeconds,
    });
  }
}
