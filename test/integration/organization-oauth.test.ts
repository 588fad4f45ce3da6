import { createHash, randomBytes } from 'node:crypto';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createContext } from '../../core/context.ts';
import { parseCoins } from '../../core/money/coins.ts';
import { credit } from '../../core/money/wallet.ts';
import { createCaller } from '../../core/router.ts';
import { chargesWritten } from '../support/db.ts';
import { csrfOf, hiddenFields, signUpPerson, type Person } from '../support/cookie-browser.ts';
import { startJobHarness, type JobHarness } from '../support/jobs.ts';

/**
 * The OAuth consent's wallet choice (issue 49; docs/oauth.md, docs/organizations.md) over real
 * HTTP: the person's browser (a cookie jar) on the consent page, the app's token requests, and
 * the MCP server with the app's access token. An app allowed on an organization's wallet spends
 * the organization's coins through a key of the person as its member, so the member's spend
 * limit there applies; removing the member ends the app at once.
 */
let h: JobHarness;
let base: string;
beforeAll(async () => {
  h = await startJobHarness({ publicBaseUrlIsServed: true, worker: false });
  base = h.base;
});
afterAll(() => h.close());

const CALLBACK = 'http://127.0.0.1:47123/callback';
const mcpResource = () => `${base}/api/v1/mcp`;
const signUp = (tag: string) => signUpPerson(base, h.orm, tag);
const asPerson = (p: Person) => createCaller(createContext(h.deps, { kind: 'session', token: p.session }));

async function fund(accountId: string, coins: string): Promise<void> {
  await credit(h.orm.em.fork(), { accountId, kind: 'topup', amount: parseCoins(coins), reference: 'fixture', idempotencyKey: `org-oauth-topup:${accountId}`, description: 'Top-up' });
}
const balanceOf = async (accountId: string) =>
  BigInt((await h.orm.em.fork().execute<{ c: string }[]>('select (subscription_micro + purchased_micro)::text as c from wallets where account_id = ?', [accountId]))[0]!.c);

/** An owner's organization with `coins` in its wallet, and a member with a spend limit there. */
async function organizationWithMember(limitCoins: string) {
  const owner = await signUp('org-oauth-owner');
  const member = await signUp('org-oauth-member');
  const org = await asPerson(owner).organizations.create({ name: `Team ${randomBytes(3).toString('hex')}` });
  await h.orm.em.fork().execute(`insert into organization_members (organization_id, account_id, role) values (?, ?, 'member')`, [org.id, member.accountId]);
  await asPerson(owner).organizations.members.update({ id: org.id, user_id: member.accountId, spend_limit_coins: limitCoins, spend_limit_period: 'total' });
  await fund(org.id, '100');
  await fund(member.accountId, '100');
  return { owner, member, org };
}

async function registerClient(): Promise<string> {
  const res = await fetch(`${base}/register`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ redirect_uris: [CALLBACK], client_name: 'Team agent', token_endpoint_auth_method: 'none' }) });
  expect(res.status).toBe(201);
  return ((await res.json()) as { client_id: string }).client_id;
}

function pkce() {
  const verifier = randomBytes(48).toString('base64url');
  return { verifier, challenge: createHash('sha256').update(verifier).digest('base64url') };
}

/** The consent page the person's browser gets for an authorization request of the app. */
async function consentPage(person: Person, clientId: string) {
  const { verifier, challenge } = pkce();
  const q = new URLSearchParams({ client_id: clientId, redirect_uri: CALLBACK, response_type: 'code', code_challenge: challenge, code_challenge_method: 'S256', state: 's', resource: mcpResource() });
  const res = await person.browser.fetch(`/authorize?${q.toString()}`);
  const page = await res.text();
  expect(res.status, page.slice(0, 300)).toBe(200);
  return { page, verifier };
}

/** The consent page, and Allow with the wallet chosen: the browser's answer and the PKCE verifier. */
async function allow(person: Person, clientId: string, wallet: string) {
  const { page, verifier } = await consentPage(person, clientId);
  const answer = await person.browser.post('/authorize', { ...hiddenFields(page), _csrf: csrfOf(page)!, decision: 'allow', spend_cap_coins: '', lifetime: '30', wallet });
  return { page, answer, verifier };
}

async function exchange(clientId: string, code: string, verifier: string) {
  const res = await fetch(`${base}/token`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ grant_type: 'authorization_code', code, code_verifier: verifier, client_id: clientId, redirect_uri: CALLBACK, resource: mcpResource() }),
  });
  return { status: res.status, body: (await res.json()) as Record<string, string> };
}

/** Allowed on `wallet` and exchanged: the app's access token and its connection. */
async function connect(person: Person, wallet: string) {
  const clientId = await registerClient();
  const { answer, verifier } = await allow(person, clientId, wallet);
  expect(answer.status).toBe(303);
  const code = new URL(answer.headers.get('location')!).searchParams.get('code')!;
  const tokens = await exchange(clientId, code, verifier);
  expect(tokens.status, JSON.stringify(tokens.body)).toBe(200);
  const [row] = await h.orm.em.fork().execute<{ id: string; account_id: string; member_id: string | null; key_account: string; key_member: string | null; key_kind: string }[]>(
    `select c.id, c.account_id, c.member_id, k.account_id as key_account, k.member_id as key_member, k.kind as key_kind
       from app_connections c join api_keys k on k.id = c.key_id where c.client_id = ?`,
    [clientId],
  );
  return { clientId, access: tokens.body.access_token!, connection: row! };
}

async function mcpClient(accessToken: string): Promise<Client> {
  const client = new Client({ name: 'org-oauth-test', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(mcpResource()), { requestInit: { headers: { Authorization: `Bearer ${accessToken}` } } }));
  return client;
}
const chat = (client: Client) => client.callTool({ name: 'chat', arguments: { model: 'mas/echo', prompt: 'Hello there', max_tokens: 30 } }) as Promise<CallToolResult>;
const toolError = (r: CallToolResult) => {
  expect(r.isError).toBe(true);
  const json = r.content.flatMap((c) => (c.type === 'text' && c.text.startsWith('{"error"') ? [c.text] : []))[0];
  return JSON.parse(json!) as { error: { code: string; message: string }; status: number };
};

/** tools/list with the token: its HTTP status (401 once the connection is gone). */
async function mcpStatus(accessToken: string) {
  const res = await fetch(mcpResource(), {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: `Bearer ${accessToken}` },
    body: '{"jsonrpc":"2.0","id":1,"method":"tools/list"}',
  });
  await res.text();
  return res.status;
}

/**
 * One chat of mas/echo with "Hello there" and max_tokens 30, priced by hand as in oauth.test.ts:
 * 9 input tokens at 50 micro-coins and 30 output tokens at 200: 6,450 micro-coins.
 */
const CHAT_MICRO = 9n * 50n + 30n * 200n;

describe("the consent page's wallet choice", () => {
  it("an app allowed on an organization's wallet spends the organization's coins, within the member's limit, and is listed as the person's", async () => {
    // The limit holds one chat (6,450 micro-coins) and not two.
    const { owner, member, org } = await organizationWithMember('0.01');
    const { page } = await consentPage(member, await registerClient());
    expect(page).toContain('name="wallet" value="personal" checked');
    expect(page).toContain(`name="wallet" value="${org.id}"`);
    expect(page).toContain(org.name);

    const app = await connect(member, org.id);
    expect(app.connection).toMatchObject({ account_id: org.id, member_id: member.accountId, key_account: org.id, key_member: member.accountId, key_kind: 'app' });

    const orgBefore = await balanceOf(org.id);
    const ownBefore = await balanceOf(member.accountId);
    const client = await mcpClient(app.access);
    const first = await chat(client);
    expect(first.isError).toBeFalsy();
    await chargesWritten();
    expect(await balanceOf(org.id)).toBe(orgBefore - CHAT_MICRO);
    expect(await balanceOf(member.accountId)).toBe(ownBefore);

    // The member's limit (10,000 micro-coins) has 3,550 left: the next chat is refused, nothing charged.
    const refused = toolError(await chat(client));
    expect(refused.status).toBe(402);
    expect(refused.error.code).toBe('member_spend_limit_reached');
    await chargesWritten();
    expect(await balanceOf(org.id)).toBe(orgBefore - CHAT_MICRO);
    await client.close();

    // The person's list shows the connection, naming the organization; the owner's does not.
    const mine = (await asPerson(member).account.apps.list()).data;
    expect(mine.find((a) => a.id === app.connection.id)).toMatchObject({ organization: { id: org.id, name: org.name }, spent_coins: 0.00645 });
    expect((await asPerson(owner).account.apps.list()).data.map((a) => a.id)).not.toContain(app.connection.id);
    const appsPage = await (await member.browser.fetch('/account/apps')).text();
    expect(appsPage).toContain('Team agent');

    // The person disconnects it themselves: its token stops at once.
    await asPerson(member).account.apps.revoke({ id: app.connection.id });
    expect(await mcpStatus(app.access)).toBe(401);
  });

  it('removing the member ends their app on the organization at once (401), and leaves their personal app alone', async () => {
    const { owner, member, org } = await organizationWithMember('50');
    const onOrg = await connect(member, org.id);
    const personal = await connect(member, 'personal');
    expect(personal.connection).toMatchObject({ account_id: member.accountId, member_id: null, key_account: member.accountId, key_member: null });
    expect(await mcpStatus(onOrg.access)).toBe(200);

    const removed = await asPerson(owner).organizations.members.remove({ id: org.id, user_id: member.accountId });
    expect(removed.apps_disconnected).toBe(1);
    expect(await mcpStatus(onOrg.access)).toBe(401);
    expect(await mcpStatus(personal.access)).toBe(200);
  });

  it("refuses an organization the person is not in (the page again, 404, no code), and a code whose member left before the exchange", async () => {
    const { owner, member, org } = await organizationWithMember('50');
    const stranger = await signUp('org-oauth-stranger');
    const clientId = await registerClient();
    const { page, answer } = await allow(stranger, clientId, org.id);
    expect(page).not.toContain(org.id);
    expect(answer.status).toBe(404);
    expect(await answer.text()).toContain(`No organization ${org.id}.`);
    // A malformed choice is the person's error too: 400, the page again.
    expect((await allow(stranger, clientId, 'org_')).answer.status).toBe(400);

    const allowed = await allow(member, clientId, org.id);
    expect(allowed.answer.status).toBe(303);
    const code = new URL(allowed.answer.headers.get('location')!).searchParams.get('code')!;
    await asPerson(owner).organizations.members.remove({ id: org.id, user_id: member.accountId });
    const refused = await exchange(clientId, code, allowed.verifier);
    expect(refused.status).toBe(400);
    expect(refused.body.error).toBe('invalid_grant');
    const rows = await h.orm.em.fork().execute('select 1 from app_connections where client_id = ?', [clientId]);
    expect(rows).toHaveLength(0);
  });
});
