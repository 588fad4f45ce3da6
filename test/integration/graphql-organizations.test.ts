import { randomBytes } from 'node:crypto';
import type { MikroORM } from '@mikro-orm/postgresql';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { runCli, type CliConnection } from '../../adapters/cli/mas.ts';
import { createOrganization } from '../../core/organizations/organizations.ts';
import { CookieBrowser, csrfOf } from '../support/cookie-browser.ts';
import { makeAccount, uniqueEmail } from '../support/db.ts';
import { startAdminApi } from '../support/graphql.ts';

/**
 * Organizations for operators (issue 49, "GraphQL admin"; docs/organizations.md, "Operators"):
 * the GraphQL reads of organizations, members, invitations and wallets, `topUp` and
 * `adjustBalance` with `organizationId` (audited, operators only), the admin pages, and the CLI's
 * `key create --organization --management`, `wallet topup --organization` and `org show`, over
 * real HTTP and PostgreSQL.
 */
let api: Awaited<ReturnType<typeof startAdminApi>>;
let orm: MikroORM;
let viewer: string;
let operator: string;
const gql = (...args: Parameters<typeof api.gql>) => api.gql(...args);
const data = (...args: Parameters<typeof api.data>) => api.data(...args);

beforeAll(async () => {
  api = await startAdminApi();
  ({ orm, viewer, operator } = api);
});
afterAll(() => api.close());

/** An organization made by a new person (its owner), with a second person as a member with a monthly limit, and one pending invitation. */
async function makeOrganization(name = `Acme ${randomBytes(3).toString('hex')}`) {
  const owner = await makeAccount(orm);
  const member = await makeAccount(orm);
  const em = orm.em.fork();
  const org = await createOrganization(em, { personId: owner.id, organizationId: null }, { name });
  await em.execute(`insert into organization_members (organization_id, account_id, role, spend_limit_micro, spend_limit_period) values (?, ?, 'member', 25000000, 'monthly')`, [org.id, member.id]);
  const invited = uniqueEmail('invited');
  const invitation = `inv_${randomBytes(12).toString('hex')}`;
  await em.execute(
    `insert into organization_invitations (id, organization_id, email, role, token_hash, invited_by, expires_at) values (?, ?, ?, 'admin', ?, ?, now() + interval '7 days')`,
    [invitation, org.id, invited, randomBytes(32).toString('hex'), owner.id],
  );
  return { org, owner, member, invited, invitation };
}

/** What the member's organization key spent: a settled hold of the organization's wallet, as a finished chat leaves it. */
async function spent(orgId: string, keyId: string, micro: number) {
  await orm.em.fork().execute(
    `insert into holds (id, account_id, amount_micro, from_subscription_micro, from_purchased_micro, status, captured_micro, reference, expires_at, ended_at, metadata)
     values (?, ?, ?, 0, ?, 'settled', ?, ?, now() + interval '1 hour', now(), ?::jsonb)`,
    [`hold_${randomBytes(12).toString('hex')}`, orgId, micro, micro, micro, `req_${randomBytes(8).toString('hex')}`, JSON.stringify({ key_id: keyId })],
  );
}

const internal = () => api.internal();

describe('GraphQL reads', () => {
  it('lists organizations, and shows one with its members, invitations (no token), wallet, keys and ledger', async () => {
    const { org, owner, member, invited, invitation } = await makeOrganization();
    const key = await internal().keys.create({ account: member.email, organization: org.id, name: 'ci' });
    await spent(org.id, key.id, 3_500_000);
    await internal().wallet.topUp({ organization: org.id, coins: '40', reason: 'invoice 1' });

    const listed = await data(viewer, 'query($n: String) { organizations(filter: {nameContains: $n}) { edges { node { id name memberCount } } } }', { n: org.name.slice(5).toUpperCase() });
    expect(listed.organizations.edges).toEqual([{ node: { id: org.id, name: org.name, memberCount: 2 } }]);
    const byMember = await data(viewer, 'query($m: ID) { organizations(filter: {member: $m}) { edges { node { id } } } }', { m: member.id });
    expect(byMember.organizations.edges).toEqual([{ node: { id: org.id } }]);

    const one = await data(
      viewer,
      `query($id: ID!) { organization(id: $id) { id name billingEmail paidAccount
          wallet { coins purchasedCoins }
          members { userId email role spendLimitCoins spendLimitPeriod spentCoins account { id } }
          invitations { edges { node { id email role status organization { id } } } }
          apiKeys { edges { node { id name type organizationId userId disabled organization { id } } } }
          ledgerEntries(filter: {kind: topup}) { edges { node { kind amountCoins account { id } } } } } }`,
      { id: org.id },
    );
    expect(one.organization).toEqual({
      id: org.id,
      name: org.name,
      billingEmail: owner.email,
      paidAccount: true,
      wallet: { coins: 40, purchasedCoins: 40 },
      members: [
        { userId: owner.id, email: owner.email, role: 'owner', spendLimitCoins: null, spendLimitPeriod: null, spentCoins: 0, account: { id: owner.id } },
        { userId: member.id, email: member.email, role: 'member', spendLimitCoins: 25, spendLimitPeriod: 'monthly', spentCoins: 3.5, account: { id: member.id } },
      ],
      invitations: { edges: [{ node: { id: invitation, email: invited, role: 'admin', status: 'pending', organization: { id: org.id } } }] },
      apiKeys: { edges: [{ node: { id: key.id, name: 'ci', type: 'standard', organizationId: org.id, userId: member.id, disabled: false, organization: { id: org.id } } }] },
      ledgerEntries: { edges: [{ node: { kind: 'topup', amountCoins: 40, account: { id: org.id } } }] },
    });

    // An invitation has no field that could carry its token.
    const fields = (await data(viewer, '{ __type(name: "OrganizationInvitation") { fields { name } } }')).__type.fields.map((f: { name: string }) => f.name);
    expect(fields.filter((f: string) => /token|hash|link/i.test(f))).toEqual([]);
    expect(await data(viewer, 'query($id: ID!) { organization(id: $id) { id } }', { id: 'org_nosuchorganization' })).toEqual({ organization: null });
  });

  it("shows a person's organizations on their account, and keeps organizations out of the accounts list", async () => {
    const { org, owner, member } = await makeOrganization();
    const person = await data(viewer, 'query($id: ID!) { account(id: $id) { organizations { role spendLimitCoins organization { id name } } } }', { id: member.id });
    expect(person.account.organizations).toEqual([{ role: 'member', spendLimitCoins: 25, organization: { id: org.id, name: org.name } }]);
    const accounts = await data(viewer, 'query($p: String) { accounts(filter: {emailPrefix: $p}) { edges { node { id } } } }', { p: owner.email });
    expect(accounts.accounts.edges).toEqual([{ node: { id: owner.id } }]);
  });

  it('shows a management key and a disabled key as such', async () => {
    const { org, member } = await makeOrganization();
    const managing = await internal().keys.create({ account: member.email, management: true, name: 'provisioning' });
    const orgKey = await internal().keys.create({ account: member.email, organization: org.id });
    await orm.em.fork().execute('update api_keys set disabled_at = now() where id = ?', [orgKey.id]);
    const q = 'query($a: ID!, $b: ID!) { a: apiKey(id: $a) { kind type organizationId userId disabled } b: apiKey(id: $b) { type organizationId disabled disabledAt } }';
    const keys = await data(viewer, q, { a: managing.id, b: orgKey.id });
    expect(keys.a).toEqual({ kind: 'management', type: 'management', organizationId: null, userId: member.id, disabled: false });
    expect(keys.b).toEqual({ type: 'standard', organizationId: org.id, disabled: true, disabledAt: expect.any(String) });
  });
});

describe('topUp and adjustBalance of an organization', () => {
  const auditOf = async (action: string, targetId: string) =>
    (await data(viewer, 'query($a: String, $t: String) { auditLog(filter: {action: $a, targetId: $t}) { edges { node { targetType targetId reason actorType } } } }', { a: action, t: targetId })).auditLog.edges.map((e: any) => e.node);
  const ledgerOf = (id: string) => orm.em.fork().execute<{ kind: string; amount_micro: string }[]>('select kind, amount_micro::text from ledger_entries where account_id = ? order by id', [id]);
  const TOP_UP = 'mutation($i: CreditInput!) { topUp(input: $i) { kind applied coins account { id } organization { id name } wallet { coins } } }';
  const ADJUST = 'mutation($i: AdjustBalanceInput!) { adjustBalance(input: $i) { kind applied coins organization { id } wallet { purchasedCoins } } }';

  it("credit and correct the organization's wallet, audited with the organization as target; the owner's wallet does not move", async () => {
    const { org, owner } = await makeOrganization();
    const top = await data(operator, TOP_UP, { i: { organizationId: org.id, coins: '100', reason: 'wire transfer 2026-12', idempotencyKey: `t-${org.id}` } });
    expect(top.topUp).toEqual({ kind: 'topup', applied: true, coins: 100, account: { id: org.id }, organization: { id: org.id, name: org.name }, wallet: { coins: 100 } });
    expect((await data(operator, TOP_UP, { i: { organizationId: org.id, coins: '100', idempotencyKey: `t-${org.id}` } })).topUp.applied).toBe(false);

    const adjust = { organizationId: org.id, coins: '-12.5', reason: 'double credit', customerNote: 'Correction of the double top-up', idempotencyKey: `a-${org.id}` };
    expect((await data(operator, ADJUST, { i: adjust })).adjustBalance).toEqual({ kind: 'adjustment', applied: true, coins: -12.5, organization: { id: org.id }, wallet: { purchasedCoins: 87.5 } });

    expect(await ledgerOf(org.id)).toEqual([{ kind: 'topup', amount_micro: '100000000' }, { kind: 'adjustment', amount_micro: '-12500000' }]);
    expect(await ledgerOf(owner.id)).toEqual([]);
    expect(await auditOf('wallet.top_up', org.id)).toEqual([{ targetType: 'wallet', targetId: org.id, reason: 'wire transfer 2026-12', actorType: 'admin_token' }]);
    expect(await auditOf('wallet.adjust', org.id)).toEqual([{ targetType: 'wallet', targetId: org.id, reason: 'double credit', actorType: 'admin_token' }]);
  });

  it('refuses both account and organizationId, or neither, naming the field, and moves nothing', async () => {
    const { org, owner } = await makeOrganization();
    const cases: [string, Record<string, unknown>, string][] = [
      [TOP_UP, { account: owner.id, organizationId: org.id, coins: '5' }, 'organizationId'],
      [TOP_UP, { coins: '5' }, 'account'],
      [ADJUST, { account: owner.email, organizationId: org.id, coins: '5', reason: 'both', idempotencyKey: 'x1' }, 'organizationId'],
      [ADJUST, { coins: '5', reason: 'neither', idempotencyKey: 'x2' }, 'account'],
    ];
    for (const [m, input, param] of cases) {
      const { status, body } = await gql(operator, m, { i: input });
      expect(status).toBe(200);
      expect(body.data).toBeNull();
      expect(body.errors![0]).toMatchObject({ message: expect.stringContaining('organizationId'), extensions: { code: 'BAD_USER_INPUT', param, reason: 'account_or_organization' } });
    }
    const unknown = await gql(operator, TOP_UP, { i: { organizationId: 'org_nosuchorganization', coins: '5' } });
    expect(unknown.body.errors![0]!.extensions).toMatchObject({ code: 'NOT_FOUND', reason: 'organization_not_found', param: 'organizationId' });
    // A person's account id is no organization id.
    const person = await gql(operator, TOP_UP, { i: { organizationId: owner.id, coins: '5' } });
    expect(person.body.errors![0]!.extensions).toMatchObject({ code: 'BAD_USER_INPUT', param: 'organizationId' });
    expect(await ledgerOf(org.id)).toEqual([]);
    expect(await ledgerOf(owner.id)).toEqual([]);
  });

  it('refuses a viewer on both mutations', async () => {
    const { org } = await makeOrganization();
    for (const [m, input] of [
      [TOP_UP, { organizationId: org.id, coins: '5' }],
      [ADJUST, { organizationId: org.id, coins: '5', reason: 'viewer tries', idempotencyKey: 'v1' }],
    ] as const) {
      const { body } = await gql(viewer, m, { i: input });
      expect(body.errors![0]!.extensions).toMatchObject({ code: 'FORBIDDEN', reason: 'operator_role_required' });
    }
    expect(await ledgerOf(org.id)).toEqual([]);
  });
});

describe('the admin pages', () => {
  async function signedInAdmin(role: 'viewer' | 'operator') {
    const created = await internal().admin.users.create({ email: uniqueEmail('admin'), role });
    const browser = new CookieBrowser(api.base);
    const linkPage = await (await browser.fetch(`/admin/login/link?token=${encodeURIComponent(created.login_token!)}`)).text();
    const res = await browser.post('/admin/login/link', { _csrf: csrfOf(linkPage)!, token: created.login_token!, new_password: 'a long admin passphrase 2026' });
    expect(res.status).toBe(303);
    return browser;
  }

  it('list organizations and show one with members, invitations, keys, balance and ledger, linked from accounts', async () => {
    const { org, owner, member, invited } = await makeOrganization();
    await internal().keys.create({ account: member.email, organization: org.id, name: 'laptop' });
    await internal().wallet.topUp({ organization: org.id, coins: '40' });
    const browser = await signedInAdmin('viewer');

    const list = await browser.fetch(`/admin/organizations?q=${encodeURIComponent(org.name)}`);
    expect(list.status).toBe(200);
    const listed = await list.text();
    expect(listed).toContain(`href="/admin/organizations/${org.id}"`);
    expect(listed).toContain(org.name);

    const page = await browser.fetch(`/admin/organizations/${org.id}`);
    expect(page.status).toBe(200);
    const html = await page.text();
    for (const text of [owner.email, member.email, invited, 'pending', 'laptop', 'topup', `href="/admin/accounts/${member.id}"`]) expect(html).toContain(text);
    expect(html).toMatch(/id="balance">.*40/);
    expect(html).not.toContain('action="/admin/organizations/'); // a viewer gets no forms

    const account = await (await browser.fetch(`/admin/accounts/${member.id}`)).text();
    expect(account).toContain(`href="/admin/organizations/${org.id}"`);
    expect(await (await browser.fetch('/admin/accounts')).text()).toContain('href="/admin/organizations"');
    expect(await (await browser.fetch('/admin')).text()).toContain('Newest organizations');
    expect((await browser.fetch('/admin/organizations/org_nosuchorganization')).status).toBe(404);
    // Lists that name wallets by account id (top accounts, payments) lead to the organization's own page.
    const byAccountUrl = await browser.fetch(`/admin/accounts/${org.id}`);
    expect([byAccountUrl.status, byAccountUrl.headers.get('location')]).toEqual([303, `/admin/organizations/${org.id}`]);
  });

  it("adjust an organization's balance with the action form", async () => {
    const { org } = await makeOrganization();
    const browser = await signedInAdmin('operator');
    const page = await (await browser.fetch(`/admin/organizations/${org.id}`)).text();
    expect(page).toContain(`action="/admin/organizations/${org.id}/adjust"`);
    const idempotency = /name="idempotency_key" value="([^"]+)"/.exec(page)![1]!;
    const posted = await browser.post(`/admin/organizations/${org.id}/adjust`, { _csrf: csrfOf(page)!, coins: '+7.5', idempotency_key: idempotency, reason: 'goodwill for the outage', confirm: 'yes' });
    expect(posted.status).toBe(303);
    expect(posted.headers.get('location')).toBe(`/admin/organizations/${org.id}?done=adjusted`);
    const after = await (await browser.fetch(posted.headers.get('location')!)).text();
    expect(after).toContain('balance was adjusted');
    expect(after).toMatch(/id="balance">.*7\.5/);

    const refused = await browser.post(`/admin/organizations/${org.id}/adjust`, { _csrf: csrfOf(page)!, coins: '-100', idempotency_key: `${idempotency}-2`, reason: 'too much', confirm: 'yes' });
    expect(refused.status).toBe(400);
    expect(await refused.text()).toContain('spendable coins');
  });
});

describe('the CLI', () => {
  async function mas(...argv: string[]) {
    const connection: CliConnection = { core: internal(), readCatalogFile: () => Promise.resolve({}), publicBaseUrl: 'https://mas.example.com', close: () => Promise.resolve() };
    let out = '';
    const write = vi.spyOn(process.stdout, 'write').mockImplementation((chunk: string | Uint8Array) => {
      out += String(chunk);
      return true;
    });
    const exit = vi.spyOn(process, 'exit').mockImplementation(((code: number) => {
      throw new Error(`exit ${code}`);
    }) as never);
    try {
      await runCli([...argv, '--json'], () => Promise.resolve(connection)).catch(() => undefined);
    } finally {
      write.mockRestore();
      exit.mockRestore();
    }
    // A failure exits (mocked: it throws, and runCli reports that too): the first line is the command's answer.
    return JSON.parse(out.split('\n')[0]!) as Record<string, any>;
  }

  it('key create --organization and --management make the keys the contract names', async () => {
    const { org, member } = await makeOrganization();
    const orgKey = await mas('key', 'create', '--account', member.email, '--organization', org.id, '--name', 'ci');
    expect(orgKey).toMatchObject({ id: expect.stringMatching(/^key_/), key: expect.any(String), type: 'standard', organization_id: org.id, user_id: member.id });
    const managing = await mas('key', 'create', '--account', member.email, '--organization', org.id, '--management');
    expect(managing).toMatchObject({ type: 'management', organization_id: org.id, user_id: member.id });
    const personal = await mas('key', 'create', '--account', member.email, '--management');
    expect(personal).toMatchObject({ type: 'management', organization_id: null, user_id: member.id });
    const rows = await orm.em.fork().execute<{ id: string; account_id: string; member_id: string | null; kind: string }[]>('select id, account_id, member_id, kind from api_keys where id in (?, ?, ?) order by kind, account_id', [orgKey.id, managing.id, personal.id]);
    expect(rows).toEqual(expect.arrayContaining([
      { id: orgKey.id, account_id: org.id, member_id: member.id, kind: 'standard' },
      { id: managing.id, account_id: org.id, member_id: member.id, kind: 'management' },
      { id: personal.id, account_id: member.id, member_id: null, kind: 'management' },
    ]));

    const stranger = await makeAccount(orm);
    expect((await mas('key', 'create', '--account', stranger.email, '--organization', org.id)).error).toMatchObject({ type: 'not_found_error' });
  });

  it('wallet topup --organization credits the organization, and org list / org show read it', async () => {
    const { org, owner, member } = await makeOrganization();
    const top = await mas('wallet', 'topup', '--organization', org.id, '--coins', '12.5', '--idempotency-key', `cli-${org.id}`);
    expect(top).toMatchObject({ object: 'topup', account: org.id, applied: true, balance: { purchased_coins: 12.5 } });
    expect((await mas('wallet', 'topup', '--organization', org.id, '--coins', '12.5', '--idempotency-key', `cli-${org.id}`)).applied).toBe(false);
    expect((await mas('balance', '--account', owner.id)).coins).toBe(0);

    const both = await mas('wallet', 'topup', '--organization', org.id, '--account', owner.email, '--coins', '1');
    expect(both.error).toMatchObject({ type: 'invalid_request_error', message: expect.stringContaining('not both') });
    expect((await mas('wallet', 'topup', '--coins', '1')).error).toMatchObject({ type: 'invalid_request_error' });

    const listed = await mas('org', 'list', '--account', member.id);
    expect(listed.data.map((o: { id: string }) => o.id)).toEqual([org.id]);
    const shown = await mas('org', 'show', '--id', org.id);
    expect(shown).toMatchObject({ id: org.id, name: org.name, balance: { coins: 12.5 }, members: [{ user_id: owner.id, role: 'owner' }, { user_id: member.id, role: 'member', spend_limit_coins: 25 }], invitations: [{ status: 'pending' }] });
    expect((await mas('org', 'show', '--id', 'org_nosuchorganization')).error).toMatchObject({ type: 'not_found_error' });
  });
});
