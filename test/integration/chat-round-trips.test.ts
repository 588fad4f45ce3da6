import OpenAI from 'openai';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { MikroORM } from '@mikro-orm/postgresql';
import type { CoreDeps } from '../../core/context.ts';
import { useTestCatalog } from '../support/catalog.ts';
import { chargesWritten, makeAccount, makeKey, openTestOrm, testDeps } from '../support/db.ts';
import { createTestApp, serve } from '../support/http.ts';
import { startFakeUpstream, type FakeUpstream } from '../fakes/openai-upstream.ts';

/**
 * The database work of a chat, counted, not timed (issue 47: billing off the hot path): every
 * statement this process sends to PostgreSQL goes through pg's Client#query, the ORM's and the
 * hot path's statement pool alike, and each chat statement is its own transaction. In the
 * request's path a chat makes one, its reservation; its charge, ledger entries and record are
 * one statement written behind the answer (core/chat/charge-writer.ts), shared by the chats
 * that end within USAGE_FLUSH_MS. The ceilings below are today's figures: a change that adds a
 * round trip to a chat fails here.
 */
let orm: MikroORM;
let upstream: FakeUpstream;
let served: Awaited<ReturnType<typeof serve>>;
let deps: CoreDeps;

type Kind = 'reserve' | 'charge' | 'key' | 'last_used' | 'other';
const counts: Record<Kind, number> = { reserve: 0, charge: 0, key: 0, last_used: 0, other: 0 };
const others: string[] = [];
let counting = false;
const original = pg.Client.prototype.query;

function kindOf(sql: string): Kind {
  if (sql.includes('mas_reserve_many')) return 'reserve';
  if (sql.includes('mas_end_hold_many')) return 'charge';
  if (sql.includes('from api_keys') && sql.includes('key_hash')) return 'key';
  if (sql.includes('last_used_at')) return 'last_used';
  return 'other';
}

beforeAll(async () => {
  orm = await openTestOrm();
  upstream = await startFakeUpstream();
  const providers = await useTestCatalog(orm, upstream.url);
  // The catalog as production caches it (testDeps reads it on every call unless told).
  deps = testDeps(orm, { providers, catalogTtlMs: 60_000 });
  served = await serve(createTestApp({ deps }));
  pg.Client.prototype.query = function (this: pg.Client, ...args: unknown[]) {
    if (counting) {
      const first = args[0] as string | { text?: string };
      const sql = typeof first === 'string' ? first : (first?.text ?? '');
      const kind = kindOf(sql);
      counts[kind]++;
      if (kind === 'other') others.push(sql.slice(0, 120));
    }
    return (original as (...a: unknown[]) => unknown).apply(this, args);
  } as typeof pg.Client.prototype.query;
});
afterAll(async () => {
  pg.Client.prototype.query = original;
  await served.close();
  await upstream.close();
  await orm.close();
});

const messages = [{ role: 'user' as const, content: 'Say hello' }];

async function customer() {
  const account = await makeAccount(orm, { coins: '100' });
  const { key } = await makeKey(orm, account.id);
  const client = new OpenAI({ apiKey: key, baseURL: `${served.base}/api/v1`, maxRetries: 0 });
  // The first call looks the key up and learns it; the counted ones come after.
  await client.chat.completions.create({ model: 'test/ok', messages, max_tokens: 20 });
  await chargesWritten();
  return client;
}

/** Runs `chats` chats on `clients` clients at once, each one after another, and counts the statements per chat. */
async function perChat(clients: OpenAI[], chatsEach: number) {
  for (const k of Object.keys(counts) as Kind[]) counts[k] = 0;
  others.length = 0;
  counting = true;
  await Promise.all(
    clients.map(async (client, c) => {
      for (let i = 0; i < chatsEach; i++) {
        const stream = c % 2 === 1;
        if (stream) {
          for await (const chunk of await client.chat.completions.create({ model: 'test/ok', messages, max_tokens: 20, stream: true, stream_options: { include_usage: true } })) void chunk;
        } else {
          await client.chat.completions.create({ model: 'test/ok', messages, max_tokens: 20 });
        }
      }
    }),
  );
  await chargesWritten();
  counting = false;
  const n = clients.length * chatsEach;
  return { reserve: counts.reserve / n, charge: counts.charge / n, key: counts.key, lastUsed: counts.last_used, other: counts.other, others: [...others] };
}

describe('database round trips per chat (each statement its own transaction)', () => {
  it('one at a time: one in the request path (the reservation); the charge, ledger and record in at most one more, behind the answer', async () => {
    const client = await customer();
    const figures = await perChat([client], 40);
    console.log(`c=1: ${JSON.stringify(figures)}`);
    expect(figures.other, figures.others.join('\n')).toBe(0);
    expect(figures.key).toBe(0);
    expect(figures.reserve).toBe(1);
    expect(figures.charge).toBeGreaterThan(0);
    expect(figures.charge).toBeLessThanOrEqual(1);
    // Nothing left behind: every hold ended.
    expect(deps.charges.pending).toBe(0);
  });

  it('32 at a time: concurrent chats share their statements, in and behind the path', async () => {
    const clients = await Promise.all(Array.from({ length: 32 }, () => customer()));
    const figures = await perChat(clients, 4);
    console.log(`c=32: ${JSON.stringify(figures)}`);
    expect(figures.other, figures.others.join('\n')).toBe(0);
    expect(figures.key).toBe(0);
    expect(figures.reserve).toBeLessThanOrEqual(0.5);
    expect(figures.charge).toBeLessThanOrEqual(0.5);
    expect(deps.charges.pending).toBe(0);
  });
});
