import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type { MikroORM } from '@mikro-orm/postgresql';
import { createTestApp } from '../support/http.ts';
import { createLimiters, type Limiters } from '../../adapters/limits/rate-limiter.ts';
import { makeAccount, makeKey, openTestOrm, silentLogger, testDeps } from '../support/db.ts';
import { bearer } from '../support/http.ts';
import { startRedis, type RunningRedis } from '../support/tools.ts';
import type { Server } from 'node:http';

/**
 * With REDIS_URL the per-key limit holds across instances: a real Redis (Debian's, found or
 * fetched by the global setup: test/support/tools.ts).
 */

let orm: MikroORM;
let redis: RunningRedis | undefined;
let redisUrl: string;
const servers: Server[] = [];
const limiters: Limiters[] = [];

beforeAll(async () => {
  orm = await openTestOrm();
  redis = await startRedis();
  redisUrl = redis.url;
});
afterAll(async () => {
  for (const s of servers) await new Promise((r) => s.close(r));
  for (const l of limiters) await l.close();
  redis?.stop();
  await orm.close();
});

async function instance(): Promise<string> {
  const store = createLimiters({ redisUrl });
  limiters.push(store);
  const deps = { ...testDeps(orm), rateLimiter: store.window({ points: 10, durationSeconds: 60, prefix: 'mas:rl' }) };
  const app = createTestApp({ deps, logger: silentLogger, publicBaseUrl: 'http://localhost' });
  const server = await new Promise<Server>((resolve) => {
    const s = app.listen(0, '127.0.0.1', () => resolve(s));
  });
  servers.push(server);
  return `http://127.0.0.1:${(server.address() as { port: number }).port}`;
}

describe('rate limit shared through Redis', () => {
  it('counts one key across two instances', async () => {
    const [a, b] = [await instance(), await instance()];
    const account = await makeAccount(orm);
    const { key } = await makeKey(orm, account.id);
    const statuses: number[] = [];
    for (let i = 0; i < 11; i++) {
      const res = await fetch(`${i % 2 ? a : b}/api/v1/balance`, { headers: bearer(key) });
      await res.arrayBuffer();
      statuses.push(res.status);
    }
    expect(statuses.slice(0, 10)).toEqual(Array(10).fill(200));
    expect(statuses[10]).toBe(429);
  });
});

describe('failure counters shared through Redis', () => {
  it('count and block a key across two instances, each prefix apart from the others, counts apart from blocks', async () => {
    const [a, b] = [createLimiters({ redisUrl }), createLimiters({ redisUrl })];
    limiters.push(a, b);
    const key = `k${Date.now()}`;
    const pairA = a.failures({ prefix: 'test:pair', forgetSeconds: 60 });
    const pairB = b.failures({ prefix: 'test:pair', forgetSeconds: 60 });
    const ipB = b.failures({ prefix: 'test:ip', forgetSeconds: 60 });
    // Until a client's connection is ready each instance counts in its own memory (the insurance
    // limiter): wait until a block made through one is seen through the other.
    await vi.waitFor(
      async () => {
        await pairA.block(`${key}:ready`, 60);
        expect(await pairB.blockedFor(`${key}:ready`)).toBeGreaterThan(0);
      },
      { timeout: 10_000, interval: 20 },
    );
    expect(await pairA.fail(key)).toBe(1);
    expect(await pairB.fail(key)).toBe(2);
    // Another prefix, the same key: a count of its own.
    expect(await ipB.fail(key)).toBe(1);
    expect(await pairB.blockedFor(key)).toBe(0);
    await pairA.block(key, 120);
    expect(await pairB.blockedFor(key)).toBeGreaterThan(110);
    expect(await ipB.blockedFor(key)).toBe(0);
    // The block is not a failure, and the failures are not a block.
    expect(await pairA.fail(key)).toBe(3);
    await ipB.block(key, 60);
    expect(await pairA.blockedFor(key)).toBeGreaterThan(110);
    await pairB.reset(key);
    expect(await pairA.blockedFor(key)).toBe(0);
    expect(await pairA.fail(key)).toBe(1);
    expect(await ipB.blockedFor(key)).toBeGreaterThan(50);
    expect(await ipB.fail(key)).toBe(2);
  });
});

