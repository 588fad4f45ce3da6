import type { MikroORM } from '@mikro-orm/postgresql';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { failJob } from '../../core/generations/end-job.ts';
import { runCli, type CliConnection } from '../../adapters/cli/mas.ts';
import { historyCsv } from '../../core/accounts/history-csv.ts';
import { signedInSchema, signUpAnswerSchema } from '../../core/accounts/sign-in.ts';
import { hashSecret } from '../../core/auth/secrets.ts';
import { LOGIN_LINK_SECONDS } from '../../core/auth/login-links.ts';
import type { Credential } from '../../core/auth/principals.ts';
import { createContext, type CoreDeps } from '../../core/context.ts';
import { generationListSchema } from '../../core/generations/list-generations.ts';
import { keySchema } from '../../core/keys/keys.ts';
import { parseCoins } from '../../core/money/coins.ts';
import { reserve } from '../../core/money/holds.ts';
import { walletHistorySchema } from '../../core/money/history.ts';
import { randomBase62 } from '../../core/ids.ts';
import { createCaller } from '../../core/router.ts';
import { toCoreError } from '../../core/trpc.ts';
import { makeAccount, makeKey, openTestOrm, testDeps, uniqueEmail } from '../support/db.ts';
import { refusal } from '../support/refusal.ts';
import { testMailbox, tokenOf } from '../support/mail.ts';
import { signUpVerified } from '../support/sign-up.ts';

/** The account pages' use cases, called with a session: sign-up, sign-in and out, passwords, login links, and the account's own things. */
let orm: MikroORM;
let deps: CoreDeps;
let now = new Date();
beforeAll(async () => {
  orm = await openTestOrm();
  deps = { ...testDeps(orm), clock: () => now };
});
/** The queued jobs this file makes by hand: ended (refunded) at the end, so no sweep elsewhere finds them stale. */
const madeJobs: string[] = [];
afterAll(async () => {
  for (const id of madeJobs) await failJob(orm.em.fork(), id, { message: 'test fixture', code: 'fixture' });
  await orm.close();
});

const as = (credential: Credential) => createCaller(createContext(deps, credential));
const anonymous = () => as({ kind: 'none' });
const session = (token: string | null) => as({ kind: 'session', token });
const internal = () => as({ kind: 'internal' });
const PASSWORD = 'correct horse battery staple';


/** True when the session token still works. */
async function alive(token: string): Promise<boolean> {
  return session(token)
    .accounts.me()
    .then(
      () => true,
      (e: unknown) => {
        if (toCoreError(e)?.reason === 'invalid_session') return false;
        throw e;
      },
    );
}

/** Signed up and confirmed through the mailed link (test/support/sign-up.ts): signed in. */
async function signedUp(email = uniqueEmail()) {
  return signUpVerified(deps, { email, password: PASSWORD });
}

describe('sign-up', () => {
  it('creates an unconfirmed account with an empty, unpaid wallet and its password, mails a link, and the link confirms and signs in', async () => {
    const email = uniqueEmail('signup');
    const res = await anonymous().accounts.signUp({ email, password: PASSWORD });
    expect(signUpAnswerSchema.parse(res)).toEqual(res);
    expect(res).toEqual({ object: 'signup', email, mail_sent: true });
    const [row] = await orm.em.fork().execute<{ id: string; password_hash: string; email_verified_at: Date | null }[]>('select id, password_hash, email_verified_at from accounts where email = ?', [email]);
    expect(row!.password_hash).toMatch(/^\$argon2id\$/);
    expect(row!.email_verified_at).toBeNull();
    const [mail] = testMailbox.to(email);
    expect(mail).toMatchObject({ to: email, subject: 'Confirm your e-mail address' });
    expect(mail!.text).toContain(mail!.link!);
    expect(mail!.link).toMatch(/^http:\/\/localhost\/signup\/verify\?token=mas_verify_/);
    expect(JSON.stringify(mail)).not.toContain(PASSWORD);
    // The token is stored hashed, for 24 hours.
    const token = tokenOf(mail!.link!);
    const [stored] = await orm.em.fork().execute<{ token_hash: string; seconds: number }[]>(
      "select token_hash, extract(epoch from expires_at - created_at)::int as seconds from account_tokens where account_id = ? and purpose = 'verify_email'",
      [row!.id],
    );
    expect(stored).toEqual({ token_hash: hashSecret(token), seconds: 24 * 3600 });
    const signedIn = await anonymous().accounts.verifyEmail({ token });
    expect(signedInSchema.parse(signedIn)).toEqual(signedIn);
    expect(signedIn).toMatchObject({ object: 'session', account: { id: row!.id, email, object: 'account', paid_account: false } });
    expect(signedIn.token).toMatch(/^mas_sess_/);
    const me = await session(signedIn.token).accounts.me();
    expect(me).toMatchObject({ id: row!.id, email_verified: true, balance: { coins: 0, paid_account: false } });
    // Once only.
    expect(await refusal(anonymous().accounts.verifyEmail({ token }))).toMatchObject({ code: 'invalid_request', reason: 'invalid_verification_link', param: 'token' });
  });

  it('a taken email, in any case, gets the same answer; the owner is mailed, the account is unchanged', async () => {
    const email = uniqueEmail('taken');
    const first = await signedUp(email);
    const before = await orm.em.fork().execute('select password_hash, email_verified_at from accounts where id = ?', [first.account.id]);
    const mailed = testMailbox.to(email).length;
    const again = await anonymous().accounts.signUp({ email: email.toUpperCase(), password: 'another password entirely' });
    expect(again).toEqual({ object: 'signup', email: email.toUpperCase(), mail_sent: true });
    const fresh = uniqueEmail('fresh');
    expect(Object.keys(await anonymous().accounts.signUp({ email: fresh, password: PASSWORD }))).toEqual(Object.keys(again));
    expect(await orm.em.fork().execute('select password_hash, email_verified_at from accounts where id = ?', [first.account.id])).toEqual(before);
    const notice = testMailbox.to(email).slice(mailed);
    expect(notice).toHaveLength(1);
    expect(notice[0]).toMatchObject({ subject: 'Someone tried to sign up with your e-mail address' });
    expect(notice[0]!.link).toBeUndefined();
    expect(notice[0]!.text).toContain('http://localhost/login');
    expect(notice[0]!.text).toContain('http://localhost/password/forgot');
    const cli = await makeAccount(orm);
    expect(await anonymous().accounts.signUp({ email: cli.email, password: PASSWORD })).toEqual({ object: 'signup', email: cli.email, mail_sent: true });
    expect(testMailbox.to(cli.email).at(-1)!.subject).toBe('Someone tried to sign up with your e-mail address');
  });

  it('an unconfirmed account signs in and sees its pages, but creates no key, allows no app and pays nothing until confirmed; it may have the link sent again', async () => {
    const email = uniqueEmail('unconfirmed');
    await anonymous().accounts.signUp({ email, password: PASSWORD });
    const signedIn = await anonymous().accounts.signIn({ email, password: PASSWORD });
    const me = session(signedIn.token);
    expect(await me.accounts.me()).toMatchObject({ email, email_verified: false });
    expect((await me.account.keys.list()).data).toEqual([]);
    const refused = await refusal(me.account.keys.create({ name: 'too early' }));
    expect(refused).toMatchObject({ code: 'forbidden', reason: 'email_not_verified' });
    expect(await refusal(me.payments.checkout({ amount_usd: '10' }))).toMatchObject({ reason: 'email_not_verified' });
    expect(await refusal(me.payments.subscribe({ plan: 'pro' }))).toMatchObject({ reason: 'email_not_verified' });
    const sent = testMailbox.to(email).length;
    expect(await me.accounts.resendVerification()).toEqual({ object: 'verification', email, verified: false, mail_sent: true });
    expect(testMailbox.to(email)).toHaveLength(sent + 1);
    await anonymous().accounts.verifyEmail({ token: testMailbox.tokenFor(email, 'verify') });
    expect(await me.accounts.me()).toMatchObject({ email_verified: true });
    await expect(me.account.keys.create({ name: 'now' })).resolves.toMatchObject({ object: 'api_key' });
    // Confirmed: nothing more is sent.
    expect(await me.accounts.resendVerification()).toEqual({ object: 'verification', email, verified: true, mail_sent: false });
    expect(testMailbox.to(email)).toHaveLength(sent + 1);
  });

  it('limits the resending of the link per account', async () => {
    const email = uniqueEmail('resend');
    await anonymous().accounts.signUp({ email, password: PASSWORD });
    const me = session((await anonymous().accounts.signIn({ email, password: PASSWORD })).token);
    for (let i = 0; i < 10; i++) await me.accounts.resendVerification();
    const refused = await refusal(me.accounts.resendVerification());
    expect(refused).toMatchObject({ code: 'rate_limited', reason: 'too_many_attempts' });
    expect(refused.retryAfterSeconds).toBeGreaterThan(0);
  });

  it('SIGNUP=closed refuses it, and creates nothing', async () => {
    const closed = { ...deps, config: { ...deps.config, signupOpen: false } };
    expect(await anonymous().accounts.signUpOpen()).toEqual({ object: 'signup', open: true });
    expect(await createCaller(createContext(closed, { kind: 'none' })).accounts.signUpOpen()).toEqual({ object: 'signup', open: false });
    const email = uniqueEmail('closed');
    const err = await refusal(createCaller(createContext(closed, { kind: 'none' })).accounts.signUp({ email, password: PASSWORD }));
    expect(err).toMatchObject({ code: 'forbidden', reason: 'signup_closed' });
    const rows = await orm.em.fork().execute('select 1 from accounts where lower(email) = lower(?)', [email]);
    expect(rows).toHaveLength(0);
    // Operators still create accounts.
    expect(await createCaller(createContext(closed, { kind: 'internal' })).accounts.create({ email })).toMatchObject({ email });
  });
});

describe('sign-in and sign-out', () => {
  it('an unknown email, an account without a password and a wrong password get exactly the same answer', async () => {
    const { account } = await signedUp();
    const cliMade = await makeAccount(orm);
    const wrong = await refusal(anonymous().accounts.signIn({ email: account.email, password: 'not the password at all' }));
    const unknown = await refusal(anonymous().accounts.signIn({ email: uniqueEmail('nobody'), password: 'not the password at all' }));
    const noPassword = await refusal(anonymous().accounts.signIn({ email: cliMade.email, password: 'not the password at all' }));
    expect(wrong).toEqual({ code: 'unauthorized', reason: 'invalid_credentials', message: 'Wrong email or password.', param: undefined });
    expect(unknown).toEqual(wrong);
    expect(noPassword).toEqual(wrong);
  });

  it('every sign-in starts a new session with a fresh token; the cookie sent with it ends', async () => {
    const { account, token: first } = await signedUp();
    const laptop = await anonymous().accounts.signIn({ email: account.email, password: PASSWORD });
    const phone = await anonymous().accounts.signIn({ email: account.email.toUpperCase(), password: PASSWORD });
    expect(new Set([first, laptop.token, phone.token]).size).toBe(3);
    expect(laptop.account).toEqual(account);
    // Signed in on two devices at once.
    expect(await alive(laptop.token)).toBe(true);
    expect(await alive(phone.token)).toBe(true);
    // Signing in again from the laptop, with its cookie: the old token stops working.
    const rotated = await session(laptop.token).accounts.signIn({ email: account.email, password: PASSWORD });
    expect(rotated.token).not.toBe(laptop.token);
    expect(await alive(laptop.token)).toBe(false);
    expect(await alive(rotated.token)).toBe(true);
    expect(await alive(phone.token)).toBe(true);
    const [row] = await orm.em.fork().execute<{ n: string }[]>('select count(*)::int as n from sessions where account_id = ?', [account.id]);
    expect(row!.n).toBe(3); // the sign-up's, the phone's and the rotated one
  });

  it('sign-out ends the session, and only that one', async () => {
    const { account, token } = await signedUp();
    const other = await anonymous().accounts.signIn({ email: account.email, password: PASSWORD });
    expect(await session(token).accounts.signOut()).toEqual({ object: 'session', signed_out: true });
    expect(await alive(token)).toBe(false);
    expect(await refusal(session(token).accounts.signOut())).toMatchObject({ code: 'unauthorized', reason: 'invalid_session' });
    expect(await alive(other.token)).toBe(true);
  });
});

describe('password change', () => {
  it('needs the current password, ends every session of the account and starts a new one for the caller', async () => {
    const { account, token } = await signedUp();
    const other = await anonymous().accounts.signIn({ email: account.email, password: PASSWORD });
    const next = 'a different passphrase, long enough';

    expect(await refusal(session(token).accounts.changePassword({ current_password: 'wrong wrong wrong', new_password: next }))).toMatchObject({
      code: 'invalid_request',
      param: 'current_password',
      reason: 'wrong_current_password',
    });
    expect(await refusal(session(token).accounts.changePassword({ new_password: next }))).toMatchObject({ reason: 'wrong_current_password' });
    expect(await refusal(session(token).accounts.changePassword({ current_password: PASSWORD, new_password: 'qwerty123456' }))).toMatchObject({
      param: 'new_password',
      reason: 'password_too_common',
    });
    expect(await alive(token)).toBe(true);
    expect(await alive(other.token)).toBe(true);

    const changed = await session(token).accounts.changePassword({ current_password: PASSWORD, new_password: next });
    expect(changed).toMatchObject({ object: 'session', account: { id: account.id } });
    expect(await alive(token)).toBe(false);
    expect(await alive(other.token)).toBe(false);
    expect(await alive(changed.token)).toBe(true);
    expect((await refusal(anonymous().accounts.signIn({ email: account.email, password: PASSWORD }))).reason).toBe('invalid_credentials');
    expect((await anonymous().accounts.signIn({ email: account.email, password: next })).account.id).toBe(account.id);
  });

  it('an account made without a password (a login link from the CLI) sets its first one without a current one', async () => {
    const account = await makeAccount(orm);
    const link = await internal().accounts.loginLink({ account: account.email });
    const signedIn = await anonymous().accounts.redeemLoginLink({ token: link.token });
    const changed = await session(signedIn.token).accounts.changePassword({ new_password: PASSWORD });
    expect(await alive(signedIn.token)).toBe(false);
    expect(await alive(changed.token)).toBe(true);
    expect((await anonymous().accounts.signIn({ email: account.email, password: PASSWORD })).account.id).toBe(account.id);
  });
});

describe('login links', () => {
  it('an operator makes a one-time token, stored hashed, that signs in once', async () => {
    const account = await makeAccount(orm);
    now = new Date();
    const link = await internal().accounts.loginLink({ account: account.id });
    expect(link).toMatchObject({ object: 'login_link', account: account.id, email: account.email, expires_at: new Date(now.getTime() + LOGIN_LINK_SECONDS * 1000).toISOString() });
    expect(link.token).toMatch(/^mas_login_/);
    const stored = await orm.em.fork().execute<{ token_hash: string }[]>('select token_hash from login_links where account_id = ?', [account.id]);
    expect(stored).toHaveLength(1);
    expect(stored[0]!.token_hash).toMatch(/^[0-9a-f]{64}$/);

    const signedIn = await anonymous().accounts.redeemLoginLink({ token: link.token });
    expect(signedIn).toMatchObject({ object: 'session', account: { id: account.id } });
    expect(await alive(signedIn.token)).toBe(true);

    const used = await refusal(anonymous().accounts.redeemLoginLink({ token: link.token }));
    expect(used).toMatchObject({ code: 'unauthorized', reason: 'invalid_login_link' });
    expect(await refusal(anonymous().accounts.redeemLoginLink({ token: `mas_login_${randomBase62(43)}` }))).toEqual(used);
    expect(await refusal(anonymous().accounts.redeemLoginLink({ token: 'garbage' }))).toEqual(used);
  });

  it('expires after 15 minutes, refused as a used one is; two redemptions at once: one session', async () => {
    const account = await makeAccount(orm);
    const started = new Date();
    now = started;
    const late = await internal().accounts.loginLink({ account: account.id });
    const onTime = await internal().accounts.loginLink({ account: account.id });
    now = new Date(started.getTime() + (LOGIN_LINK_SECONDS - 1) * 1000);
    const results = await Promise.allSettled([1, 2, 3].map(() => anonymous().accounts.redeemLoginLink({ token: onTime.token })));
    expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(1);
    now = new Date(started.getTime() + LOGIN_LINK_SECONDS * 1000);
    expect(await refusal(anonymous().accounts.redeemLoginLink({ token: late.token }))).toMatchObject({ code: 'unauthorized', reason: 'invalid_login_link' });
    now = new Date();
  });

  it('only operators make them; an unknown account is not found', async () => {
    const { account, token } = await signedUp();
    expect((await refusal(session(token).accounts.loginLink({ account: account.id }))).code).toBe('unauthorized');
    expect((await refusal(anonymous().accounts.loginLink({ account: account.id }))).code).toBe('unauthorized');
    expect((await refusal(internal().accounts.loginLink({ account: uniqueEmail('nobody') }))).reason).toBe('account_not_found');
  });
});

describe('the CLI', () => {
  async function cli(args: string[]): Promise<unknown> {
    const connection: CliConnection = {
      core: internal(),
      readCatalogFile: () => Promise.resolve({}),
      publicBaseUrl: 'https://mas.example.com/',
      close: () => Promise.resolve(),
    };
    let out = '';
    const write = vi.spyOn(process.stdout, 'write').mockImplementation((chunk: string | Uint8Array) => {
      out += String(chunk);
      return true;
    });
    try {
      await runCli([...args, '--json'], () => Promise.resolve(connection));
    } finally {
      write.mockRestore();
    }
    return JSON.parse(out);
  }

  it('account login-link prints a link to the pages that signs in once', async () => {
    const account = await makeAccount(orm);
    const out = (await cli(['account', 'login-link', '--account', account.email])) as { url: string; account: string; expires_at: string };
    expect(out).toMatchObject({ account: account.id, email: account.email });
    const url = new URL(out.url);
    expect(`${url.origin}${url.pathname}`).toBe('https://mas.example.com/login/link');
    const signedIn = await anonymous().accounts.redeemLoginLink({ token: url.searchParams.get('token')! });
    expect(signedIn.account.id).toBe(account.id);
  });

  it('account set-password sets it and never prints it', async () => {
    const account = await makeAccount(orm);
    const out = await cli(['account', 'set-password', '--account', account.id, '--password', PASSWORD]);
    expect(out).toEqual({ id: account.id, email: account.email, password_set: true, sessions_ended: 0 });
    expect(JSON.stringify(out)).not.toContain(PASSWORD);
    expect((await anonymous().accounts.signIn({ email: account.email, password: PASSWORD })).account.id).toBe(account.id);
  });
});

/** A job of the account, as create-generation records it (queued), at the given time. */
async function makeJob(accountId: string, keyId: string, createdAt: Date) {
  const em = orm.em.fork();
  const id = `gen_${randomBase62(24)}`;
  const holdId = `hold_${randomBase62(24)}`;
  await reserve(em, {
    accountId,
    amount: parseCoins('1'),
    reference: id,
    holdId,
    expiresAt: new Date(Date.now() + 3600_000),
    metadata: { kind: 'generation', model: 'mas/image' },
  });
  await em.execute(
    `insert into generations (id, account_id, key_id, model_id, prompt, settings, inputs, price_micro, hold_id, created_at)
     values (?, ?, ?, 'mas/image', 'a cat', '{}', '{}', 1000000, ?, ?)`,
    [id, accountId, keyId, holdId, createdAt],
  );
  madeJobs.push(id);
  return id;
}

describe("the account's own things", () => {
  it('keys: list, create (the 10-key limit holds) and revoke', async () => {
    const { token } = await signedUp();
    const me = session(token);
    expect(await me.account.keys.list()).toEqual({ object: 'list', data: [] });
    const created = await me.account.keys.create({ name: 'laptop' });
    expect(created.key).toMatch(/^mas_/);
    const listed = await me.account.keys.list();
    expect(listed.data.map((k) => keySchema.parse(k))).toEqual([expect.objectContaining({ id: created.id, name: 'laptop', revoked_at: null })]);
    for (let i = 1; i < 10; i++) await me.account.keys.create({});
    expect(await refusal(me.account.keys.create({}))).toMatchObject({ code: 'limit_reached', reason: 'key_limit_reached' });
    const revoked = await me.account.keys.revoke({ id: created.id });
    expect(revoked.revoked_at).not.toBeNull();
    expect(await me.account.keys.create({ name: 'after revoke' })).toMatchObject({ name: 'after revoke' });
  });

  it('history is the rows of wallet.history; the CSV is its header and the same rows', async () => {
    const { account, token } = await signedUp();
    await internal().wallet.topUp({ account: account.id, coins: '12.5', reference: 'pay_1' });
    await internal().wallet.grantSubscription({ account: account.id, coins: '3', reference: '=HYPERLINK("http://evil"), "x"' });
    const { key } = await makeKey(orm, account.id);
    const fromSession = await session(token).account.history({ limit: 10 });
    // The pages' rows are wallet.history's, each with its receipt (top-ups paid through Stripe only).
    const fromKey = await as({ kind: 'bearer', token: key }).wallet.history({ limit: 10 });
    expect(walletHistorySchema.parse(fromKey)).toEqual(fromKey);
    expect(fromSession).toEqual({ ...fromKey, data: fromKey.data.map((r) => ({ ...r, receipt_url: null })) });
    expect(fromSession.data.map((r) => r.type)).toEqual(['subscription_grant', 'topup']);

    const csv = await session(token).account.historyCsv();
    expect(csv).toMatchObject({ object: 'wallet_history_csv', rows: 2, truncated: false, content_type: 'text/csv; charset=utf-8' });
    const lines = csv.csv.split('\r\n');
    expect(lines).toEqual([
      'id,created_at,type,description,amount_coins,balance_after_coins,reference,app_connection_id,receipt_url,details,model,input_tokens,output_tokens,generation_id,key_id,user_id',
      `${fromSession.data[0]!.id},${fromSession.data[0]!.created_at},subscription_grant,Subscription coins,3,15.5,"'=HYPERLINK(""http://evil""), ""x""",,,Coins of your subscription,,,,,,`,
      `${fromSession.data[1]!.id},${fromSession.data[1]!.created_at},topup,Top-up,12.5,12.5,pay_1,,,Coins added by the operator,,,,,,`,
      '',
    ]);
  });

  it('the CSV is bounded: past its most rows it keeps the newest and says it was cut', async () => {
    const account = await makeAccount(orm);
    for (let i = 1; i <= 5; i++) await internal().wallet.topUp({ account: account.id, coins: String(i), reference: `pay_${i}` });
    const em = orm.em.fork();
    const cut = await historyCsv(em, account.id, { maxRows: 3 });
    expect(cut).toMatchObject({ rows: 3, truncated: true });
    expect(cut.csv.split('\r\n').slice(1, 4).map((l) => l.split(',')[6])).toEqual(['pay_5', 'pay_4', 'pay_3']);
    expect(await historyCsv(em, account.id, { maxRows: 5 })).toMatchObject({ rows: 5, truncated: false });
    expect(await historyCsv(em, account.id)).toMatchObject({ rows: 5, truncated: false });
  });

  it("generations: the account's jobs, newest first, paged by the last job's id", async () => {
    const account = await makeAccount(orm, { coins: '10' });
    const { id: keyId } = await makeKey(orm, account.id);
    const t0 = Date.now() - 60_000;
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) ids.push(await makeJob(account.id, keyId, new Date(t0 + (i < 4 ? i : 3) * 1000)));
    const newestFirst = [...ids.slice(0, 3)].reverse();
    const lastTwo = ids.slice(3).sort().reverse(); // created at the same instant: by id, descending
    const me = session((await internal().accounts.loginLink({ account: account.id }).then((l) => anonymous().accounts.redeemLoginLink({ token: l.token }))).token);

    const first = await me.account.generations.list({ limit: 3 });
    expect(generationListSchema.parse(first)).toEqual(first);
    expect(first.data.map((g) => g.id)).toEqual([...lastTwo, newestFirst[0]]);
    expect(first).toMatchObject({ has_more: true, data: [{ object: 'generation', status: 'queued', model: 'mas/image', price_coins: 1 }, {}, {}] });
    const rest = await me.account.generations.list({ limit: 3, starting_after: first.data.at(-1)!.id });
    expect(rest).toMatchObject({ has_more: false });
    expect(rest.data.map((g) => g.id)).toEqual(newestFirst.slice(1));
    expect(await me.account.generations.get({ id: ids[0]! })).toMatchObject({ id: ids[0], object: 'generation' });
  });
});

describe('ownership: with B’s session, A’s objects answer exactly as unknown ones', () => {
  it('keys, jobs and history', async () => {
    const a = await signedUp();
    const b = await signedUp();
    await internal().wallet.topUp({ account: a.account.id, coins: '5' });
    const aKey = await session(a.token).account.keys.create({ name: 'A' });
    const aJob = await makeJob(a.account.id, aKey.id, new Date());
    const unknownKey = `key_${randomBase62(24)}`;
    const unknownJob = `gen_${randomBase62(24)}`;
    const asB = session(b.token);

    // Each use case with A's id answers as with an unknown id, the id aside.
    const cases: [string, (id: string) => Promise<unknown>, string, string][] = [
      ['account.keys.revoke', (id) => asB.account.keys.revoke({ id }), aKey.id, unknownKey],
      ['account.generations.list', (id) => asB.account.generations.list({ starting_after: id }), aJob, unknownJob],
      ['account.generations.get', (id) => asB.account.generations.get({ id }), aJob, unknownJob],
    ];
    for (const [name, call, theirs, unknown] of cases) {
      const withTheirs = await refusal(call(theirs));
      const withUnknown = await refusal(call(unknown));
      expect(withTheirs.code, name).toBe('not_found');
      expect({ ...withTheirs, message: withTheirs.message.replace(theirs, '<id>') }, name).toEqual({
        ...withUnknown,
        message: withUnknown.message.replace(unknown, '<id>'),
      });
    }
    // A's key is still active, and nothing of A's shows in B's lists.
    expect((await session(a.token).account.keys.list()).data).toEqual([expect.objectContaining({ id: aKey.id, revoked_at: null })]);
    expect(await asB.account.keys.list()).toEqual({ object: 'list', data: [] });
    expect(await asB.account.generations.list({})).toEqual({ object: 'list', data: [], has_more: false });
    expect(await asB.account.history({})).toEqual({ object: 'list', data: [], has_more: false });
    expect(await asB.account.historyCsv()).toMatchObject({ rows: 0, csv: 'id,created_at,type,description,amount_coins,balance_after_coins,reference,app_connection_id,receipt_url,details,model,input_tokens,output_tokens,generation_id,key_id,user_id\r\n' });
    expect((await session(a.token).account.history({})).data.map((r) => r.type)).toEqual(['api_usage', 'topup']);
  });

  it('no account use case answers without a live session', async () => {
    const key = await makeKey(orm, (await makeAccount(orm)).id);
    for (const credential of [{ kind: 'none' }, { kind: 'session', token: null }, { kind: 'bearer', token: key.key }, { kind: 'internal' }] as Credential[]) {
      const c = as(credential);
      // The keys are also managed through a management key (docs/organizations.md): an API key for models is refused there (403).
      for (const call of [() => c.account.keys.list(), () => c.account.keys.create({}), () => c.account.keys.revoke({ id: key.id })]) {
        expect((await refusal(call())).code).toBe(credential.kind === 'bearer' ? 'forbidden' : 'unauthorized');
      }
      for (const call of [
        () => c.account.history({}),
        () => c.account.historyCsv(),
        () => c.account.generations.list({}),
        () => c.accounts.signOut(),
        () => c.accounts.changePassword({ new_password: PASSWORD }),
      ]) {
        expect((await refusal(call())).code).toBe('unauthorized');
      }
    }
  });
});
