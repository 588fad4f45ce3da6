import type { MikroORM } from '@mikro-orm/postgresql';
import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Credential } from '../../core/auth/principals.ts';
import { createContext, type CoreDeps } from '../../core/context.ts';
import { credit } from '../../core/money/wallet.ts';
import { parseCoins } from '../../core/money/coins.ts';
import { createCaller } from '../../core/router.ts';
import { toCoreError } from '../../core/trpc.ts';
import { useTestCatalog } from '../support/catalog.ts';
import { chargesWritten, makeAccount, makeKey, openTestOrm, testDeps, uniqueEmail } from '../support/db.ts';
import { bearer, createTestApp, getJson, serve } from '../support/http.ts';
import { testMailbox } from '../support/mail.ts';
import { signUpVerified } from '../support/sign-up.ts';
import { startFakeUpstream, type FakeUpstream } from '../fakes/openai-upstream.ts';

/**
 * The provisioning API (issue 49, docs/organizations.md): management keys manage API keys and
 * organizations over REST (adapters/rest/routes/keys.ts, organizations.ts), with the roles,
 * limits and refusals of core; inference keys and management keys are each refused on the other's
 * routes; nobody reaches an organization they may not (BOLA). Real PostgreSQL and HTTP, the
 * official openai client for chats against the fake upstream, the clock injected (`deps.clock`).
 */
let orm: MikroORM;
let upstream: FakeUpstream;
let deps: CoreDeps;
let server: Awaited<ReturnType<typeof serve>>;
/** How far the service's clock runs ahead of the real one. */
let ahead = 0;
/** The OpenAPI document: every answer of this file is checked against it. */
let doc: { paths: Record<string, Record<string, { responses: Record<string, { content?: Record<string, { schema: unknown }> }> }>>; components: unknown };
const ajv = new Ajv2020({ strict: false, allErrors: true });
addFormats.default(ajv);
const validators = new Map<string, ReturnType<typeof ajv.compile>>();

beforeAll(async () => {
  orm = await openTestOrm();
  upstream = await startFakeUpstream();
  const providers = await useTestCatalog(orm, upstream.url);
  deps = { ...testDeps(orm, { providers }), clock: () => new Date(Date.now() + ahead) };
  server = await serve(createTestApp({ deps }));
  doc = (await getJson(`${server.base}/api/v1/openapi.json`)).body;
  ajv.addSchema({ $id: 'openapi', components: doc.components });
});
afterAll(async () => {
  await server?.close();
  await upstream?.close();
  await orm?.close();
});

const caller = (credential: Credential) => createCaller(createContext(deps, credential));
const operator = () => caller({ kind: 'internal' });
const PASSWORD = 'correct horse battery staple';

/**
 * A REST call with this key; `body` is sent as JSON. Its answer must be one the OpenAPI document
 * states for that operation: the status listed, the body valid against its schema.
 */
async function api(key: string | null, method: string, path: string, body?: unknown) {
  const headers: Record<string, string> = key ? bearer(key) : {};
  if (body !== undefined) headers['content-type'] = 'application/json';
  const res = await getJson(`${server.base}/api/v1${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const route = path.split('?')[0]!;
  const template = Object.keys(doc.paths).find((t) => new RegExp(`^${t.replace(/\{\w+\}/g, '[^/]+')}$`).test(route));
  const op = template ? doc.paths[template]![method.toLowerCase()] : undefined;
  if (op) {
    const documented = op.responses[String(res.status)];
    expect(documented, `${method} ${template} documents ${res.status}: ${JSON.stringify(res.body)}`).toBeDefined();
    const schema = documented!.content?.['application/json']?.schema;
    if (schema) {
      const id = `${method} ${template} ${res.status}`;
      validators.set(id, validators.get(id) ?? ajv.compile(JSON.parse(JSON.stringify(schema).replaceAll('"#/components/', '"openapi#/components/'))));
      const validate = validators.get(id)!;
      expect(validate(res.body), `${method} ${path} ${res.status}: ${ajv.errorsText(validate.errors)}`).toBe(true);
    }
  }
  return res;
}

/** A person with a personal management key (made by the operator, as `mas key create --management`). */
async function person(coins?: string) {
  const account = await makeAccount(orm, coins ? { coins } : {});
  const key = await operator().keys.create({ account: account.id, name: 'provisioning', management: true });
  return { id: account.id, email: account.email, mkey: key.key, mkeyId: key.id };
}

/** A person who signed up (with a session, for accepting invitations) and has a personal management key. */
async function signedUpPerson(email = uniqueEmail('org')) {
  const signedIn = await signUpVerified(deps, { email, password: PASSWORD });
  const key = await operator().keys.create({ account: signedIn.account.id, name: 'provisioning', management: true });
  return { id: signedIn.account.id, email, session: signedIn.token, mkey: key.key, mkeyId: key.id };
}

async function fund(accountId: string, coins: string) {
  await credit(orm.em.fork(), { accountId, kind: 'topup', amount: parseCoins(coins), reference: 'test', idempotencyKey: `test-topup:${accountId}:${coins}:${Math.random()}`, description: 'Top-up' });
}

const openai = (key: string) => new OpenAI({ apiKey: key, baseURL: `${server.base}/api/v1`, maxRetries: 0 });
const messages = [{ role: 'user' as const, content: 'Say hello' }];
const chat = (key: string, model = 'test/ok') => openai(key).chat.completions.create({ model, messages, max_tokens: 20 });
/** The refusal of a chat, as the openai client reports it. */
async function chatRefusal(key: string, model = 'test/ok') {
  const err = await chat(key, model).then(
    () => null,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(OpenAI.APIError);
  return err as InstanceType<typeof OpenAI.APIError>;
}

/** The token of the newest invitation link mailed to the address (`/invitations/{token}`). */
async function invitationToken(email: string): Promise<string> {
  const mail = await testMailbox.next(email);
  return decodeURIComponent(new URL(mail.link!).pathname.split('/').at(-1)!);
}

async function makeOrganization(owner: { mkey: string }, name = 'Acme') {
  const res = await api(owner.mkey, 'POST', '/organizations', { name });
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  return res.body.id as string;
}

/** A second person joins the organization through an invitation, accepted signed in as the invited address. */
async function join(orgId: string, admin: { mkey: string }, role: 'member' | 'admin' = 'member') {
  const joiner = await signedUpPerson();
  const invited = await api(admin.mkey, 'POST', `/organizations/${orgId}/invitations`, { email: joiner.email, role });
  expect(invited.status, JSON.stringify(invited.body)).toBe(201);
  await caller({ kind: 'session', token: joiner.session }).organizations.invitations.accept({ token: await invitationToken(joiner.email) });
  return joiner;
}

describe('a management key manages API keys', () => {
  it('creates, lists, gets, limits, disables, enables and deletes keys; the secret is shown once', async () => {
    const p = await person('10');
    const created = await api(p.mkey, 'POST', '/keys', { name: 'customer-42' });
    expect(created.status).toBe(201);
    expect(created.headers.get('cache-control')).toBe('no-store');
    // Counted against the key's rate limit, as every key is.
    expect(created.headers.get('x-ratelimit-limit-requests')).toMatch(/^\d+$/);
    expect(created.body).toMatchObject({ object: 'api_key', name: 'customer-42', type: 'standard', organization_id: null, user_id: p.id, disabled: false, revoked_at: null });
    const secret: string = created.body.key;
    expect(secret.startsWith(created.body.prefix)).toBe(true);
    const id: string = created.body.id;

    // The secret is in no other answer.
    const listed = await api(p.mkey, 'GET', '/keys');
    expect(listed.status).toBe(200);
    expect(listed.body.data.map((k: { id: string }) => k.id)).toEqual([p.mkeyId, id]);
    expect(listed.body.data.find((k: { id: string }) => k.id === p.mkeyId)).toMatchObject({ type: 'management' });
    const got = await api(p.mkey, 'GET', `/keys/${id}`);
    expect(got.body).toMatchObject({ id, name: 'customer-42' });
    for (const answer of [listed, got]) {
      expect(JSON.stringify(answer.body)).not.toContain(secret);
      expect(JSON.stringify(answer.body)).not.toContain('"key"');
    }

    // Limits: spend limit and period, expiry, allowed models. (Set before the key's first chat: a
    // key in the cache of recent keys sees its new limits when the database's change notice reaches
    // the process, which this test's server does not listen for.)
    const expiresAt = new Date(deps.clock().getTime() + 3_600_000).toISOString();
    const limited = await api(p.mkey, 'PATCH', `/keys/${id}`, { name: 'limited', spend_limit_coins: '5', spend_limit_period: 'monthly', expires_at: expiresAt, allowed_models: ['test/ok'] });
    expect(limited.status, JSON.stringify(limited.body)).toBe(200);
    expect(limited.body).toMatchObject({ name: 'limited', spend_limit_coins: 5, spend_limit_period: 'monthly', expires_at: expiresAt, allowed_models: ['test/ok'] });
    expect((await chat(secret)).model).toBe('test/ok');
    const notAllowed = await chatRefusal(secret, 'test/plain');
    expect([notAllowed.status, notAllowed.code]).toEqual([403, 'model_not_allowed']);
    // Past its expiry (the clock injected two hours on), a key is refused, saying so. (A fresh key: the
    // reservation checks a cached key's expiry against the database's own clock, not the injected one.)
    const expiring = await api(p.mkey, 'POST', '/keys', { name: 'expiring' });
    expect((await api(p.mkey, 'PATCH', `/keys/${expiring.body.id}`, { expires_at: expiresAt })).body).toMatchObject({ expires_at: expiresAt });
    ahead = 2 * 3_600_000;
    try {
      const expired = await chatRefusal(expiring.body.key);
      expect([expired.status, expired.code]).toEqual([401, 'api_key_expired']);
    } finally {
      ahead = 0;
    }
    expect((await api(p.mkey, 'PATCH', `/keys/${id}`, { expires_at: null, spend_limit_coins: null, allowed_models: null })).body).toMatchObject({ expires_at: null, spend_limit_coins: null, allowed_models: null });

    // Disabled: 401 saying so, through the official client; enabled again: it works.
    expect((await api(p.mkey, 'PATCH', `/keys/${id}`, { disabled: true })).body).toMatchObject({ disabled: true });
    const disabled = await chatRefusal(secret);
    expect([disabled.status, disabled.code]).toEqual([401, 'api_key_disabled']);
    expect(disabled.message).toMatch(/disabled/);
    expect((await api(p.mkey, 'PATCH', `/keys/${id}`, { disabled: false })).body).toMatchObject({ disabled: false });
    expect((await chat(secret)).choices).toHaveLength(1);

    // Deleted: revoked at once; deleting again answers the same key.
    const deleted = await api(p.mkey, 'DELETE', `/keys/${id}`);
    expect(deleted.status).toBe(200);
    expect(deleted.body).toMatchObject({ id, object: 'api_key' });
    expect(deleted.body.revoked_at).not.toBeNull();
    expect((await chatRefusal(secret)).status).toBe(401);
    expect((await api(p.mkey, 'DELETE', `/keys/${id}`)).body.revoked_at).toBe(deleted.body.revoked_at);
    const changeRevoked = await api(p.mkey, 'PATCH', `/keys/${id}`, { name: 'x' });
    expect([changeRevoked.status, changeRevoked.body.error.code]).toEqual([409, 'key_revoked']);

    // A management key may revoke itself: refused from its next request on.
    expect((await api(p.mkey, 'DELETE', `/keys/${p.mkeyId}`)).body).toMatchObject({ id: p.mkeyId, type: 'management' });
    expect((await api(p.mkey, 'GET', '/keys')).status).toBe(401);
  });

  it('answers bad input with a 4xx naming the field, never a 500', async () => {
    const p = await person();
    const cases: [string, string, unknown, number, string | null][] = [
      ['POST', '/keys', { spend_limit_coins: 'lots' }, 400, 'spend_limit_coins'],
      ['POST', '/keys', { organization_id: 'acme' }, 400, 'organization_id'],
      ['POST', '/keys', { allowed_models: ['nobody/none'] }, 400, 'allowed_models.0'],
      ['POST', '/keys', [1, 2], 400, 'body'],
      ['POST', '/keys', { management: true }, 403, 'management'],
      ['GET', '/keys?organization_id=nope', undefined, 400, 'organization_id'],
      ['GET', '/keys/nope', undefined, 400, 'id'],
      ['GET', '/keys/key_unknown', undefined, 404, 'id'],
      ['PATCH', '/keys/key_unknown', { name: 'x' }, 404, 'id'],
      ['PATCH', `/keys/${p.mkeyId}`, { expires_at: 'tomorrow' }, 400, 'expires_at'],
      ['POST', '/organizations', {}, 400, 'name'],
      ['POST', '/organizations', { name: 'x'.repeat(101) }, 400, 'name'],
      ['GET', '/organizations/acme', undefined, 400, 'id'],
      ['GET', '/organizations/org_unknown', undefined, 404, 'id'],
      ['PATCH', '/organizations/org_unknown/members/bob', { role: 'admin' }, 400, 'user_id'],
      ['POST', '/organizations/org_unknown/invitations', { email: 'not an address' }, 400, 'email'],
      ['DELETE', '/organizations/org_unknown/invitations/nope', undefined, 400, 'invitation_id'],
    ];
    for (const [method, path, body, status, param] of cases) {
      const res = await api(p.mkey, method, path, body);
      expect([res.status, res.body.error?.param], `${method} ${path} ${JSON.stringify(body)}: ${JSON.stringify(res.body)}`).toEqual([status, param]);
    }
    // What a fuzzer sends: wrong types, NUL, huge and negative numbers, long text, on every write route. 4xx, documented, never 500.
    const orgId = await makeOrganization(p, 'Hostile');
    const target = (await api(p.mkey, 'POST', '/keys', { name: 'target' })).body.id as string;
    const hostile: unknown[] = ['a\u0000b', 'x'.repeat(10_000), -1, 0, 1e308, 2 ** 64, { nested: true }, [null], true, null, '💸', ' '];
    const writes: [string, string, string[]][] = [
      ['POST', '/keys', ['name', 'spend_limit_coins', 'spend_limit_period', 'expires_at', 'allowed_models', 'organization_id']],
      ['PATCH', `/keys/${target}`, ['name', 'spend_limit_coins', 'expires_at', 'allowed_models', 'disabled']],
      ['POST', '/organizations', ['name']],
      ['PATCH', `/organizations/${orgId}/members/${p.id}`, ['role', 'spend_limit_coins', 'spend_limit_period']],
      ['POST', `/organizations/${orgId}/invitations`, ['email', 'role']],
    ];
    for (const [method, path, fields] of writes) {
      for (const field of fields) {
        for (const value of hostile) {
          const res = await api(p.mkey, method, path, { [field]: value });
          expect(res.status, `${method} ${path} ${field}=${JSON.stringify(value)?.slice(0, 40)}: ${JSON.stringify(res.body).slice(0, 300)}`).toBeLessThan(500);
        }
      }
    }
    // The management key and its owner's role came through.
    expect((await api(p.mkey, 'GET', `/keys/${p.mkeyId}`)).body).toMatchObject({ name: 'provisioning', revoked_at: null });
    expect((await api(p.mkey, 'GET', `/organizations/${orgId}`)).body).toMatchObject({ role: 'owner' });

    const text = await fetch(`${server.base}/api/v1/keys`, { method: 'POST', headers: { ...bearer(p.mkey), 'content-type': 'text/plain' }, body: 'name=x' });
    expect(text.status).toBe(415);
    const wrongMethod = await api(p.mkey, 'PUT', '/keys', {});
    expect(wrongMethod.status).toBe(405);
  });
});

describe('each kind of key on the other’s routes', () => {
  it('an API key for models gets 403 on every management route; no key gets 401', async () => {
    const account = await makeAccount(orm, { coins: '1' });
    const { key } = await makeKey(orm, account.id);
    const routes: [string, string, unknown?][] = [
      ['GET', '/keys'],
      ['POST', '/keys', { name: 'x' }],
      ['GET', '/keys/key_abc'],
      ['PATCH', '/keys/key_abc', { disabled: true }],
      ['DELETE', '/keys/key_abc'],
      ['GET', '/organizations'],
      ['POST', '/organizations', { name: 'x' }],
      ['GET', '/organizations/org_abc'],
      ['DELETE', '/organizations/org_abc'],
      ['GET', '/organizations/org_abc/members'],
      ['PATCH', `/organizations/org_abc/members/${account.id}`, { role: 'admin' }],
      ['DELETE', `/organizations/org_abc/members/${account.id}`],
      ['GET', '/organizations/org_abc/invitations'],
      ['POST', '/organizations/org_abc/invitations', { email: 'a@example.com' }],
      ['DELETE', '/organizations/org_abc/invitations/inv_abc'],
    ];
    for (const [method, path, body] of routes) {
      const refused = await api(key, method, path, body);
      expect([refused.status, refused.body.error?.code], `${method} ${path}`).toEqual([403, 'management_key_required']);
      expect((await api(null, method, path, body)).status, `${method} ${path} without a key`).toBe(401);
    }
  });

  it('a management key gets 403 on /chat/completions, /models and /generations', async () => {
    const p = await person('10');
    const refused = await chatRefusal(p.mkey);
    expect([refused.status, refused.code]).toEqual([403, 'management_key_not_allowed']);
    const models = await openai(p.mkey).models.list().then(
      () => null,
      (e: unknown) => e as InstanceType<typeof OpenAI.APIError>,
    );
    expect(models?.status).toBe(403);
    for (const path of ['/models', '/generations', '/balance']) {
      const res = await api(p.mkey, 'GET', path);
      expect([res.status, res.body.error?.code], path).toEqual([403, 'management_key_not_allowed']);
    }
    const job = await api(p.mkey, 'POST', '/generations', { model: 'mas/image-demo', prompt: 'x' });
    expect([job.status, job.body.error?.code]).toEqual([403, 'management_key_not_allowed']);
  });
});

describe('organizations through the provisioning API', () => {
  it('an owner makes an organization, a member spends from its wallet with their own key, not from their own', async () => {
    const owner = await person();
    const orgId = await makeOrganization(owner, 'Acme Research');
    const listed = await api(owner.mkey, 'GET', '/organizations');
    expect(listed.body.data).toContainEqual(expect.objectContaining({ id: orgId, object: 'organization', name: 'Acme Research', role: 'owner' }));
    await fund(orgId, '10');
    const org = await api(owner.mkey, 'GET', `/organizations/${orgId}`);
    expect(org.status).toBe(200);
    expect(org.body.balance).toMatchObject({ coins: 10 });

    const member = await join(orgId, owner);
    const members = await api(owner.mkey, 'GET', `/organizations/${orgId}/members`);
    expect(members.body.data.map((m: { user_id: string; role: string }) => [m.user_id, m.role])).toEqual([
      [owner.id, 'owner'],
      [member.id, 'member'],
    ]);
    expect(Object.keys(members.body.data[1]).sort()).toEqual(['email', 'joined_at', 'object', 'role', 'spend_limit_coins', 'spend_limit_period', 'spent_coins', 'user_id']);

    const orgKey = await api(member.mkey, 'POST', '/keys', { organization_id: orgId, name: 'team' });
    expect(orgKey.status, JSON.stringify(orgKey.body)).toBe(201);
    expect(orgKey.body).toMatchObject({ organization_id: orgId, user_id: member.id, type: 'standard' });
    const personalBefore = await api(orgKey.body.key, 'GET', '/balance');
    expect(personalBefore.body).toMatchObject({ coins: 10 });
    await chat(orgKey.body.key);
    await chargesWritten();
    const after = await api(owner.mkey, 'GET', `/organizations/${orgId}`);
    expect(after.body.balance.coins).toBeLessThan(10);
    // GET /balance with the organization's key answers the organization's wallet; the member's own is untouched.
    expect((await api(orgKey.body.key, 'GET', '/balance')).body.coins).toBe(after.body.balance.coins);
    const personal = await makeKey(orm, member.id);
    expect((await api(personal.key, 'GET', '/balance')).body.coins).toBe(0);

    // The member sees their own keys of the organization, the owner every one.
    const mine = await api(member.mkey, 'GET', `/keys?organization_id=${orgId}`);
    expect(mine.body.data.map((k: { id: string }) => k.id)).toEqual([orgKey.body.id]);
    const all = await api(owner.mkey, 'GET', `/keys?organization_id=${orgId}`);
    expect(all.body.data.map((k: { id: string }) => k.id)).toContain(orgKey.body.id);

    // A member's spend limit, set by the owner, stops their key.
    const limited = await api(owner.mkey, 'PATCH', `/organizations/${orgId}/members/${member.id}`, { spend_limit_coins: '0.00001', spend_limit_period: 'total' });
    expect(limited.status, JSON.stringify(limited.body)).toBe(200);
    expect(limited.body).toMatchObject({ user_id: member.id, spend_limit_coins: 0.00001, spend_limit_period: 'total' });
    const stopped = await chatRefusal(orgKey.body.key);
    expect([stopped.status, stopped.code]).toEqual([402, 'member_spend_limit_reached']);
    await api(owner.mkey, 'PATCH', `/organizations/${orgId}/members/${member.id}`, { spend_limit_coins: null });
    await chat(orgKey.body.key);

    // Removing the member revokes their organization keys: 401 on the very next request.
    const removed = await api(owner.mkey, 'DELETE', `/organizations/${orgId}/members/${member.id}`);
    expect(removed.status).toBe(200);
    expect(removed.body).toMatchObject({ user_id: member.id, deleted: true, keys_revoked: 1 });
    expect((await chatRefusal(orgKey.body.key)).status).toBe(401);
    expect((await api(member.mkey, 'GET', `/organizations/${orgId}`)).status).toBe(404);
    expect((await api(personal.key, 'GET', '/balance')).status).toBe(200);
  });

  it('a management key made for one organization acts on that one only', async () => {
    const owner = await person();
    const orgId = await makeOrganization(owner, 'Scoped');
    const otherId = await makeOrganization(owner, 'Other');
    await fund(orgId, '3');
    const personalKey = await api(owner.mkey, 'POST', '/keys', { name: 'mine' });
    const otherKey = await api(owner.mkey, 'POST', '/keys', { organization_id: otherId });
    const scoped = await operator().keys.create({ account: owner.id, organization: orgId, management: true, name: 'scoped' });
    expect(scoped).toMatchObject({ organization_id: orgId, type: 'management' });

    expect((await api(scoped.key, 'GET', '/organizations')).body.data.map((o: { id: string }) => o.id)).toEqual([orgId]);
    expect((await api(scoped.key, 'GET', `/organizations/${orgId}`)).body.balance).toMatchObject({ coins: 3 });
    // Without organization_id, its keys are its organization's.
    const made = await api(scoped.key, 'POST', '/keys', { name: 'in scope' });
    expect(made.body).toMatchObject({ organization_id: orgId, user_id: owner.id });
    expect((await api(scoped.key, 'GET', '/keys')).body.data.map((k: { id: string }) => k.id)).toEqual([scoped.id, made.body.id]);
    for (const [method, path, body] of [
      ['GET', `/organizations/${otherId}`],
      ['GET', `/organizations/${otherId}/members`],
      ['GET', `/keys?organization_id=${otherId}`],
      ['POST', '/keys', { organization_id: otherId }],
      ['GET', `/keys/${otherKey.body.id}`],
      ['PATCH', `/keys/${otherKey.body.id}`, { disabled: true }],
      ['DELETE', `/keys/${otherKey.body.id}`],
      ['GET', `/keys/${personalKey.body.id}`],
      ['DELETE', `/keys/${personalKey.body.id}`],
    ] as [string, string, unknown?][]) {
      expect((await api(scoped.key, method, path, body)).status, `${method} ${path}`).toBe(404);
    }
    const another = await api(scoped.key, 'POST', '/organizations', { name: 'More' });
    expect([another.status, another.body.error.code]).toEqual([403, 'organization_scoped_key']);
    // Nothing changed out of its scope.
    expect((await api(owner.mkey, 'GET', `/keys/${otherKey.body.id}`)).body).toMatchObject({ disabled: false, revoked_at: null });
    expect((await api(owner.mkey, 'GET', `/keys/${personalKey.body.id}`)).body).toMatchObject({ revoked_at: null });
  });

  it('BOLA: a non-member, a member of another organization and a plain member on admin routes get 404 or 403, and nothing changes', async () => {
    const owner = await person();
    const orgId = await makeOrganization(owner, 'Target');
    const member = await join(orgId, owner);
    const ownerOrgKey = await api(owner.mkey, 'POST', '/keys', { organization_id: orgId, name: 'owner-org' });
    const ownerPersonalKey = await api(owner.mkey, 'POST', '/keys', { name: 'owner-own' });
    const memberOrgKey = await api(member.mkey, 'POST', '/keys', { organization_id: orgId, name: 'member-org' });
    const pending = await api(owner.mkey, 'POST', `/organizations/${orgId}/invitations`, { email: uniqueEmail('pending') });
    expect(pending.status).toBe(201);
    const outsider = await person();
    const elsewhere = await person();
    await makeOrganization(elsewhere, 'Elsewhere');

    /** What a refused call could have changed (a key's `last_used_at` moves with use: left out). */
    const keyState = (list: { data: Record<string, unknown>[] }) =>
      list.data.map((k) => [k.id, k.name, k.disabled, k.revoked_at, k.spend_limit_coins, k.expires_at, k.allowed_models]);
    const snapshot = async () => ({
      org: (await api(owner.mkey, 'GET', `/organizations/${orgId}`)).body,
      members: (await api(owner.mkey, 'GET', `/organizations/${orgId}/members`)).body,
      invitations: (await api(owner.mkey, 'GET', `/organizations/${orgId}/invitations`)).body,
      keys: keyState((await api(owner.mkey, 'GET', `/keys?organization_id=${orgId}`)).body),
      personal: keyState((await api(owner.mkey, 'GET', '/keys')).body),
    });
    const before = await snapshot();

    const o = `/organizations/${orgId}`;
    /** Every route, and whether it is an admin's (a plain member is refused too). */
    const routes: [string, string, unknown, boolean][] = [
      ['GET', o, undefined, false],
      ['DELETE', o, undefined, true],
      ['GET', `${o}/members`, undefined, true],
      ['PATCH', `${o}/members/${owner.id}`, { role: 'member' }, true],
      ['PATCH', `${o}/members/${member.id}`, { role: 'admin' }, true],
      ['PATCH', `${o}/members/${member.id}`, { spend_limit_coins: '1000' }, true],
      ['DELETE', `${o}/members/${owner.id}`, undefined, true],
      ['GET', `${o}/invitations`, undefined, true],
      ['POST', `${o}/invitations`, { email: uniqueEmail('bola') }, true],
      ['POST', `${o}/invitations`, { email: member.email, role: 'owner' }, true],
      ['DELETE', `${o}/invitations/${pending.body.id}`, undefined, true],
      ['GET', `/keys?organization_id=${orgId}`, undefined, false],
      ['POST', '/keys', { organization_id: orgId }, false],
      ['GET', `/keys/${ownerOrgKey.body.id}`, undefined, true],
      ['PATCH', `/keys/${ownerOrgKey.body.id}`, { disabled: true }, true],
      ['DELETE', `/keys/${ownerOrgKey.body.id}`, undefined, true],
      ['GET', `/keys/${ownerPersonalKey.body.id}`, undefined, true],
      ['PATCH', `/keys/${ownerPersonalKey.body.id}`, { spend_limit_coins: '0.000001' }, true],
      ['DELETE', `/keys/${ownerPersonalKey.body.id}`, undefined, true],
    ];
    for (const [method, path, body, adminOnly] of routes) {
      for (const [who, key] of [
        ['non-member', outsider.mkey],
        ['member of another organization', elsewhere.mkey],
      ] as const) {
        const res = await api(key, method, path, body);
        expect(res.status, `${who}: ${method} ${path}: ${JSON.stringify(res.body)}`).toBe(404);
      }
      if (adminOnly) {
        const res = await api(member.mkey, method, path, body);
        expect([403, 404], `member: ${method} ${path}: ${JSON.stringify(res.body)}`).toContain(res.status);
      }
    }
    // The member's own reach: their organization, their own keys only, a key of their own in it.
    expect((await api(member.mkey, 'GET', o)).status).toBe(200);
    expect((await api(member.mkey, 'GET', `/keys?organization_id=${orgId}`)).body.data.map((k: { id: string }) => k.id)).toEqual([memberOrgKey.body.id]);
    expect((await api(outsider.mkey, 'GET', '/organizations')).body.data.map((x: { id: string }) => x.id)).not.toContain(orgId);

    const after = await snapshot();
    expect(after).toEqual(before);
    expect(after.invitations.data.map((i: { id: string; status: string }) => [i.id, i.status])).toEqual([[pending.body.id, 'pending']]);
  });

  it('the last owner cannot be removed or demoted (409); another owner can be made first', async () => {
    const owner = await person();
    const orgId = await makeOrganization(owner, 'Owners');
    const demote = await api(owner.mkey, 'PATCH', `/organizations/${orgId}/members/${owner.id}`, { role: 'admin' });
    expect([demote.status, demote.body.error.code]).toEqual([409, 'last_owner']);
    const leave = await api(owner.mkey, 'DELETE', `/organizations/${orgId}/members/${owner.id}`);
    expect([leave.status, leave.body.error.code]).toEqual([409, 'last_owner']);

    const admin = await join(orgId, owner, 'admin');
    const byAdmin = await api(admin.mkey, 'DELETE', `/organizations/${orgId}/members/${owner.id}`);
    expect([byAdmin.status, byAdmin.body.error.code]).toEqual([403, 'owner_role_required']);
    expect((await api(owner.mkey, 'PATCH', `/organizations/${orgId}/members/${admin.id}`, { role: 'owner' })).body).toMatchObject({ role: 'owner' });
    expect((await api(owner.mkey, 'PATCH', `/organizations/${orgId}/members/${owner.id}`, { role: 'admin' })).body).toMatchObject({ role: 'admin' });
    const roles = (await api(admin.mkey, 'GET', `/organizations/${orgId}/members`)).body.data.map((m: { role: string }) => m.role);
    expect(roles.sort()).toEqual(['admin', 'owner']);
  });

  it('10 active keys per member of an organization, beside the personal wallet’s own 10', async () => {
    const owner = await person();
    const orgId = await makeOrganization(owner, 'Ten');
    for (let i = 0; i < 10; i++) expect((await api(owner.mkey, 'POST', '/keys', { organization_id: orgId, name: `k${i}` })).status).toBe(201);
    const eleventh = await api(owner.mkey, 'POST', '/keys', { organization_id: orgId });
    expect([eleventh.status, eleventh.body.error.code]).toEqual([400, 'key_limit_reached']);
    expect(eleventh.body.error.message).toMatch(/per member/);
    // Another member's keys and the personal wallet's are counted apart.
    const member = await join(orgId, owner);
    expect((await api(member.mkey, 'POST', '/keys', { organization_id: orgId })).status).toBe(201);
    expect((await api(owner.mkey, 'POST', '/keys', { name: 'personal' })).status).toBe(201);
    // Revoking one frees a place.
    const first = (await api(owner.mkey, 'GET', `/keys?organization_id=${orgId}`)).body.data.find((k: { user_id: string }) => k.user_id === owner.id);
    await api(owner.mkey, 'DELETE', `/keys/${first.id}`);
    expect((await api(owner.mkey, 'POST', '/keys', { organization_id: orgId })).status).toBe(201);
  });

  it('an owner deletes an empty organization: its keys stop at once', async () => {
    const owner = await person();
    const orgId = await makeOrganization(owner, 'Short-lived');
    const key = await api(owner.mkey, 'POST', '/keys', { organization_id: orgId });
    await fund(orgId, '1');
    const refused = await api(owner.mkey, 'DELETE', `/organizations/${orgId}`);
    expect([refused.status, refused.body.error.code]).toEqual([409, 'organization_has_balance']);
    const other = await person();
    const empty = await makeOrganization(other, 'Empty');
    const orgKey = await api(other.mkey, 'POST', '/keys', { organization_id: empty });
    const deleted = await api(other.mkey, 'DELETE', `/organizations/${empty}`);
    expect(deleted.status, JSON.stringify(deleted.body)).toBe(200);
    expect(deleted.body).toMatchObject({ id: empty, deleted: true, keys_revoked: 1 });
    expect((await api(orgKey.body.key, 'GET', '/balance')).status).toBe(401);
    expect((await api(other.mkey, 'GET', `/organizations/${empty}`)).status).toBe(404);
    expect((await api(key.body.key, 'GET', '/balance')).status).toBe(200);
  });
});

describe('invitations', () => {
  /** The refusal of accepting `token` as the person with this session. */
  async function acceptRefusal(session: string, token: string) {
    const err = await caller({ kind: 'session', token: session })
      .organizations.invitations.accept({ token })
      .then(
        () => null,
        (e: unknown) => toCoreError(e),
      );
    expect(err).not.toBeNull();
    return { code: err!.code, reason: err!.reason };
  }

  it('is bound to its address, single-use, valid 7 days and revocable; the token is never in an answer', async () => {
    const owner = await person();
    const orgId = await makeOrganization(owner, 'Invites');
    const invitee = await signedUpPerson();
    const stranger = await signedUpPerson();

    const invited = await api(owner.mkey, 'POST', `/organizations/${orgId}/invitations`, { email: invitee.email, role: 'admin' });
    expect(invited.status).toBe(201);
    expect(invited.body).toMatchObject({ object: 'organization_invitation', organization_id: orgId, email: invitee.email, role: 'admin', status: 'pending' });
    const token = await invitationToken(invitee.email);
    expect(JSON.stringify(invited.body)).not.toContain(token);
    const listed = await api(owner.mkey, 'GET', `/organizations/${orgId}/invitations`);
    expect(listed.body.data.map((i: { id: string }) => i.id)).toEqual([invited.body.id]);
    expect(JSON.stringify(listed.body)).not.toContain(token);

    // Another address: 403. The invited one: joins. Again: 410.
    expect(await acceptRefusal(stranger.session, token)).toEqual({ code: 'forbidden', reason: 'invitation_for_another_email' });
    const accepted = await caller({ kind: 'session', token: invitee.session }).organizations.invitations.accept({ token });
    expect(accepted).toMatchObject({ organization_id: orgId, role: 'admin', joined: true });
    expect(await acceptRefusal(invitee.session, token)).toEqual({ code: 'gone', reason: 'invitation_accepted' });
    expect((await api(invitee.mkey, 'GET', `/organizations/${orgId}`)).body).toMatchObject({ role: 'admin' });
    const revokeAccepted = await api(owner.mkey, 'DELETE', `/organizations/${orgId}/invitations/${invited.body.id}`);
    expect([revokeAccepted.status, revokeAccepted.body.error.code]).toEqual([409, 'invitation_already_accepted']);

    // Revoked over REST: 410.
    const later = await signedUpPerson();
    const second = await api(owner.mkey, 'POST', `/organizations/${orgId}/invitations`, { email: later.email });
    const revoked = await api(owner.mkey, 'DELETE', `/organizations/${orgId}/invitations/${second.body.id}`);
    expect(revoked.status).toBe(200);
    expect(revoked.body).toMatchObject({ id: second.body.id, status: 'revoked' });
    expect(await acceptRefusal(later.session, await invitationToken(later.email))).toEqual({ code: 'gone', reason: 'invitation_revoked' });
    expect((await api(owner.mkey, 'GET', `/organizations/${orgId}/invitations`)).body.data).toEqual([]);

    // Expired after 7 days (the clock injected, no waiting): 410.
    // (Sent by a clock 7 days and a minute behind: the invitee's session, made now, stays fresh.)
    const slow = await signedUpPerson();
    ahead = -(7 * 86_400_000 + 60_000);
    try {
      expect((await api(owner.mkey, 'POST', `/organizations/${orgId}/invitations`, { email: slow.email })).status).toBe(201);
    } finally {
      ahead = 0;
    }
    expect(await acceptRefusal(slow.session, await invitationToken(slow.email))).toEqual({ code: 'gone', reason: 'invitation_expired' });
    // A member already: 409.
    const again = await api(owner.mkey, 'POST', `/organizations/${orgId}/invitations`, { email: invitee.email });
    expect([again.status, again.body.error.code]).toEqual([409, 'already_member']);
  });
});
