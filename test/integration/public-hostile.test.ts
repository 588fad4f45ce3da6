import type { MikroORM } from '@mikro-orm/postgresql';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openTestOrm, testDeps } from '../support/db.ts';
import { createTestApp, serve } from '../support/http.ts';

/** The new public and account entry points of issue 34, as a hostile client tries them: a 4xx, never a 500. */
let orm: MikroORM;
let served: Awaited<ReturnType<typeof serve>>;
beforeAll(async () => {
  orm = await openTestOrm();
  served = await serve(createTestApp({ deps: testDeps(orm) }));
});
afterAll(async () => {
  await served?.close();
  await orm?.close();
});

describe('hostile requests to the new pages', () => {
  it('long, odd and traversing paths and queries never answer a 500, and no unknown model or doc is found', async () => {
    const long = 'a'.repeat(8000);
    const paths = [
      `/models/${long}`,
      `/models/${encodeURIComponent('../../package.json')}`,
      '/models/%00',
      `/docs/${long}`,
      '/docs/..%2F..%2Fpackage.json',
      `/account/usage?from=${long}&to=x`,
      `/account/usage.csv?model=${long}`,
      `/account/generations/${long}`,
      `/signup/verify?token=${long}`,
      `/password/reset?token=${long}`,
      `/admin/jobs?account=${long}&status=nope&since=garbage`,
      `/admin/models/${long}`,
    ];
    for (const path of paths) {
      const res = await fetch(`${served.base}${path}`, { headers: { accept: 'text/html' }, redirect: 'manual' });
      // A link's page may show its form (200: only its POST redeems); nothing may be a 500.
      expect(res.status, path).toBeLessThan(500);
      if (path.startsWith('/models/') || path.startsWith('/docs/')) expect(res.status, path).toBe(404);
    }
    const key = await fetch(`${served.base}/api/v1/key`, { headers: { authorization: `Bearer ${long}` } });
    expect(key.status).toBe(401);
  });
});
