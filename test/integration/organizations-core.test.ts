import type { MikroORM } from '@mikro-orm/postgresql';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Credential } from '../../core/auth/principals.ts';
import { createContext, type CoreDeps } from '../../core/context.ts';
import { createCaller } from '../../core/router.ts';
import { openTestOrm, testDeps, uniqueEmail } from '../support/db.ts';
import { refusal } from '../support/refusal.ts';
import { mailboxOf, signUpVerified } from '../support/sign-up.ts';

/**
 * The organization use cases of core (core/organizations/*) that no transport test covers:
 * deleting an organization, a disabled person's keys in an organization's wallet, the billing
 * e-mail of an organization never being a sign-in. REST, pages and the money rules have their
 * own tests (provisioning-api, organization-pages, organization-limits).
 */
let orm: MikroORM;
let deps: CoreDeps;
beforeAll(async () => {
  orm = await openTestOrm();
  deps = testDeps(orm);
});
afterAll(async () => {
  await orm.close();
});

const as = (credential: Credential) => createCaller(createContext(deps, credential));
const session = (token: string) => as({ kind: 'session', token });
const bearer = (token: string) => as({ kind: 'bearer', token });
const internal = () => as({ kind: 'internal' });
const PASSWORD = 'organizations of people 49';

async function person() {
  const email = uniqueEmail('org');
  const signedIn = await signUpVerified(deps, { email, password: PASSWORD });
  return { email, token: signedIn.token, id: signedIn.account.id };
}

describe('organizations in core', () => {
  it('an owner deletes an empty organization: its keys stop at once, it leaves every list; one holding coins is refused', async () => {
    const owner = await person();
    const org = await session(owner.token).organizations.create({ name: 'Short-lived' });
    expect(org).toMatchObject({ object: 'organization', name: 'Short-lived', role: 'owner', spend_limit_coins: null });
    const key = await session(owner.token).account.keys.create({ organization_id: org.id, name: 'team' });
    expect(key).toMatchObject({ organization_id: org.id, user_id: owner.id, type: 'standard', disabled: false });
    expect(await bearer(key.key).keys.whoami()).toEqual({ account: org.id, key: key.id });

    await internal().wallet.topUp({ account: org.id, coins: '5', idempotency_key: `org-delete-${org.id}` });
    expect(await refusal(session(owner.token).organizations.delete({ id: org.id }))).toMatchObject({ code: 'conflict', reason: 'organization_has_balance' });

    const empty = await session(owner.token).organizations.create({ name: 'Empty' });
    const emptyKey = await session(owner.token).account.keys.create({ organization_id: empty.id });
    expect(await session(owner.token).organizations.delete({ id: empty.id })).toMatchObject({ id: empty.id, deleted: true, keys_revoked: 1 });
    expect(await refusal(bearer(emptyKey.key).keys.whoami())).toMatchObject({ code: 'unauthorized' });
    expect((await session(owner.token).organizations.list()).data.map((o) => o.id)).toEqual([org.id]);
    expect(await refusal(session(owner.token).organizations.get({ id: empty.id }))).toMatchObject({ code: 'not_found', reason: 'organization_not_found' });
  });

  it('only an owner deletes; an admin gets 403 and a stranger 404', async () => {
    const owner = await person();
    const admin = await person();
    const stranger = await person();
    const org = await session(owner.token).organizations.create({ name: 'Kept' });
    await session(owner.token).organizations.invitations.create({ id: org.id, email: admin.email, role: 'admin' });
    const link = new URL(mailboxOf(deps).to(admin.email).at(-1)!.link!);
    expect(link.pathname).toMatch(/^\/invitations\/mas_invite_/);
    await session(admin.token).organizations.invitations.accept({ token: decodeURIComponent(link.pathname.split('/').at(-1)!) });
    expect(await refusal(session(admin.token).organizations.delete({ id: org.id }))).toMatchObject({ code: 'forbidden', reason: 'owner_role_required' });
    expect(await refusal(session(stranger.token).organizations.delete({ id: org.id }))).toMatchObject({ code: 'not_found' });
    expect((await session(owner.token).organizations.get({ id: org.id })).id).toBe(org.id);
  });

  it('a disabled person’s keys in an organization’s wallet are refused, and work again once the person is enabled', async () => {
    const owner = await person();
    const org = await session(owner.token).organizations.create({ name: 'Disable me' });
    const key = await session(owner.token).account.keys.create({ organization_id: org.id });
    await internal().admin.actions.disableAccount({ account: owner.id, reason: 'test' });
    expect(await refusal(bearer(key.key).keys.whoami())).toMatchObject({ code: 'unauthorized' });
    await internal().admin.actions.enableAccount({ account: owner.id, reason: 'test' });
    expect(await bearer(key.key).keys.whoami()).toEqual({ account: org.id, key: key.id });
  });

  it('an organization’s billing e-mail is no sign-in and no person: the owner’s address still signs in the owner, and names the owner to operators', async () => {
    const owner = await person();
    await session(owner.token).organizations.create({ name: 'Same mail' });
    const signedIn = await as({ kind: 'none' }).accounts.signIn({ email: owner.email, password: PASSWORD });
    expect(signedIn.account.id).toBe(owner.id);
    expect((await internal().accounts.get({ account: owner.email })).id).toBe(owner.id);
  });
});
