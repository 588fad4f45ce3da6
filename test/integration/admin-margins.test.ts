import { startTestWorker } from '../support/jobs.ts';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import type { MikroORM } from '@mikro-orm/postgresql';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, inject, it, vi } from 'vitest';
import { readableDay } from '../../adapters/web/admin/shared.ts';
import { temporalGenerationStarter } from '../../config/temporal.ts';
import { addDays } from '../../core/admin/analytics/days.ts';
import { marginsSchema, percent } from '../../core/admin/analytics/margins.ts';
import { refreshAnalytics } from '../../core/admin/analytics/refresh.ts';
import { countChatTokens } from '../../core/chat/tokens.ts';
import { createContext, type CoreDeps } from '../../core/context.ts';
import { formatCoins } from '../../core/money/coins.ts';
import { openOrm } from '../../core/orm.ts';
import { createCaller } from '../../core/router.ts';
import type { RunningWorker } from '../../workflows/worker.ts';
import { startFakeUpstream, type FakeUpstream } from '../fakes/openai-upstream.ts';
import { useTestCatalog } from '../support/catalog.ts';
import { CookieBrowser, csrfOf } from '../support/cookie-browser.ts';
import { makeAccount, makeKey, migratedFreshDatabase, silentLogger, testDeps, uniqueEmail } from '../support/db.ts';
import { bearer, createTestApp, getJson, serve } from '../support/http.ts';
import { refusal } from '../support/refusal.ts';

/**
 * Upstream cost and margin (docs/admin.md, "Margin"), on a database of its own (the refresh
 * reads every record): chats through the service against the fake OpenAI upstream and an image
 * job through Temporal with the local provider, then the route rollup, the core query, the
 * GraphQL `margins` query, LedgerEntry.route and the Margin page, each with exact figures.
 *
 * The chat and job paths write the route and upstream-cost columns themselves (checked once
 * below); the rows are then set with SQL to the mix these reads must handle: a known cost, an
 * unknown one, a second route, and a row from before routes existed (no route).
 */
let db: { url: string; drop: () => Promise<void> };
let orm: MikroORM;
let deps: CoreDeps;
let upstream: FakeUpstream;
let served: Awaited<ReturnType<typeof serve>>;
let connection: Connection;
let worker: RunningWorker;
let storageDir: string;
let today: string;
let pastDay: string;
let viewerToken: string;

const messages = [{ role: 'user' as const, content: 'Say hello' }];
/** A test/ok chat's charge: the test catalog's API prices are 1 micro-coin per input token, 2 per output token, and the fake answers 5 tokens. */
const chatCharge = BigInt(countChatTokens(messages)) + 2n * 5n;
const IMAGE_CHARGE = 5_000_000n; // test/image: 10 coins in the app, the API at 50 %.
const IMAGE_UPSTREAM = 3_250_000n;
const CHAT_UPSTREAM = 7n;
const PAST_UPSTREAM = 2n;

const ids = { account: '', key: '', routed: '', preRoutes: '', unknownCost: '', past: '', job: '' };
const internal = () => createCaller(createContext(deps, { kind: 'internal' }));
const viewer = () => createCaller(createContext(deps, { kind: 'admin', token: viewerToken }));
const coins = (micro: bigint) => Number(formatCoins(micro));

async function chat(client: OpenAI): Promise<string> {
  const completion = await client.chat.completions.create({ model: 'test/ok', messages, max_tokens: 50 });
  return completion.id;
}

/** The record is written after the answer (batched): wait for it. */
async function recorded(id: string) {
  await vi.waitFor(async () => expect(await orm.em.fork().execute('select 1 from completion_records where id = ?', [id])).toHaveLength(1), { timeout: 5000, interval: 20 });
}

/** Sets a row's route and upstream cost (see the file's comment). */
async function served_by(table: 'completion_records' | 'generations', id: string, provider: string | null, model: string | null, upstreamMicro: bigint | null) {
  await orm.em.fork().execute(`update ${table} set provider = ?, route_model = ?, upstream_cost_micro = ?::bigint where id = ?`, [provider, model, upstreamMicro === null ? null : upstreamMicro.toString(), id]);
}

async function gql(query: string, variables: Record<string, unknown>) {
  const res = await fetch(`${served.base}/admin/graphql`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${viewerToken}` },
    body: JSON.stringify({ query, variables }),
  });
  const body = (await res.json()) as { data?: any; errors?: unknown[] };
  expect(body.errors, JSON.stringify(body.errors)).toBeUndefined();
  return body.data;
}

const routeRows = () => orm.em.fork().execute('select day::text, model_id, provider, route_model, requests, revenue_micro::text, costed_requests, costed_revenue_micro::text, upstream_cost_micro::text from route_daily order by 1, 2, 3, 4');

beforeAll(async () => {
  db = await migratedFreshDatabase();
  orm = await openOrm({ url: db.url });
  upstream = await startFakeUpstream();
  const providers = await useTestCatalog(orm, upstream.url);
  storageDir = await fs.mkdtemp(path.join(os.tmpdir(), 'mas-margins-'));
  connection = await Connection.connect({ address: inject('temporalAddress') });
  const taskQueue = `test-margins-${randomBytes(4).toString('hex')}`;
  deps = testDeps(orm, { providers, storageDir, generations: temporalGenerationStarter(new Client({ connection }), { taskQueue }) });
  worker = await startTestWorker({ deps, taskQueue });
  served = await serve(createTestApp({ deps, logger: silentLogger }));
  viewerToken = (await internal().admins.createToken({ name: 'margins', role: 'viewer' })).token;

  const [now] = await orm.em.fork().execute<{ today: string }[]>(`select (now() at time zone 'UTC')::date::text as today`);
  today = now!.today;
  pastDay = addDays(today, -5);

  const account = await makeAccount(orm, { coins: '50' });
  const { key, id: keyId } = await makeKey(orm, account.id);
  Object.assign(ids, { account: account.id, key: keyId });
  const client = new OpenAI({ apiKey: key, baseURL: `${served.base}/api/v1`, maxRetries: 0 });

  // Four chats through the service; then, as the routed chat path will write them: served by
  // fake/ok with a known cost, by the model's provider before routes (nulls), by fake/ok with no
  // cost known, and one moved to a past day, served by a second route.
  for (const name of ['routed', 'preRoutes', 'unknownCost', 'past'] as const) ids[name] = await chat(client);
  for (const name of ['routed', 'preRoutes', 'unknownCost', 'past'] as const) await recorded(ids[name]);
  // The chat path itself records the route that served (the test catalog's one provider, no catalog cost).
  const [written] = await orm.em.fork().execute('select provider, route_model, upstream_cost_micro from completion_records where id = ?', [ids.routed]);
  expect(written).toEqual({ provider: 'fake', route_model: 'ok', upstream_cost_micro: null });
  // A record from before routes existed has no route.
  await served_by('completion_records', ids.preRoutes, null, null, null);
  await served_by('completion_records', ids.routed, 'fake', 'ok', CHAT_UPSTREAM);
  await served_by('completion_records', ids.unknownCost, 'fake', 'ok', null);
  await served_by('completion_records', ids.past, 'backup', 'ok-too', PAST_UPSTREAM);
  await orm.em.fork().execute(`update completion_records set created_at = ?::timestamptz where id = ?`, [`${pastDay}T08:00:00Z`, ids.past]);

  // An image job through Temporal with the local provider, then its route and cost.
  const job = await getJson(`${served.base}/api/v1/generations`, {
    method: 'POST',
    headers: { ...bearer(key), 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'test/image', prompt: 'a lighthouse' }),
  });
  expect(job.status, JSON.stringify(job.body)).toBe(202);
  ids.job = job.body.id;
  await vi.waitFor(async () => expect((await getJson(`${served.base}/api/v1/generations/${ids.job}`, { headers: bearer(key) })).body.status).toBe('succeeded'), {
    timeout: 20_000,
    interval: 100,
  });
  await served_by('generations', ids.job, 'local', 'image', IMAGE_UPSTREAM);
});

afterAll(async () => {
  await worker?.shutdown();
  await connection?.close();
  await served?.close();
  await upstream?.close();
  await orm?.close();
  await db?.drop();
  if (storageDir) await fs.rm(storageDir, { recursive: true, force: true });
});

describe('the route rollup', () => {
  it('the charges are what the requests paid (the model price, whichever route)', async () => {
    const rows = await orm.em.fork().execute<{ id: string; cost_micro: string }[]>(
      `select id, cost_micro::text from completion_records union all select id, cost_micro::text from generations order by 1`,
    );
    expect(Object.fromEntries(rows.map((r) => [r.id, BigInt(r.cost_micro)]))).toEqual({
      [ids.routed]: chatCharge,
      [ids.preRoutes]: chatCharge,
      [ids.unknownCost]: chatCharge,
      [ids.past]: chatCharge,
      [ids.job]: IMAGE_CHARGE,
    });
  });

  it('the first refresh builds every day; a day mixes known and unknown costs; null routes are the model provider of before', async () => {
    const done = await refreshAnalytics(orm.em.fork());
    expect(done.route_days).toBe(3); // the past day, yesterday and today
    const c = chatCharge.toString();
    expect(await routeRows()).toEqual([
      { day: pastDay, model_id: 'test/ok', provider: 'backup', route_model: 'ok-too', requests: 1, revenue_micro: c, costed_requests: 1, costed_revenue_micro: c, upstream_cost_micro: '2' },
      { day: today, model_id: 'test/image', provider: 'local', route_model: 'image', requests: 1, revenue_micro: '5000000', costed_requests: 1, costed_revenue_micro: '5000000', upstream_cost_micro: '3250000' },
      { day: today, model_id: 'test/ok', provider: '', route_model: '', requests: 1, revenue_micro: c, costed_requests: 0, costed_revenue_micro: '0', upstream_cost_micro: '0' },
      { day: today, model_id: 'test/ok', provider: 'fake', route_model: 'ok', requests: 2, revenue_micro: (2n * chatCharge).toString(), costed_requests: 1, costed_revenue_micro: c, upstream_cost_micro: '7' },
    ]);
  });

  it('is idempotent: a second run rebuilds yesterday and today to the same rows', async () => {
    const before = await routeRows();
    const again = await refreshAnalytics(orm.em.fork());
    expect(again.route_days).toBe(2);
    expect(await routeRows()).toEqual(before);
  });
});

describe('margins (core)', () => {
  it('per day: revenue of all, margin over the costed requests only', async () => {
    const m = marginsSchema.parse(await viewer().admin.analytics.margins({ from: pastDay, to: today, group_by: ['day'] }));
    const todayRevenue = 3n * chatCharge + IMAGE_CHARGE;
    const todayCosted = chatCharge + IMAGE_CHARGE;
    const todayUpstream = CHAT_UPSTREAM + IMAGE_UPSTREAM;
    expect(m.data).toEqual([
      {
        day: pastDay, model_id: null, provider: null, route_model: null,
        requests: 1, revenue_coins: coins(chatCharge), costed_requests: 1, costed_revenue_coins: coins(chatCharge), upstream_cost_coins: coins(PAST_UPSTREAM),
        margin_coins: coins(chatCharge - PAST_UPSTREAM), margin_percent: percent(chatCharge - PAST_UPSTREAM, chatCharge), cost_known_percent: '100.0',
      },
      {
        day: today, model_id: null, provider: null, route_model: null,
        requests: 4, revenue_coins: coins(todayRevenue), costed_requests: 2, costed_revenue_coins: coins(todayCosted), upstream_cost_coins: coins(todayUpstream),
        margin_coins: coins(todayCosted - todayUpstream), margin_percent: percent(todayCosted - todayUpstream, todayCosted), cost_known_percent: '50.0',
      },
    ]);
    expect(m.totals).toMatchObject({ requests: 5, costed_requests: 3, revenue_coins: coins(todayRevenue + chatCharge), upstream_cost_coins: coins(todayUpstream + PAST_UPSTREAM) });
    expect(m.as_of).not.toBeNull();
  });

  it('per model and route, filtered by provider; a route that served nothing has no rows and no margin', async () => {
    const routes = marginsSchema.parse(await viewer().admin.analytics.margins({ from: pastDay, to: today, group_by: ['model', 'route'] }));
    expect(routes.data.map((r) => [r.model_id, r.provider, r.route_model, r.requests, r.margin_coins, r.margin_percent])).toEqual([
      ['test/image', 'local', 'image', 1, 1.75, '35.0'],
      ['test/ok', 'fake', 'ok', 2, coins(chatCharge - CHAT_UPSTREAM), percent(chatCharge - CHAT_UPSTREAM, chatCharge)],
      ['test/ok', '', '', 1, 0, null],
      ['test/ok', 'backup', 'ok-too', 1, coins(chatCharge - PAST_UPSTREAM), percent(chatCharge - PAST_UPSTREAM, chatCharge)],
    ]);
    const backupToday = marginsSchema.parse(await viewer().admin.analytics.margins({ from: today, to: today, provider: 'backup' }));
    expect(backupToday.data).toEqual([]);
    expect(backupToday.totals).toEqual({
      requests: 0, revenue_coins: 0, costed_requests: 0, costed_revenue_coins: 0, upstream_cost_coins: 0, margin_coins: 0, margin_percent: null, cost_known_percent: null,
    });
    const beforeRoutes = marginsSchema.parse(await viewer().admin.analytics.margins({ from: today, to: today, provider: '', group_by: [] }));
    expect(beforeRoutes.data).toEqual([expect.objectContaining({ requests: 1, costed_requests: 0, cost_known_percent: '0.0', margin_percent: null })]);
  });

  it('percent rounds half away from zero in integers', () => {
    expect([percent(1n, 3n), percent(2n, 3n), percent(-1n, 3n), percent(1n, 2000n), percent(-1n, 3000n), percent(5n, 0n)]).toEqual(['33.3', '66.7', '-33.3', '0.1', '0.0', null]);
  });

  it('checks its range and needs an admin', async () => {
    expect(await refusal(viewer().admin.analytics.margins({ from: today, to: pastDay }))).toMatchObject({ code: 'invalid_request', param: 'to' });
    expect(await refusal(createCaller(createContext(deps, { kind: 'none' })).admin.analytics.margins({ from: today, to: today }))).toMatchObject({ code: 'unauthorized' });
  });
});

describe('GraphQL admin', () => {
  it('margins: the same figures', async () => {
    const data = await gql(
      `query($from: String!, $to: String!) { margins(from: $from, to: $to, modelId: "test/image") {
        groupBy data { day modelId provider routeModel measures { requests revenueCoins costedRequests upstreamCostCoins marginCoins marginPercent costKnownPercent } } } }`,
      { from: pastDay, to: today },
    );
    expect(data.margins).toEqual({
      groupBy: ['day', 'model', 'route'],
      data: [
        {
          day: today, modelId: 'test/image', provider: 'local', routeModel: 'image',
          measures: { requests: 1, revenueCoins: 5, costedRequests: 1, upstreamCostCoins: 3.25, marginCoins: 1.75, marginPercent: '35.0', costKnownPercent: '100.0' },
        },
      ],
    });
  });

  it('LedgerEntry.route: the route of the chat or job, null for a top-up and a request from before routes; one query per page', async () => {
    const q = `query($account: ID!, $n: Int) { ledgerEntries(account: $account, first: $n) { edges { node { kind reference route { provider model } } } } }`;
    const { ledgerEntries } = await gql(q, { account: ids.account, n: 100 });
    const routeOf = new Map<string, unknown>();
    for (const { node } of ledgerEntries.edges as { node: { kind: string; reference: string; route: unknown } }[]) {
      if (node.kind === 'capture') routeOf.set(node.reference, node.route);
      if (node.kind === 'topup' || node.kind === 'adjustment') expect(node.route).toBeNull();
    }
    expect(Object.fromEntries(routeOf)).toEqual({
      [ids.routed]: { provider: 'fake', model: 'ok' },
      [ids.unknownCost]: { provider: 'fake', model: 'ok' },
      [ids.past]: { provider: 'backup', model: 'ok-too' },
      [ids.preRoutes]: null,
      [ids.job]: { provider: 'local', model: 'image' },
    });

    let queries = 0;
    const onQuery = orm.config.get('onQuery');
    orm.config.set('onQuery', (sql: string, params: unknown[]) => {
      queries++;
      return onQuery(sql, params);
    });
    try {
      const counted = async (n: number, withRoute: boolean) => {
        queries = 0;
        await gql(withRoute ? q : q.replace(' route { provider model }', ''), { account: ids.account, n });
        return queries;
      };
      const total = ledgerEntries.edges.length as number;
      expect(total).toBeGreaterThan(8);
      const plain = await counted(total, false);
      const two = await counted(2, true);
      const all = await counted(total, true);
      // The route of a whole page is one core call: its admin-token check and its one query.
      expect(all).toBe(two);
      expect(all - plain).toBeLessThanOrEqual(2);
      console.info(`admin-margins: a ledger page of ${total} entries = ${plain} SQL queries, ${all} with route (2 entries with route: ${two})`);
    } finally {
      orm.config.set('onQuery', onQuery);
    }
  });
});

describe('the Margin page', () => {
  it('shows revenue, upstream cost and margin per day and per model and route, exact', async () => {
    const created = await internal().admin.users.create({ email: uniqueEmail('admin'), role: 'viewer' });
    const browser = new CookieBrowser(served.base);
    const linkPage = await (await browser.fetch(`/admin/login/link?token=${encodeURIComponent(created.login_token!)}`)).text();
    const signedIn = await browser.post('/admin/login/link', { _csrf: csrfOf(linkPage)!, token: created.login_token!, new_password: 'a long admin passphrase 2026' });
    expect(signedIn.status).toBe(303);

    const res = await browser.fetch(`/admin/margin?from=${pastDay}&to=${today}`);
    expect(res.status).toBe(200);
    // Each cell carries its column's heading (data-label) for the phone's cards: left out here.
    const page = (await res.text()).replace(/ data-label="[^"]*"/g, '');
    expect(page).toContain('<tr><td>test/image</td><td>local/image</td><td>1</td><td>5</td><td>1 (100.0%)</td><td>3.25</td><td>1.75</td><td>35.0%</td></tr>');
    // Today mixes costed and uncosted chats: the margin is over the 2 costed requests of 4.
    const todayCosted = chatCharge + IMAGE_CHARGE;
    const todayUpstream = CHAT_UPSTREAM + IMAGE_UPSTREAM;
    expect(page).toContain(
      `<tr><td><time datetime="${today}">${readableDay(today)}</time></td><td>4</td><td>${formatCoins(3n * chatCharge + IMAGE_CHARGE)}</td><td>2 (50.0%)</td><td>${formatCoins(todayUpstream)}</td><td>${formatCoins(todayCosted - todayUpstream)}</td><td>${percent(todayCosted - todayUpstream, todayCosted)}%</td></tr>`,
    );
    // The requests from before routes: no cost, so no margin, rather than a margin of 100 %.
    expect(page).toMatch(/<tr><td>test\/ok<\/td><td><em>the model provider of the time \(before routes were recorded\)<\/em><\/td><td>1<\/td><td>[\d.]+<\/td><td>0 \(0\.0%\)<\/td><td>—<\/td><td>—<\/td><td>—<\/td><\/tr>/);
    expect(page).toContain('aria-current="page"');

    const bad = await browser.fetch(`/admin/margin?from=${today}&to=${pastDay}`);
    expect(bad.status).toBe(400);
    expect(await bad.text()).toContain('must not be before');
  });
});
