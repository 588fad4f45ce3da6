import OpenAI from 'openai';
import type { MikroORM } from '@mikro-orm/postgresql';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { listenForChanges, type ChangeFeed } from '../../adapters/db/change-feed.ts';
import { applyChange } from '../../core/changes.ts';
import { createContext, type CoreDeps } from '../../core/context.ts';
import { hashKey } from '../../core/keys/key-secret.ts';
import { credit } from '../../core/money/wallet.ts';
import { createOrganization } from '../../core/organizations/organizations.ts';
import { createCaller } from '../../core/router.ts';
import { useTestCatalog } from '../support/catalog.ts';
import { makeAccount, openTestOrm, silentLogger, testDatabaseUrl, testDeps, walletInvariants } from '../support/db.ts';
import { bearer, createTestApp, getJson, serve } from '../support/http.ts';
import { startFakeUpstream, type FakeUpstream } from '../fakes/openai-upstream.ts';

/**
 * An organization member's spend limit (issue 49, docs/organizations.md) through real HTTP and
 * the official openai client, against the fake provider: the limit is checked in the same
 * reservation as the organization's balance, so many chats at once through several keys of two
 * members never pass either member's limit nor the wallet; and a member removed while their key
 * is in use (cached on the chat hot path) is refused on the very next request.
 */
let orm: MikroORM;
let upstream: FakeUpstream;
let deps: CoreDeps;
let api: { base: string; close: () => Promise<void> };
let feed: ChangeFeed;

beforeAll(async () => {
  orm = await openTestOrm(20);
  upstream = await startFakeUpstream();
  const providers = await useTestCatalog(orm, upstream.url);
  deps = testDeps(orm, { providers });
  api = await serve(createTestApp({ deps }));
  // The server's caches hear changes as in production (config/service.ts listens on the change feed).
  feed = await listenForChanges(testDatabaseUrl(), silentLogger, (change) => applyChange(deps, change));
});
afterAll(async () => {
  await feed.close();
  await api.close();
  await upstream.close();
  await orm.close();
});

const operator = () => createCaller(createContext(deps, { kind: 'internal' }));
const as = (token: string) => createCaller(createContext(deps, { kind: 'bearer', token }));
const messages = [{ role: 'user' as const, content: 'Say hello' }];

/**
 * An organization whose wallet holds `micro` purchased micro-coins, its owner's management key
 * for it, and these people as plain members (rows as accepting an invitation leaves them).
 */
async function organizationWith(micro: bigint, members: number) {
  const owner = await makeAccount(orm);
  const org = await createOrganization(orm.em.fork(), { personId: owner.id, organizationId: null }, { name: 'Limits team' });
  await credit(orm.em.fork(), { accountId: org.id, kind: 'topup', amount: micro, reference: 'fixture', idempotencyKey: `fixture-topup:${org.id}`, description: 'Top-up' });
  const people = [];
  for (let i = 0; i < members; i++) {
    const person = await makeAccount(orm);
    await orm.em.fork().execute(`insert into organization_members (organization_id, account_id, role) values (?, ?, 'member')`, [org.id, person.id]);
    people.push(person);
  }
  const management = await operator().keys.create({ account: owner.id, organization: org.id, management: true, name: 'provisioning' });
  return { org, owner, people, management };
}
/** A key of the organization's wallet for the member (as `mas key create --organization`). */
const memberKey = (orgId: string, personId: string) => operator().keys.create({ account: personId, organization: orgId, name: 'member key' });

/** What the member's keys of the organization captured, and what their holds still hold. */
async function memberSpend(orgId: string, personId: string) {
  const [row] = await orm.em.fork().execute<{ captured: string; open: string }[]>(
    `select coalesce(sum(h.captured_micro) filter (where h.status = 'settled'), 0)::text as captured,
            coalesce(sum(h.amount_micro) filter (where h.status = 'open'), 0)::text as open
     from api_keys k join holds h on h.metadata->>'key_id' = k.id where k.account_id = ? and k.member_id = ?`,
    [orgId, personId],
  );
  return { captured: BigInt(row!.captured), open: BigInt(row!.open) };
}

/** Every hold of the account was reserved once and ended exactly once, as its ledger entries show. */
async function expectEveryHoldEndedOnce(accountId: string) {
  const rows = await orm.em.fork().execute<{ id: string; status: string; reservations: number; endings: number }[]>(
    `select h.id, h.status,
            count(*) filter (where e.kind = 'reservation' and e.pocket = 'held')::int as reservations,
            count(*) filter (where e.pocket = 'held' and e.kind in ('capture', 'release'))::int as endings
     from holds h left join ledger_entries e on e.hold_id = h.id where h.account_id = ? group by h.id`,
    [accountId],
  );
  expect(rows.length).toBeGreaterThan(0);
  for (const r of rows) {
    expect(r.status, `hold ${r.id}`).not.toBe('open');
    expect(r.reservations, `reservations of hold ${r.id}`).toBe(1);
    // A settle of part of the hold writes a capture and a release of the rest; never two of either.
    expect(r.endings, `endings of hold ${r.id}`).toBeGreaterThanOrEqual(1);
    expect(r.endings, `endings of hold ${r.id}`).toBeLessThanOrEqual(2);
  }
  const [dup] = await orm.em.fork().execute<{ n: number }[]>(
    `select count(*)::int as n from (select hold_id, kind from ledger_entries where account_id = ? and pocket = 'held' and kind in ('capture', 'release') group by hold_id, kind having count(*) > 1) x`,
    [accountId],
  );
  expect(dup!.n, 'holds ended twice').toBe(0);
}

describe("an organization member's spend limit", () => {
  it('200 concurrent chats from two members through their organization keys: neither passes their limit, the organization is never overspent', async () => {
    // Each chat reserves about 50 micro-coins and is charged about 20 (test catalog prices).
    // The wallet (700) is below the two limits together (500 + 300), so both kinds of refusal happen.
    const wallet = 700n;
    const { org, people, management } = await organizationWith(wallet, 2);
    const [a, b] = people as [(typeof people)[0], (typeof people)[0]];
    const admin = as(management.key);
    await admin.organizations.members.update({ id: org.id, user_id: a.id, spend_limit_coins: '0.0005', spend_limit_period: 'monthly' });
    await admin.organizations.members.update({ id: org.id, user_id: b.id, spend_limit_coins: '0.0003', spend_limit_period: 'total' });
    const limits = new Map([
      [a.id, 500n],
      [b.id, 300n],
    ]);
    // Two keys each: the limit is the member's, over all their keys.
    const keys = [await memberKey(org.id, a.id), await memberKey(org.id, a.id), await memberKey(org.id, b.id), await memberKey(org.id, b.id)];
    const clients = keys.map((k) => new OpenAI({ apiKey: k.key, baseURL: `${api.base}/api/v1`, maxRetries: 0 }));

    const results = await Promise.allSettled(Array.from({ length: 200 }, (_, i) => clients[i % clients.length]!.chat.completions.create({ model: 'test/ok', messages, max_tokens: 20 })));
    const ok = results.filter((r) => r.status === 'fulfilled');
    const refused = results.filter((r): r is PromiseRejectedResult => r.status === 'rejected');
    expect(ok.length).toBeGreaterThan(0);
    expect(refused.length).toBeGreaterThan(0);
    const codes = new Set<string>();
    for (const r of refused) {
      expect(r.reason).toBeInstanceOf(OpenAI.APIError);
      const e = r.reason as InstanceType<typeof OpenAI.APIError>;
      expect(e.status).toBe(402);
      codes.add(String(e.code));
    }
    expect([...codes].every((c) => c === 'member_spend_limit_reached' || c === 'insufficient_balance'), [...codes].join(', ')).toBe(true);
    expect(codes).toContain('member_spend_limit_reached');

    await vi.waitFor(async () => expect((await walletInvariants(orm, org.id)).openHolds).toBe(0n), { timeout: 30_000 });
    let spent = 0n;
    for (const person of people) {
      const s = await memberSpend(org.id, person.id);
      expect(s.open).toBe(0n);
      expect(s.captured, `spend of member ${person.id}`).toBeGreaterThan(0n);
      expect(s.captured, `spend of member ${person.id}`).toBeLessThanOrEqual(limits.get(person.id)!);
      spent += s.captured;
    }
    // The organization's wallet: never below zero, the ledger sums to it, and it lost exactly what the members spent.
    const state = await walletInvariants(orm, org.id);
    expect(state.ledgerByPocket).toEqual({ subscription: state.balance.subscription, purchased: state.balance.purchased, held: state.balance.held });
    expect(state.balance.purchased).toBeGreaterThanOrEqual(0n);
    expect(state.balance.held).toBe(0n);
    expect(state.balance.purchased).toBe(wallet - spent);
    await expectEveryHoldEndedOnce(org.id);

    // The members' view agrees with the reservations' sums.
    const listed = await admin.organizations.members.list({ id: org.id });
    for (const person of people) {
      const m = listed.data.find((x) => x.user_id === person.id)!;
      expect(BigInt(Math.round(m.spent_coins * 1e6))).toBe((await memberSpend(org.id, person.id)).captured);
    }
  });

  it('a member removed while their key is in use (a chat streaming, one just finished, the key cached) gets 401 on the very next request', async () => {
    const { org, people, management } = await organizationWith(10_000_000n, 1);
    const person = people[0]!;
    const key = await memberKey(org.id, person.id);
    const client = new OpenAI({ apiKey: key.key, baseURL: `${api.base}/api/v1`, maxRetries: 0 });

    // A chat just finished: the organization is paid, so the hot path now has the key in its cache.
    await client.chat.completions.create({ model: 'test/ok', messages, max_tokens: 20 });
    expect((await deps.keys.findRecent(hashKey(key.key))).fromCache).toBe(true);
    // A chat streaming: its first chunk is here, and the provider sends nothing more.
    const controller = new AbortController();
    const stream = await client.chat.completions.create({ model: 'test/stall', messages, max_tokens: 20, stream: true }, { signal: controller.signal });
    const chunks = stream[Symbol.asyncIterator]();
    expect((await chunks.next()).done).toBe(false);

    const removed = await as(management.key).organizations.members.remove({ id: org.id, user_id: person.id });
    expect(removed).toMatchObject({ deleted: true, keys_revoked: 1 });

    // The very next request, whether or not the revocation notice has reached the cache yet.
    const next = await client.chat.completions.create({ model: 'test/ok', messages, max_tokens: 20 }).then(
      () => null,
      (err: unknown) => err,
    );
    expect(next).toBeInstanceOf(OpenAI.APIError);
    expect((next as InstanceType<typeof OpenAI.APIError>).status).toBe(401);
    expect((await getJson(`${api.base}/api/v1/balance`, { headers: bearer(key.key) })).status).toBe(401);
    // And the notice of the revocation (api_keys_revoked → mas_changes) empties the cache of it.
    await vi.waitFor(async () => expect(await deps.keys.findRecent(hashKey(key.key))).toEqual({ row: null, fromCache: false }), { timeout: 30_000, interval: 20 });

    // The streaming chat ends once (its client gone), charged to the organization, never twice.
    controller.abort();
    await vi.waitFor(async () => expect((await walletInvariants(orm, org.id)).openHolds).toBe(0n), { timeout: 30_000 });
    const state = await walletInvariants(orm, org.id);
    expect(state.ledgerByPocket).toEqual({ subscription: state.balance.subscription, purchased: state.balance.purchased, held: 0n });
    await expectEveryHoldEndedOnce(org.id);
    // Only the two chats before the removal reserved anything.
    const [holds] = await orm.em.fork().execute<{ n: number }[]>('select count(*)::int as n from holds where account_id = ?', [org.id]);
    expect(holds!.n).toBe(2);
  });
});
