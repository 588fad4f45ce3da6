import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import type { MikroORM } from '@mikro-orm/postgresql';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createProviderRegistry } from '../../adapters/providers/registry.ts';
import { loadCatalogFile } from '../../config/catalog.ts';
import { seedModels } from '../../core/catalog/catalog.ts';
import { createContext, type CoreDeps } from '../../core/context.ts';
import { createCaller } from '../../core/router.ts';
import { parseCoins } from '../../core/money/coins.ts';
import { makeAccount, makeKey, openTestOrm, testDeps, uniqueEmail, walletInvariants } from '../support/db.ts';
import { createTestApp, serve } from '../support/http.ts';
import { testMailbox } from '../support/mail.ts';
import { signUpVerified } from '../support/sign-up.ts';

/**
 * The welcome credit (STARTER_CREDIT_COINS, docs/accounts.md "Welcome credit"): granted once
 * per account when its e-mail address is confirmed, whatever the retries and races; a ledger
 * entry "Welcome credit" in the history; audited; none when the setting is 0; and it does not
 * make the account paid. Then the 402 answer's link to add credits, the same on REST and MCP.
 */
let orm: MikroORM;
let withCredit: CoreDeps;
let without: CoreDeps;
beforeAll(async () => {
  orm = await openTestOrm();
  await seedModels(orm.em.fork(), await loadCatalogFile('config/models.yaml', 50n));
  withCredit = testDeps(orm, { publicBaseUrl: 'https://mas.example.com', env: { STARTER_CREDIT_COINS: '25' } });
  without = testDeps(orm, { publicBaseUrl: 'https://mas.example.com' });
});
afterAll(async () => {
  await orm?.close();
});

const password = 'a long enough password for the welcome';
const anonymous = (deps: CoreDeps) => createCaller(createContext(deps, { kind: 'none' }));
const operator = (deps: CoreDeps) => createCaller(createContext(deps, { kind: 'internal' }));
const asSession = (deps: CoreDeps, token: string) => createCaller(createContext(deps, { kind: 'session', token }));

/** The account's welcome entries in the ledger and its welcome audit entries. */
async function welcomeRecords(accountId: string) {
  const em = orm.em.fork();
  const ledger = await em.execute<{ kind: string; pocket: string; amount_micro: string; description: string }[]>(
    `select kind, pocket, amount_micro::text, description from ledger_entries where account_id = ? and idempotency_key like 'welcome:%'`,
    [accountId],
  );
  const audit = await em.execute<{ actor_type: string; action: string; target_type: string; after: { coins: number; entry_id: string } }[]>(
    `select actor_type, action, target_type, after from admin_audit_log where action = 'wallet.welcome_credit' and target_id = ?`,
    [accountId],
  );
  return { ledger, audit };
}

describe('the welcome credit', () => {
  it('is granted at the confirmation: a ledger entry "Welcome credit", audited, shown in the history, and the account is not made paid', async () => {
    const email = uniqueEmail('welcome');
    const signedIn = await signUpVerified(withCredit, { email, password });
    const me = asSession(withCredit, signedIn.token);
    const balance = await operator(withCredit).wallet.balanceOf({ account: signedIn.account.id });
    expect(balance).toMatchObject({ coins: 25, purchased_coins: 25, subscription_coins: 0, paid_account: false });
    expect(signedIn.account.paid_account).toBe(false);

    const { ledger, audit } = await welcomeRecords(signedIn.account.id);
    expect(ledger).toEqual([{ kind: 'adjustment', pocket: 'purchased', amount_micro: parseCoins('25').toString(), description: 'Welcome credit' }]);
    expect(audit).toEqual([{ actor_type: 'internal', action: 'wallet.welcome_credit', target_type: 'wallet', after: { coins: 25, entry_id: expect.stringMatching(/^le_\d+$/) } }]);

    const history = await me.account.history({});
    expect(history.data).toEqual([
      expect.objectContaining({ type: 'adjustment', description: 'Welcome credit', details: 'Welcome credit', amount_coins: 25, balance_after_coins: 25 }),
    ]);
    await walletInvariants(orm, signedIn.account.id);
  });

  it('is granted once: a second link followed later, two links followed at once, and a password reset afterwards move nothing more', async () => {
    const email = uniqueEmail('welcome-once');
    await anonymous(withCredit).accounts.signUp({ email, password });
    const first = testMailbox.tokenFor(email, 'verify');
    const signedIn = await anonymous(withCredit).accounts.signIn({ email, password });
    // Two more links ("Send the link again"), then all three followed: the first alone, the other two at once.
    await asSession(withCredit, signedIn.token).accounts.resendVerification();
    const second = testMailbox.tokenFor(email, 'verify');
    await asSession(withCredit, signedIn.token).accounts.resendVerification();
    const third = testMailbox.tokenFor(email, 'verify');
    expect(new Set([first, second, third]).size).toBe(3);
    await anonymous(withCredit).accounts.verifyEmail({ token: first });
    await Promise.all([second, third].map((token) => anonymous(withCredit).accounts.verifyEmail({ token })));

    await anonymous(withCredit).accounts.requestPasswordReset({ email });
    await anonymous(withCredit).accounts.resetPassword({ token: testMailbox.tokenFor(email, 'reset'), new_password: `${password} again` });

    const { ledger, audit } = await welcomeRecords(signedIn.account.id);
    expect(ledger).toHaveLength(1);
    expect(audit).toHaveLength(1);
    expect((await operator(withCredit).wallet.balanceOf({ account: email })).coins).toBe(25);
  });

  it('is granted once when two confirmations race (links followed concurrently, before either committed)', async () => {
    const email = uniqueEmail('welcome-race');
    await anonymous(withCredit).accounts.signUp({ email, password });
    const signedIn = await anonymous(withCredit).accounts.signIn({ email, password });
    const tokens = [testMailbox.tokenFor(email, 'verify')];
    for (let i = 0; i < 4; i++) {
      await asSession(withCredit, signedIn.token).accounts.resendVerification();
      tokens.push(testMailbox.tokenFor(email, 'verify'));
    }
    const results = await Promise.allSettled(tokens.map((token) => anonymous(withCredit).accounts.verifyEmail({ token })));
    expect(results.every((r) => r.status === 'fulfilled')).toBe(true);
    const { ledger, audit } = await welcomeRecords(signedIn.account.id);
    expect(ledger).toHaveLength(1);
    expect(audit).toHaveLength(1);
    await walletInvariants(orm, signedIn.account.id);
  });

  it('is granted by a password reset that confirms the address (the mail reached it)', async () => {
    const email = uniqueEmail('welcome-reset');
    await anonymous(withCredit).accounts.signUp({ email, password });
    await anonymous(withCredit).accounts.requestPasswordReset({ email });
    const signedIn = await anonymous(withCredit).accounts.resetPassword({ token: testMailbox.tokenFor(email, 'reset'), new_password: `${password} anew` });
    expect((await operator(withCredit).wallet.balanceOf({ account: signedIn.account.id })).coins).toBe(25);
    expect((await welcomeRecords(signedIn.account.id)).ledger).toHaveLength(1);
  });

  it('is 0 when STARTER_CREDIT_COINS is unset beside a DATABASE_URL: no entry, no audit', async () => {
    const email = uniqueEmail('welcome-none');
    const signedIn = await signUpVerified(without, { email, password });
    expect(await operator(without).wallet.balanceOf({ account: signedIn.account.id })).toMatchObject({ coins: 0, paid_account: false });
    expect(await welcomeRecords(signedIn.account.id)).toEqual({ ledger: [], audit: [] });
    expect((await asSession(without, signedIn.token).account.history({})).data).toEqual([]);
  });

  it('is not given to accounts an operator made (they count as confirmed from the start), even after a password reset', async () => {
    const made = await operator(withCredit).accounts.create({ email: uniqueEmail('welcome-operator') });
    await anonymous(withCredit).accounts.requestPasswordReset({ email: made.email });
    await anonymous(withCredit).accounts.resetPassword({ token: testMailbox.tokenFor(made.email, 'reset'), new_password: `${password} operator` });
    expect((await operator(withCredit).wallet.balanceOf({ account: made.id })).coins).toBe(0);
    expect(await welcomeRecords(made.id)).toEqual({ ledger: [], audit: [] });
  });
});

describe('the 402 answer for want of coins', () => {
  let api: { base: string; close: () => Promise<void> };
  let payingDeps: CoreDeps;
  beforeAll(async () => {
    const deps = testDeps(orm, { publicBaseUrl: 'https://mas.example.com', providers: createProviderRegistry({ local: { kind: 'local' } }) });
    api = await serve(createTestApp({ deps, publicBaseUrl: 'https://mas.example.com' }));
    payingDeps = testDeps(orm, {
      publicBaseUrl: 'https://mas.example.com',
      env: { STRIPE_SECRET_KEY: 'sk_test_welcome', STRIPE_WEBHOOK_SECRET: 'whsec_welcome' },
    });
  });
  afterAll(() => api?.close());

  const link = 'https://mas.example.com/account/billing#add-credits';
  const offHint = `Payments are not set up on this server: ask its operator for coins. Your balance: ${link}`;

  it('REST (chat and a media job) and MCP say where to add credits, with the same words; the code and type are unchanged', async () => {
    const account = await makeAccount(orm, { coins: '0.000001' });
    const { key } = await makeKey(orm, account.id);

    const client = new OpenAI({ apiKey: key, baseURL: `${api.base}/api/v1`, maxRetries: 0 });
    const chat = await client.chat.completions.create({ model: 'mas/echo', messages: [{ role: 'user', content: 'Hello' }], max_tokens: 50 }).catch((e: unknown) => e);
    expect(chat).toBeInstanceOf(OpenAI.APIError);
    const chatError = chat as InstanceType<typeof OpenAI.APIError>;
    expect(chatError.status).toBe(402);
    expect(chatError.error).toMatchObject({ type: 'billing_error', code: 'insufficient_balance', param: null });
    expect(chatError.message).toMatch(/^402 Insufficient balance: this request needs [\d.]+ coins and 0\.000001 are available\. /);
    expect(chatError.message.endsWith(offHint)).toBe(true);

    const job = await fetch(`${api.base}/api/v1/generations`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'mas/image-demo', prompt: 'a lighthouse' }),
    });
    expect(job.status).toBe(402);
    const jobError = ((await job.json()) as { error: { message: string; code: string; type: string } }).error;
    expect(jobError).toMatchObject({ type: 'billing_error', code: 'insufficient_balance' });
    expect(jobError.message.endsWith(` ${offHint}`)).toBe(true);
    // Said once, not once per layer.
    expect(jobError.message.split(link)).toHaveLength(2);

    const mcp = new Client({ name: 'mas-test', version: '1.0.0' });
    await mcp.connect(new StreamableHTTPClientTransport(new URL(`${api.base}/api/v1/mcp`), { requestInit: { headers: { Authorization: `Bearer ${key}` } } }));
    const result = (await mcp.callTool({ name: 'generate', arguments: { model: 'mas/image-demo', prompt: 'a lighthouse' } })) as CallToolResult;
    await mcp.close();
    expect(result.isError).toBe(true);
    const mcpJson = result.content.flatMap((c) => (c.type === 'text' && c.text.startsWith('{"error"') ? [c.text] : []))[0]!;
    const mcpError = (JSON.parse(mcpJson) as { error: { message: string; code: string }; status: number });
    expect(mcpError).toMatchObject({ status: 402, error: { code: 'insufficient_balance' } });
    expect(mcpError.error.message).toBe(jobError.message);
  });

  it('with payments on, says "Add credits at" the link (core, whichever transport)', async () => {
    const account = await makeAccount(orm, { coins: '0.000001' });
    const { key } = await makeKey(orm, account.id);
    const spender = createCaller(createContext(payingDeps, { kind: 'bearer', token: key }));
    const err = await spender.generations.create({ model: 'mas/image-demo', prompt: 'a lighthouse' }).catch((e: unknown) => e);
    expect(err).toMatchObject({ message: expect.stringMatching(new RegExp(`^Insufficient balance: .* Add credits at ${link.replace(/[.#/]/g, '\\$&')}$`)) });
  });
});
