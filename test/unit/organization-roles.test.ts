import type { EntityManager } from '@mikro-orm/postgresql';
import { describe, expect, it } from 'vitest';
import type { Actor } from '../../core/auth/principals.ts';
import { CoreError } from '../../core/errors.ts';
import { ROLES, atLeast, organizationIdSchema, organizationNotFound, personIdSchema, requireRole, roleOf, roleSchema, type Role } from '../../core/organizations/roles.ts';

/**
 * The roles of an organization (core/organizations/roles.ts, docs/organizations.md): their order,
 * the ids they take, and `requireRole`'s answers: 404 outside the actor's reach (not a member,
 * or a management key made for another organization), 403 below the role needed, naming it.
 * The database's answer to roleOf's one query is given by a stand-in for the entity manager
 * that records the query; test/integration/organization-limits.test.ts and the route tests run
 * it on PostgreSQL.
 */

/** An entity manager whose one query answers this role (or no row), recording what was asked. */
function emAnswering(role: Role | null) {
  const calls: { sql: string; params: unknown[] }[] = [];
  const em = {
    execute: (sql: string, params: unknown[]) => {
      calls.push({ sql, params });
      return Promise.resolve(role ? [{ role }] : []);
    },
  } as unknown as EntityManager;
  return { em, calls };
}
const person: Actor = { personId: 'acct_person', organizationId: null };
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
    const { em, calls } = emAnswering(have);
    expect(await requireRole(em, person, 'org_a', need)).toBe(have);
    expect(calls).toHaveLength(1);
    expect(calls[0]!.params).toEqual(['org_a', 'acct_person']);
  });

  it.each([
    ['member', 'admin'],
    ['member', 'owner'],
    ['admin', 'owner'],
  ] as [Role, Role][])('a %s where %s is needed: 403, naming both roles', async (have, need) => {
    const { em } = emAnswering(have);
    const err = await refusal(requireRole(em, person, 'org_a', need));
    expect(err.code).toBe('forbidden');
    expect(err.reason).toBe(`${need}_role_required`);
    expect(err.params).toEqual({ role: have, needed: need });
    expect(err.message).toBe(`This needs the ${need} role in the organization org_a; yours is ${have}.`);
  });

  it('a person who is not a member: 404, as for an organization that does not exist (the field named)', async () => {
    const { em } = emAnswering(null);
    const err = await refusal(requireRole(em, person, 'org_a', 'member'));
    expect(err).toMatchObject({ code: 'not_found', reason: 'organization_not_found', param: 'id', message: 'No organization org_a.' });
    const other = await refusal(requireRole(em, person, 'org_a', 'member', { param: 'organization_id' }));
    expect(other.param).toBe('organization_id');
    expect(organizationNotFound('org_b')).toMatchObject({ code: 'not_found', reason: 'organization_not_found', param: 'id' });
  });

  it("a management key made for one organization: another organization is unknown (404) without asking the database, even to its owner", async () => {
    const { em, calls } = emAnswering('owner');
    const scoped: Actor = { personId: 'acct_person', organizationId: 'org_mine', keyId: 'key_x' };
    const err = await refusal(requireRole(em, scoped, 'org_other', 'member', { param: 'organization_id' }));
    expect(err).toMatchObject({ code: 'not_found', reason: 'organization_not_found', param: 'organization_id' });
    expect(calls).toHaveLength(0);
    // Its own organization: the person's role there decides.
    expect(await requireRole(em, scoped, 'org_mine', 'admin')).toBe('owner');
  });

  it('locks the member row only when asked, and counts only live organizations', async () => {
    const { em, calls } = emAnswering('admin');
    await roleOf(em, 'org_a', 'acct_p');
    await roleOf(em, 'org_a', 'acct_p', { lock: true });
    expect(calls[0]!.sql).toMatch(/o\.disabled_at is null$/);
    expect(calls[1]!.sql).toMatch(/for update of m$/);
    for (const c of calls) expect(c.sql).toMatch(/o\.kind = 'organization' and o\.disabled_at is null/);
    expect(await roleOf(emAnswering(null).em, 'org_a', 'acct_p')).toBeNull();
  });
});
