import fs from 'node:fs/promises';
import type { MikroORM } from '@mikro-orm/postgresql';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeUpstream, type FakeUpstream } from '../fakes/openai-upstream.ts';
import { useTestCatalog } from '../support/catalog.ts';
import { makeAccount, makeKey, openTestOrm } from '../support/db.ts';
import { startTestApi } from '../support/http.ts';
import { checkPromql, ensurePromqlCheck } from '../support/promql.ts';

/**
 * docs/grafana/mas.json: every panel's query parses with Prometheus' own PromQL parser, and
 * every series it selects is one the service really exports, as read from the real app's
 * /metrics after a chat that worked and one whose upstream failed (docs/observability.md).
 */
let orm: MikroORM;
let upstream: FakeUpstream;
let api: Awaited<ReturnType<typeof startTestApi>>;
beforeAll(async () => {
  orm = await openTestOrm();
  upstream = await startFakeUpstream();
  api = await startTestApi(orm, { providers: await useTestCatalog(orm, upstream.url) });
});
afterAll(async () => {
  await api.close();
  await upstream.close();
  await orm.close();
});

interface Panel {
  type: string;
  title: string;
  targets?: { expr: string }[];
}

describe('the Grafana dashboard', () => {
  it("parses with Prometheus' parser and names only series the service exports", async () => {
    const dashboard = JSON.parse(await fs.readFile(new URL('../../docs/grafana/mas.json', import.meta.url), 'utf8')) as { panels: Panel[] };
    const exprs = dashboard.panels.flatMap((p) => (p.targets ?? []).map((t) => t.expr));
    expect(exprs.length).toBeGreaterThan(15);
    // Grafana's macro, as Grafana substitutes it.
    const checked = await checkPromql(await ensurePromqlCheck(), exprs.map((e) => e.replaceAll('$__rate_interval', '5m')));
    expect(checked.filter((c) => c.error)).toEqual([]);
    // A parser that accepted anything would fail here.
    expect((await checkPromql(await ensurePromqlCheck(), ['sum by (route) (rate(x[5m])']))[0]!.error).toBeTruthy();

    const account = await makeAccount(orm, { coins: '10' });
    const { key } = await makeKey(orm, account.id);
    for (const model of ['test/ok', 'test/error']) {
      await fetch(`${api.url}/api/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model, messages: [{ role: 'user', content: 'Hello' }], max_tokens: 10 }),
      }).then((r) => r.text());
    }
    const exposition = await (await fetch(`${api.url}/metrics`)).text();
    const types = new Map([...exposition.matchAll(/^# TYPE (\S+) (\S+)$/gm)].map((m) => [m[1]!, m[2]!]));
    const exported = (name: string) => {
      if (types.has(name)) return true;
      const base = name.replace(/_(bucket|sum|count)$/, '');
      return base !== name && (types.get(base) === 'histogram' || types.get(base) === 'summary');
    };
    const names = [...new Set(checked.flatMap((c) => c.metrics))];
    expect(names.length).toBeGreaterThan(15);
    expect(names.filter((n) => !exported(n))).toEqual([]);
  });
});
