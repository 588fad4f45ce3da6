import { CoreError } from '../errors.ts';
import type { FailureCounter, RateLimiter } from '../ports.ts';

/**
 * Guessing passwords (or sign-in links) is slowed down per email and per client address:
 * each attempt counts, whether it succeeds or not, and past the limit every attempt is refused
 * for the rest of the window with the same answer.
 */
export async function countAttempt(
  deps: { attempts: { perEmail: RateLimiter; perIp: RateLimiter } },
  what: 'signin' | 'signup' | 'login_link' | 'reset_request' | 'reset' | 'verify' | 'resend_verification',
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

/**
 * Sign-in's limits (docs/accounts.md, "Sign-in limits"). Only failures count, each on three keys:
 *
 * - the pair (e-mail, client address): after `PAIR_FREE_FAILURES` consecutive failures the pair
 *   is refused for a minute, then 2, 4, 8 … up to 15 minutes after each further failure; a
 *   success forgets the pair's failures. This is what slows one guesser down.
 * - the client address, across e-mails (`PER_IP_FAILURES` in 15 minutes: spraying one password
 *   over many accounts), then refused for 15 minutes.
 * - the e-mail, across addresses (`PER_EMAIL_FAILURES` in 15 minutes: a guesser with many
 *   addresses), then refused for 15 minutes, except to a browser holding a device cookie of that
 *   account (core/auth/device-cookies.ts): guessing from elsewhere never locks the owner out.
 *
 * A refusal is the same for an unknown e-mail and a wrong password (the counts do not look at
 * whether the account exists) and says when to try again.
 */
export const PAIR_FREE_FAILURES = 5;
export const PAIR_FIRST_BLOCK_SECONDS = 60;
export const MAX_BLOCK_SECONDS = 15 * 60;
export const PER_IP_FAILURES = 30;
export const PER_EMAIL_FAILURES = 50;
/** The window of the per-address and per-e-mail counts; the pair's failures are forgotten after a day without one. */
export const FAILURE_WINDOW_SECONDS = 15 * 60;

export interface SignInLimits {
  pair: FailureCounter;
  perIp: FailureCounter;
  perEmail: FailureCounter;
}

/** How long the pair is refused after its `failures`-th consecutive failure: 0 for the first few, then doubling from a minute up to 15. */
export function pairBlockSeconds(failures: number): number {
  if (failures < PAIR_FREE_FAILURES) return 0;
  return Math.min(MAX_BLOCK_SECONDS, PAIR_FIRST_BLOCK_SECONDS * 2 ** Math.min(failures - PAIR_FREE_FAILURES, 10));
}

export interface SignInAttempt {
  email: string;
  ip: string | undefined;
  /** The browser holds a valid device cookie of the account this e-mail names. */
  trustedDevice: boolean;
}

const keysOf = (who: SignInAttempt) => {
  const email = who.email.trim().toLowerCase();
  return { email, pair: `${email}|${who.ip ?? '-'}`, ip: who.ip };
};

export const tooManyAttempts = (seconds: number) => {
  const minutes = Math.max(1, Math.ceil(seconds / 60));
  return new CoreError('rate_limited', `Too many attempts. Try again in ${minutes} minute${minutes === 1 ? '' : 's'}.`, {
    reason: 'too_many_attempts',
    retryAfterSeconds: seconds,
  });
};

/** Refuses the attempt while one of its keys is blocked (the e-mail's lock not for a trusted device), saying how long for. */
export async function checkSignInAllowed(limits: SignInLimits, who: SignInAttempt): Promise<void> {
  const k = keysOf(who);
  const waits = await Promise.all([
    limits.pair.blockedFor(k.pair),
    k.ip ? limits.perIp.blockedFor(k.ip) : 0,
    who.trustedDevice ? 0 : limits.perEmail.blockedFor(k.email),
  ]);
  const wait = Math.max(...waits);
  if (wait > 0) throw tooManyAttempts(wait);
}

/** Counts a failed attempt on its three keys, and blocks those past their limit. */
export async function signInFailed(limits: SignInLimits, who: SignInAttempt): Promise<void> {
  const k = keysOf(who);
  const [pair, ip, email] = await Promise.all([limits.pair.fail(k.pair), k.ip ? limits.perIp.fail(k.ip) : 0, limits.perEmail.fail(k.email)]);
  const pairBlock = pairBlockSeconds(pair);
  await Promise.all([
    pairBlock > 0 ? limits.pair.block(k.pair, pairBlock) : undefined,
    k.ip && ip >= PER_IP_FAILURES ? limits.perIp.block(k.ip, MAX_BLOCK_SECONDS) : undefined,
    email >= PER_EMAIL_FAILURES ? limits.perEmail.block(k.email, MAX_BLOCK_SECONDS) : undefined,
  ]);
}

/** A success forgets the pair's failures (the others run out with their window). */
export async function signInSucceeded(limits: SignInLimits, who: SignInAttempt): Promise<void> {
  await limits.pair.reset(keysOf(who).pair);
}
