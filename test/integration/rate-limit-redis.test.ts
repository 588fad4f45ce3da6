import { afterAll, beforeAll, describe, expect, it } from 'vitest';
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
