import { randomBytes } from 'node:crypto';
import type { MikroORM } from '@mikro-orm/postgresql';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { uniqueEmail } from '../support/db.ts';
import { startAdminApi } from '../support/graphql.ts';

/** The GraphQL admin API's analytics, model catalog changes and admin users, over real HTTP. */
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

describe('analytics', () => {
  it('answers usage, top lists and jobs with numbers and as_of for any admin role', async () => {
    const range = { from: '2001-01-01', to: '2001-01-31' };
    const d = await data(
      viewer,
      `query ($from: String!, $to: String!) {
        usage(from: $from, to: $to, groupBy: [model]) { from to groupBy hasMore asOf totals { spentCoins netCoins requests } data { day modelId measures { spentCoins } } }
        topAccounts(from: $from, to: $to, limit: 5) { data { accountId } asOf }
        topModels(from: $from, to: $to) { data { modelId } }
        jobsByStatus(from: $from, to: $to) { total byStatus { status jobs } failures { code jobs } }
        jobDurations(from: $from, to: $to, status: failed) { status data { modelId runP50Ms } }
      }`,
      range,
    );
    expect(d.usage).toMatchObject({ ...range, groupBy: ['model'], hasMore: false, totals: { spentCoins: 0, netCoins: 0, requests: 0 }, data: [] });
    expect(d.usage.asOf === null || typeof d.usage.asOf === 'string').toBe(true);
    expect(d.topAccounts.data).toEqual([]);
    expect(d.topModels.data).toEqual([]);
    expect(d.jobsByStatus.total).toBe(0);
    expect(d.jobsByStatus.byStatus.map((s: { status: string }) => s.status)).toEqual(['queued', 'running', 'succeeded', 'failed', 'canceled']);
    expect(d.jobDurations).toEqual({ status: 'failed', data: [] });
  });

  it("answers core's refusal of a bad range as BAD_USER_INPUT", async () => {
    const { body } = await gql(viewer, '{ usage(from: "2001-02-01", to: "2001-01-01") { asOf } }');
    expect(body.errors?.[0]?.extensions).toMatchObject({ code: 'BAD_USER_INPUT' });
  });
});

describe('model catalog changes', () => {
  const id = `gql-admin-test/${randomBytes(4).toString('hex')}/image`;
  const entry = {
    id,
    name: 'GraphQL image',
    type: 'image',
    generation_types: ['text-to-image'],
    provider: { name: 'local', model: 'image' },
    settings: { size: { type: 'enum', options: [64, 128], default: 64 } },
    pricing: { base: 10 },
  };
  const create = `mutation ($input: CreateModelInput!) { createModel(input: $input) { id type enabled pricesInForce { effectiveFrom pricing } } }`;

  it('creates a model for an operator, with its audit entry; a viewer is FORBIDDEN', async () => {
    const refused = await gql(viewer, create, { input: { model: entry, enabled: false, reason: 'by a viewer' } });
    expect(refused.body.errors?.[0]?.extensions).toMatchObject({ code: 'FORBIDDEN' });

    const d = await data(operator, create, { input: { model: entry, enabled: false, reason: 'new image model' } });
    expect(d.createModel).toEqual({ id, type: 'image', enabled: false, pricesInForce: { effectiveFrom: null, pricing: { base: 10 } } });
    const rows = await orm.em
      .fork()
      .execute('select action, actor_type, reason from admin_audit_log where target_type = ? and target_id = ? order by id', ['model', id]);
    expect(rows).toEqual([{ action: 'model.create', actor_type: 'admin_token', reason: 'new image model' }]);

    const again = await gql(operator, create, { input: { model: entry } });
    expect(again.body.errors?.[0]?.extensions).toMatchObject({ code: 'CONFLICT' });
  });

  it('sets and cancels scheduled prices, updates, enables and disables', async () => {
    const from = new Date(Date.now() + 7 * 86_400_000).toISOString();
    const set = await data(operator, `mutation ($input: SetModelPricesInput!) { setModelPrices(input: $input) { priceSchedule { effectiveFrom pricing } } }`, {
      input: { id, prices: { base: 12 }, effectiveFrom: from },
    });
    expect(set.setModelPrices.priceSchedule).toEqual([{ effectiveFrom: from, pricing: { base: 12 } }]);
    const canceled = await data(operator, `mutation ($input: CancelModelPricesInput!) { cancelModelPrices(input: $input) { priceSchedule { effectiveFrom } } }`, {
      input: { id, effectiveFrom: from },
    });
    expect(canceled.cancelModelPrices.priceSchedule).toEqual([]);
    const updated = await data(operator, `mutation ($input: UpdateModelInput!) { updateModel(input: $input) { name } }`, { input: { id, changes: { name: 'Renamed' } } });
    expect(updated.updateModel.name).toBe('Renamed');
    expect((await data(operator, `mutation { enableModel(input: { id: "${id}" }) { enabled } }`)).enableModel.enabled).toBe(true);
    expect((await data(operator, `mutation { disableModel(input: { id: "${id}", reason: "done" }) { enabled } }`)).disableModel.enabled).toBe(false);
    const refused = await gql(viewer, `mutation { enableModel(input: { id: "${id}" }) { enabled } }`);
    expect(refused.body.errors?.[0]?.extensions).toMatchObject({ code: 'FORBIDDEN' });
  });
});

describe('admin users', () => {
  it('creates an admin user for an operator, with the one-time token once; lists them; a viewer is FORBIDDEN', async () => {
    const email = uniqueEmail();
    const create = `mutation ($input: CreateAdminUserInput!) { createAdminUser(input: $input) { user { id email role passwordSet } loginToken loginExpiresAt } }`;
    const refused = await gql(viewer, create, { input: { email, role: 'viewer' } });
    expect(refused.body.errors?.[0]?.extensions).toMatchObject({ code: 'FORBIDDEN' });

    const d = await data(operator, create, { input: { email, role: 'viewer' } });
    expect(d.createAdminUser.user).toMatchObject({ email, role: 'viewer', passwordSet: false });
    expect(d.createAdminUser.user.id).toMatch(/^adu_/);
    expect(d.createAdminUser.loginToken).toMatch(/^mas_alink_/);
    expect(Date.parse(d.createAdminUser.loginExpiresAt)).toBeGreaterThan(Date.now());

    const listed = await data(viewer, '{ adminUsers { id email role } }');
    expect(listed.adminUsers).toContainEqual({ id: d.createAdminUser.user.id, email, role: 'viewer' });
    expect(JSON.stringify(listed)).not.toContain(d.createAdminUser.loginToken);

    const [audit] = await orm.em.fork().execute('select action from admin_audit_log where target_id = ?', [d.createAdminUser.user.id]);
    expect(audit).toEqual({ action: 'admin_user.create' });
  });
});
