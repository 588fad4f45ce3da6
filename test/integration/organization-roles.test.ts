import type { EntityManager, MikroORM } from '@mikro-orm/postgresql';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Actor } from '../../core/auth/principals.ts';
import { CoreError } from '../../core/errors.ts';
import { ROLES, atLeast, organizationIdSchema, organizationNotFound, personIdSchema, requireRole, roleOf, roleSchema, type Role } from '../../core/organizations/roles.ts';
import { makeAccount, openTestOrm } from '../support/db.ts';

/**
 * The roles of an organization (core/organizations/roles.ts, docs/organizations.md): their order,
 * the ids they take, and `requireRole`'s answers: 404 outside the actor's reach (not a member,
 * or a management key made for another organization), 403 below the role needed, naming it.
 * Run on PostgreSQL (real organizations and members), through an entity manager that records
 * the statements it runs.
 */

let orm: MikroORM;
beforeAll(async () => {
  orm = await openTestOrm();
});
afterAll(async () => {
  await orm?.close();
});

let made = 0;
/**
 * A real organization `org` in which a real person has this role (or is no member), and the
 * entity manager to ask, which records each statement it runs (a spy on PostgreSQL, no stand-in).
 */
async function memberWith(role: Role | null) {
  const personAccount = await makeAccount(orm);
  const org = `org_roles${++made}x${Date.now()}`;
  const em = orm.em.fork();
  await em.execute(`insert into accounts (id, email, kind, name) values (?, ?, 'organization', 'Roles')`, [org, personAccount.email]);
  if (role) await em.execute('insert into organization_members (organization_id, account_id, role) values (?, ?, ?)', [org, personAccount.id, role]);
  const calls: { sql: string; params: unknown[] }[] = [];
  const execute = em.execute.bind(em);
  const spied = Object.assign(Object.create(em) as EntityManager, {
    execute: (sql: string, params: unknown[]) => {
      calls.push({ sql, params });
      return execute(sql, params);
    },
  });
  const actor: Actor = { personId: personAccount.id, organizationId: null };
  return { em: spied, calls, org, actor };
}
const refusal = async (p: Promise<unknown>): Promise<CoreError> => {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(CoreError);
  return err as CoreError;
};

describe('roles', () => {
  it('are ordered member < admin < owner: each role has every right of those below it, none above', () => {
    expect(ROLES).toEqual(['owner', 'admin', 'member']);
    const table = Object.fromEntries(ROLES.map((have) => [have, ROLES.filter((need) => atLeast(have, need))]));
    expect(table).toEqual({ owner: ['owner', 'admin', 'member'], admin: ['admin', 'member'], member: ['member'] });
  });

  it('take only their names, and ids of the right kind (a clear message for anything else)', () => {
    expect(roleSchema.safeParse('admin').success).toBe(true);
    expect(roleSchema.safeParse('Admin').success).toBe(false);
    expect(roleSchema.safeParse('billing').success).toBe(false);
    expect(organizationIdSchema.parse(' org_Ab12 ')).toBe('org_Ab12');
    for (const bad of ['acct_Ab12', 'org_', 'org_a-b', `org_${'a'.repeat(65)}`, 'xorg_a']) {
      const r = organizationIdSchema.safeParse(bad);
      expect(r.success, bad).toBe(false);
      expect(r.error?.issues[0]?.message).toMatch(/organization id such as org_/);
    }
    expect(organizationIdSchema.safeParse(`org_${'a'.repeat(64)}`).success).toBe(true);
    expect(personIdSchema.parse(' acct_Z9 ')).toBe('acct_Z9');
    expect(personIdSchema.safeParse(`acct_${'a'.repeat(64)}`).success).toBe(true);
    expect(personIdSchema.safeParse(`acct_${'a'.repeat(65)}`).success).toBe(false);
    expect(personIdSchema.safeParse('acct_Z9').error).toBeUndefined();
    for (const bad of ['org_Z9', 'acct_', 'acct_!', 'xacct_a']) expect(personIdSchema.safeParse(bad).success, bad).toBe(false);
  });
});

describe('requireRole', () => {
  it.each([
    ['member', 'member'],
    ['admin', 'member'],
    ['admin', 'admin'],
    ['owner', 'member'],
    ['owner', 'admin'],
    ['owner', 'owner'],
  ] as [Role, Role][])('a %s may act where %s is needed: the role is answered', async (have, need) => {
    const { em, calls, org, actor } = await memberWith(have);
    expect(await requireRole(em, actor, org, need)).toBe(have);
    expect(calls).toHaveLength(1);
    expect(calls[0]!.params).toEqual([org, actor.personId]);
  });

  it.each([
    ['member', 'admin'],
    ['member', 'owner'],
    ['admin', 'owner'],
  ] as [Role, Role][])('a %s where %s is needed: 403, naming both roles', async (have, need) => {
    const { em, org, actor } = await memberWith(have);
    const err = await refusal(requireRole(em, actor, org, need));
    expect(err.code).toBe('forbidden');
    expect(err.reason).toBe(`${need}_role_required`);
    expect(err.params).toEqual({ role: have, needed: need });
    expect(err.message).toBe(`This needs the ${need} role in the organization ${org}; yours is ${have}.`);
  });

  it('a person who is not a member: 404, as for an organization that does not exist (the field named)', async () => {
    const { em, org, actor } = await memberWith(null);
    const err = await refusal(requireRole(em, actor, org, 'member'));
    expect(err).toMatchObject({ code: 'not_found', reason: 'organization_not_found', param: 'id', message: `No organization ${org}.` });
    const other = await refusal(requireRole(em, actor, org, 'member', { param: 'organization_id' }));
    expect(other.param).toBe('organization_id');
    expect(await refusal(requireRole(em, actor, 'org_doesNotExist', 'member'))).toMatchObject({ code: 'not_found', reason: 'organization_not_found' });
    expect(organizationNotFound('org_b')).toMatchObject({ code: 'not_found', reason: 'organization_not_found', param: 'id' });
  });

  it("a management key made for one organization: another organization is unknown (404) without asking the database, even to its owner", async () => {
    const mine = await memberWith('owner');
    const other = await memberWith('owner');
    const scoped: Actor = { personId: mine.actor.personId, organizationId: mine.org, keyId: 'key_x' };
    // The person owns `other.org` too: still unknown to this key.
    await orm.em.fork().execute(`insert into organization_members (organization_id, account_id, role) values (?, ?, 'owner')`, [other.org, mine.actor.personId]);
    const err = await refusal(requireRole(mine.em, scoped, other.org, 'member', { param: 'organization_id' }));
    expect(err).toMatchObject({ code: 'not_found', reason: 'organization_not_found', param: 'organization_id' });
    expect(mine.calls).toHaveLength(0);
    // Its own organization: the person's role there decides.
    expect(await requireRole(mine.em, scoped, mine.org, 'admin')).toBe('owner');
  });

  it('locks the member row only when asked, and counts only live organizations', async () => {
    const { em, calls, org, actor } = await memberWith('admin');
    expect(await roleOf(em, org, actor.personId)).toBe('admin');
    await em.transactional(async (tx) => {
      expect(await roleOf(tx, org, actor.personId, { lock: true })).toBe('admin');
    });
    expect(calls[0]!.sql).toMatch(/o\.disabled_at is null$/);
    expect(calls[0]!.sql).toMatch(/o\.kind = 'organization' and o\.disabled_at is null/);
    // A deleted (disabled) organization has no members; a person's own account is no organization.
    await orm.em.fork().execute('update accounts set disabled_at = now() where id = ?', [org]);
    expect(await roleOf(orm.em.fork(), org, actor.personId)).toBeNull();
    expect(await roleOf(orm.em.fork(), actor.personId, actor.personId)).toBeNull();
  });
});
