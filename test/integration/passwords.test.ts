import type { MikroORM } from '@mikro-orm/postgresql';
import argon2, { parseOptions } from '@node-rs/argon2';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import {
  checkNewPassword,
  DUMMY_HASH,
  hashPassword,
  isCommonPassword,
  MAX_PASSWORD_LENGTH,
  MIN_PASSWORD_LENGTH,
  needsRehash,
  PASSWORD_HASH_PARAMS,
  verifyPassword,
} from '../../core/accounts/passwords.ts';
import type { Credential } from '../../core/auth/principals.ts';
import { createContext, type CoreDeps } from '../../core/context.ts';
import { CoreError } from '../../core/errors.ts';
import { createCaller } from '../../core/router.ts';
import { makeAccount, openTestOrm, testDeps, uniqueEmail } from '../support/db.ts';
import { refusal } from '../support/refusal.ts';

// argon2's verify, still doing its work, with its calls recorded: sign-in's work is counted, not
// timed. A spy on the module object, not a module mock: this file's modules may have been loaded
// by another file in the same process (vitest.config.ts, the integration tier).
const argon2Verify = vi.spyOn(argon2, 'verify');
afterAll(() => argon2Verify.mockRestore());

/** Passwords: argon2id hashes, the rules for a new one, and the operator's `setPassword`. */
let orm: MikroORM;
let deps: CoreDeps;
beforeAll(async () => {
  orm = await openTestOrm();
  deps = testDeps(orm);
});
afterAll(() => orm.close());

const as = (credential: Credential) => createCaller(createContext(deps, credential));
const internal = () => as({ kind: 'internal' });
const GOOD = 'correct horse battery staple';


function ruleBroken(password: string, opts: { email?: string } = {}) {
  try {
    checkNewPassword(password, opts);
  } catch (err) {
    expect(err).toBeInstanceOf(CoreError);
    const e = err as CoreError;
    return { code: e.code, param: e.param, reason: e.reason, message: e.message };
  }
  return undefined;
}

describe('hashing', () => {
  it('hashes with argon2id in PHC form, a fresh salt each time; verify accepts the password and nothing else', async () => {
    const hash = await hashPassword(GOOD);
    expect(hash).toMatch(/^\$argon2id\$v=19\$m=19456,t=2,p=1\$[A-Za-z0-9+/]+\$[A-Za-z0-9+/]+$/);
    expect(hash).not.toContain(GOOD);
    expect(await hashPassword(GOOD)).not.toBe(hash);
    expect(await verifyPassword(hash, GOOD)).toBe(true);
    expect(await verifyPassword(hash, `${GOOD} `)).toBe(false);
    expect(await verifyPassword(hash, GOOD.toUpperCase())).toBe(false);
    expect(needsRehash(hash)).toBe(false);
  });

  it('no stored hash, or a stored text that is no hash, never verifies', async () => {
    expect(await verifyPassword(null, GOOD)).toBe(false);
    expect(await verifyPassword(undefined, GOOD)).toBe(false);
    expect(await verifyPassword('not a hash', GOOD)).toBe(false);
    expect(needsRehash('not a hash')).toBe(true);
  });

  it('the dummy hash that an unknown email is checked against has the parameters of real hashes', () => {
    const dummy = parseOptions(DUMMY_HASH);
    const real = PASSWORD_HASH_PARAMS;
    expect({ algorithm: dummy.algorithm, m: dummy.memoryCost, t: dummy.timeCost, p: dummy.parallelism, len: dummy.outputLen }).toEqual({
      algorithm: real.algorithm,
      m: real.memoryCost,
      t: real.timeCost,
      p: real.parallelism,
      len: real.outputLen,
    });
    expect(needsRehash(DUMMY_HASH)).toBe(false);
  });

  it('the same password typed with composed or decomposed accents is the same password', async () => {
    const composed = 'caf\u00e9 au lait, s\u2019il vous pla\u00eet';
    const decomposed = composed.normalize('NFD');
    expect(decomposed).not.toBe(composed);
    expect(await verifyPassword(await hashPassword(composed), decomposed)).toBe(true);
  });
});

describe('rules for a new password', () => {
  it(`refuses fewer than ${MIN_PASSWORD_LENGTH} characters and more than ${MAX_PASSWORD_LENGTH}, naming 'password' and not the value`, () => {
    const short = 'Zq8#kL2!mP4';
    expect(short).toHaveLength(MIN_PASSWORD_LENGTH - 1);
    const tooShort = ruleBroken(short)!;
    expect(tooShort).toMatchObject({ code: 'invalid_request', param: 'password', reason: 'password_too_short' });
    expect(tooShort.message).toMatch(/password/i);
    expect(tooShort.message).not.toContain(short);
    expect(ruleBroken(`${short}x`)).toBeUndefined();

    const long = 'a1B2'.repeat(MAX_PASSWORD_LENGTH / 4) + 'x';
    expect(ruleBroken(long)).toMatchObject({ param: 'password', reason: 'password_too_long' });
    expect(ruleBroken(long.slice(1))).toBeUndefined();
    // Characters, not UTF-16 units: 12 emoji are 12 characters.
    expect(ruleBroken('\u{1F600}'.repeat(MIN_PASSWORD_LENGTH))).toBeUndefined();
  });

  it('refuses the most common passwords, whatever their case', () => {
    for (const common of ['qwerty123456', 'QWERTY123456', '1qaz2wsx3edc', 'password1234', '123456789012', 'administrator']) {
      const broken = ruleBroken(common)!;
      expect(broken, common).toMatchObject({ code: 'invalid_request', param: 'password', reason: 'password_too_common' });
      expect(broken.message).toMatch(/password/i);
      expect(broken.message.toLowerCase()).not.toContain(common.toLowerCase());
    }
    // The list holds the top 1,000 too (refused by their length already).
    for (const top of ['123456', 'password', 'qwerty', 'iloveyou', 'letmein', 'trustno1']) expect(isCommonPassword(top), top).toBe(true);
    expect(isCommonPassword(GOOD)).toBe(false);
  });

  it("refuses the account's own email address", () => {
    expect(ruleBroken('someone.long@example.com', { email: 'Someone.Long@example.com' })).toMatchObject({ reason: 'password_like_email' });
    expect(ruleBroken('someone.longer', { email: 'someone.longer@example.com' })).toMatchObject({ reason: 'password_like_email' });
    expect(ruleBroken(GOOD, { email: 'someone.long@example.com' })).toBeUndefined();
  });
});

describe('passwords through core', () => {
  it('sign-up with a short or common password is refused with a message naming the password field, never its value', async () => {
    for (const [password, reason] of [
      ['short-pw', 'password_too_short'],
      ['qwerty123456', 'password_too_common'],
    ] as const) {
      const err = await refusal(as({ kind: 'none' }).accounts.signUp({ email: uniqueEmail(), password }));
      expect(err).toMatchObject({ code: 'invalid_request', param: 'password', reason });
      expect(err.message).toMatch(/password/i);
      expect(err.message).not.toContain(password);
    }
    const huge = await refusal(as({ kind: 'none' }).accounts.signIn({ email: uniqueEmail(), password: 'x'.repeat(5000) }));
    expect(huge).toMatchObject({ code: 'invalid_request', param: 'password' });
    expect(huge.message).not.toContain('xxxx');
  });

  it("an operator sets an account's password: the same rules, an argon2id hash stored, the account's sessions ended", async () => {
    const account = await makeAccount(orm);
    const weak = await refusal(internal().accounts.setPassword({ account: account.email, password: 'password1234' }));
    expect(weak).toMatchObject({ code: 'invalid_request', param: 'password', reason: 'password_too_common' });

    const set = await internal().accounts.setPassword({ account: account.email, password: GOOD });
    expect(set).toMatchObject({ id: account.id, object: 'account', password_set: true, sessions_ended: 0 });
    expect(JSON.stringify(set)).not.toContain(GOOD);
    const [row] = await orm.em.fork().execute<{ password_hash: string }[]>('select password_hash from accounts where id = ?', [account.id]);
    expect(row!.password_hash).toMatch(/^\$argon2id\$/);

    const signedIn = await as({ kind: 'none' }).accounts.signIn({ email: account.email.toUpperCase(), password: GOOD });
    expect(signedIn.account.id).toBe(account.id);
    const again = await internal().accounts.setPassword({ account: account.id, password: `${GOOD}!` });
    expect(again.sessions_ended).toBe(1);
    expect((await refusal(as({ kind: 'session', token: signedIn.token }).accounts.me())).reason).toBe('invalid_session');

    // Only operators: a session or no credential cannot set a password.
    expect((await refusal(as({ kind: 'session', token: null }).accounts.setPassword({ account: account.id, password: GOOD }))).code).toBe('unauthorized');
    expect((await refusal(as({ kind: 'none' }).accounts.setPassword({ account: account.id, password: GOOD }))).code).toBe('unauthorized');
  });

  it('an unknown email spends one hash verification, as a wrong password does', async () => {
    const account = await makeAccount(orm);
    await internal().accounts.setPassword({ account: account.id, password: GOOD });
    const [row] = await orm.em.fork().execute<{ password_hash: string }[]>('select password_hash from accounts where id = ?', [account.id]);
    // The work counted, not timed: the argon2 verifications each sign-in runs, the parameters of
    // the hash each is checked against (its cost), and that each really ran (a hash argon2
    // cannot read is refused at once, without the work).
    const verifications = async (email: string) => {
      argon2Verify.mockClear();
      const answer = await refusal(as({ kind: 'none' }).accounts.signIn({ email, password: 'wrong password, long enough' }));
      await Promise.allSettled(argon2Verify.mock.results.map((r) => r.value));
      const work = argon2Verify.mock.calls.map(([hash], i) => {
        const o = parseOptions(hash);
        return { params: { algorithm: o.algorithm, m: o.memoryCost, t: o.timeCost, p: o.parallelism }, ran: argon2Verify.mock.settledResults[i] };
      });
      return { answer, work };
    };
    const cost = (() => {
      const o = parseOptions(row!.password_hash);
      return { algorithm: o.algorithm, m: o.memoryCost, t: o.timeCost, p: o.parallelism };
    })();
    const wrong = await verifications(account.email);
    const unknown = await verifications(uniqueEmail('nobody'));
    expect(wrong.work).toEqual([{ params: cost, ran: { type: 'fulfilled', value: false } }]);
    expect(wrong.answer.code).toBe('unauthorized');
    // The same answer after the same work.
    expect(unknown).toEqual(wrong);
  });
});
