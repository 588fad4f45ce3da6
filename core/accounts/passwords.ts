import { readFileSync } from 'node:fs';
// Called through the module object, so that a test can count the verifications (vi.spyOn) in a
// process where this module was loaded before (test files share their modules: vitest.config.ts).
import argon2, { hash, parseOptions, type Algorithm, type Options } from '@node-rs/argon2';
import { z } from 'zod';
import { invalid } from '../errors.ts';

/**
 * Passwords of the account pages: argon2id (OWASP's parameters: 19 MiB, 2 passes, 1 lane),
 * stored in PHC form (`$argon2id$v=19$m=19456,t=2,p=1$salt$hash`). A new password has 12 to
 * 256 characters and is not one of the most common passwords (common-passwords.txt).
 *
 * A password is never logged and never part of an error message: the errors here name the
 * field (`password`) and the rule, not the value.
 */
export const MIN_PASSWORD_LENGTH = 12;
export const MAX_PASSWORD_LENGTH = 256;

/** `Algorithm.Argon2id`: the package's enum is a `const enum`, which isolated modules cannot read. */
const ARGON2ID = 2 as Algorithm;
const PARAMS = { algorithm: ARGON2ID, memoryCost: 19_456, timeCost: 2, parallelism: 1, outputLen: 32 } satisfies Options;

/**
 * The hash of a random secret nobody kept, made with `PARAMS`: sign-in verifies against it when
 * the email is unknown (or its account has no password), so that answer takes as long as a
 * wrong password does. A test checks that its parameters are `PARAMS`.
 */
export const DUMMY_HASH = '$argon2id$v=19$m=19456,t=2,p=1$2I2K+j0dhXpczYv/TbBBKw$1mCv3+1b68sy0n8yLK0qPAjGHy2snpFhQYgOSRD4Hd8';

/**
 * A password as a procedure's input: bounded, so that nothing larger reaches a hash. The rules
 * for a new password are `checkNewPassword`'s, with their own messages; a password typed to sign
 * in is only bounded (a long wrong one is as wrong as a short one).
 */
export const passwordInput = z.string().min(1, 'must not be empty').max(4 * MAX_PASSWORD_LENGTH, 'is too long');

/** The same text for the same password however it was typed (composed or decomposed accents, full-width forms). */
function normalize(password: string): string {
  return password.normalize('NFKC');
}

let common: Set<string> | undefined;
function commonPasswords(): Set<string> {
  common ??= new Set(
    readFileSync(new URL('./common-passwords.txt', import.meta.url), 'utf8')
      .split('\n')
      .map((line) => line.trim())
      .filter((line) => line !== '' && !line.startsWith('#')),
  );
  return common;
}

/** True when the password is on the list of common passwords (compared in lower case). */
export function isCommonPassword(password: string): boolean {
  return commonPasswords().has(normalize(password).toLowerCase());
}

/**
 * Refuses a new password that breaks a rule, with a message naming `password` (or `param`) and
 * the rule, never the value. `email`: the account's, which the password may not be.
 */
export function checkNewPassword(password: string, opts: { email?: string; param?: string } = {}): void {
  const param = opts.param ?? 'password';
  const text = normalize(password);
  const length = [...text].length;
  if (length < MIN_PASSWORD_LENGTH) {
    throw invalid(param, `The ${label(param)} must be at least ${MIN_PASSWORD_LENGTH} characters long.`, 'password_too_short');
  }
  if (length > MAX_PASSWORD_LENGTH) {
    throw invalid(param, `The ${label(param)} must be at most ${MAX_PASSWORD_LENGTH} characters long.`, 'password_too_long');
  }
  const lower = text.toLowerCase();
  if (commonPasswords().has(lower)) {
    throw invalid(param, `This ${label(param)} is one of the most common passwords; choose another.`, 'password_too_common');
  }
  const email = opts.email?.trim().toLowerCase();
  if (email && (lower === email || lower === email.split('@')[0])) {
    throw invalid(param, `The ${label(param)} must not be the account's email address.`, 'password_like_email');
  }
}

const label = (param: string) => param.replace(/_/g, ' ');

/** The argon2id hash of a password, in PHC form, with a fresh random salt. */
export async function hashPassword(password: string): Promise<string> {
  return hash(normalize(password), PARAMS);
}

/**
 * True when the password matches the stored hash. Any stored text that is not a hash this
 * package can read answers false. Without a stored hash, the dummy one is verified instead, so
 * that "no such account" costs the same time as "wrong password", and the answer is false.
 */
export async function verifyPassword(stored: string | null | undefined, password: string): Promise<boolean> {
  const ok = await argon2.verify(stored ?? DUMMY_HASH, normalize(password)).catch(() => false);
  return ok && stored != null;
}

/** True when a stored hash was made with other parameters than today's: sign-in then stores a new one. */
export function needsRehash(stored: string): boolean {
  try {
    const o = parseOptions(stored);
    return (
      o.algorithm !== PARAMS.algorithm ||
      o.memoryCost !== PARAMS.memoryCost ||
      o.timeCost !== PARAMS.timeCost ||
      o.parallelism !== PARAMS.parallelism ||
      o.outputLen !== PARAMS.outputLen
    );
  } catch {
    return true;
  }
}

/** The parameters new hashes are made with (tests compare the dummy hash with them). */
export const PASSWORD_HASH_PARAMS = PARAMS;
