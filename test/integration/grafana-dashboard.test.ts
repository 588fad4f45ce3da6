import fs from 'node:fs/promises';
import type { MikroORM } from '@mikro-orm/postgresql';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { setTracing } from '../../core/telemetry.ts';
import { startFakeUpstream, type FakeUpstream } from '../fakes/openai-upstream.ts';
import { useTestCatalog } from '../support/catalog.ts';
import { makeAccount, makeKey, openTestOrm } from '../support/db.ts';
import { startTestApi } from '../support/http.ts';
import { startPrometheus, type QueryAnswer, type RunningPrometheus } from '../support/prometheus.ts';
import { checkPromql, ensurePromqlCheck } from '../support/promql.ts';

/**
 * docs/grafana/mas.json, two ways (docs/observability.md, "The dashboard"):
 *  1. every panel's query parses with Prometheus' own PromQL parser, and every series it
 *     selects is one the service really exports, as read from the real app's /metrics;
 *  2. a real Prometheus (Debian's package, test/support/prometheus.ts) scrapes that app every
 *     second, and every panel's query, evaluated by it, succeeds with no warning; those over
 *     series the traffic below certainly produced answer something, grouped by labels that exist.
 * The traffic: a chat that works, a streamed one (time to first token), one whose upstream
 * fails (upstream errors, 5xx) and one for a model that does not exist (4xx).
 *
 * The parser stays beside the server: it names the series a query selects (Prometheus 2.42's
 * API cannot), so a query over a series the service never exports fails here even while its
 * panel would only be empty. The server finds what a parser cannot: evaluation errors (vector
 * matching, types) and panels that come out empty or grouped by a label no series has.
 *
 * Prometheus is Debian's, found or fetched once per machine by the global setup
 * (test/support/tools.ts).
 */

let orm: MikroORM;
let upstream: FakeUpstream;
let api: Awaited<ReturnType<typeof startTestApi>>;
let prometheus: RunningPrometheus | undefined;
/** When the traffic below ended. */
let trafficEnded: Date;

beforeAll(async () => {
  // The time-to-first-token and token series are kept with tracing on only (no exporter needed).
  setTracing({ on: true });
  orm = await openTestOrm();
  upstream = await startFakeUpstream();
  api = await startTestApi(orm, { providers: await useTestCatalog(orm, upstream.url) });
  prometheus = await startPrometheus({ target: `${api.url}/metrics` });

  const account = await makeAccount(orm, { coins: '10' });
  const { key } = await makeKey(orm, account.id);
  const chat = (model: string, stream = false) =>
    fetch(`${api.url}/api/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model, messages: [{ role: 'user', content: 'Hello' }], max_tokens: 10, stream }),
    }).then(async (r) => (await r.text(), r.status));
  expect(await chat('test/ok')).toBe(200);
  expect(await chat('test/ok', true)).toBe(200);
  expect(await chat('test/error')).toBeGreaterThanOrEqual(500);
  const missing = await chat('test/no-such-model');
  expect(missing).toBeGreaterThanOrEqual(400);
  expect(missing).toBeLessThan(500);
  trafficEnded = new Date();
});
afterAll(async () => {
  await prometheus?.stop();
  await api?.close();
  await upstream?.close();
  await orm?.close();
  setTracing({ on: false });
});

interface Panel {
  type: string;
  title: string;
  targets?: { expr: string }[];
}

async function dashboardTargets(): Promise<{ title: string; expr: string }[]> {
  const dashboard = JSON.parse(await fs.readFile(new URL('../../docs/grafana/mas.json', import.meta.url), 'utf8')) as { panels: Panel[] };
  return dashboard.panels.flatMap((p) => (p.targets ?? []).map((t) => ({ title: p.title, expr: t.expr })));
}

/** Grafana's macros, as Grafana substitutes them for a one-hour dashboard range. */
const MACROS: Record<string, string> = { $__rate_interval: '1m', $__interval: '15s', $__range: '1h' };
function substitute(expr: string): string {
  // Longest first: $__rate_interval before $__range.
  const names = Object.keys(MACROS).sort((a, b) => b.length - a.length);
  return names.reduce((e, name) => e.replaceAll(name, MACROS[name]!), expr);
}

describe('the Grafana dashboard', () => {
  it("parses with Prometheus' parser and names only series the service exports", async () => {
    const exprs = (await dashboardTargets()).map((t) => substitute(t.expr));
    expect(exprs.length).toBeGreaterThan(15);
    const checked = await checkPromql(await ensurePromqlCheck(), exprs);
    expect(checked.filter((c) => c.error)).toEqual([]);
    // A parser that accepted anything would fail here.
    expect((await checkPromql(await ensurePromqlCheck(), ['sum by (route) (rate(x[5m])']))[0]!.error).toBeTruthy();

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

  /**
   * The panels allowed to be empty after this file's traffic, each with why: no media job ran,
   * no request moved on to a fallback route or skipped an open one. Every other panel's query
   * must answer at least one series.
   */
  const MAY_BE_EMPTY: Record<string, string> = {
    mas_route_fallbacks_total: 'no request fell back to a second route',
    mas_route_skipped_total: 'no route was open',
    mas_job_queue_time_seconds_bucket: 'no media job ran',
    mas_job_run_time_seconds_bucket: 'no media job ran',
    mas_job_run_time_seconds_count: 'no media job ran',
  };

  /**
   * What is wrong with one query's answer: an error, a warning, no series when some were due,
   * or a `by (...)` label (other than `le`) that no series of the answer has — Prometheus drops
   * a label no input series carries, so a misspelt one shows as a panel with one unnamed line.
   */
  function problems(expr: string, answer: QueryAnswer, mustAnswer: boolean): string[] {
    const found: string[] = [];
    if (answer.status !== 'success') found.push(`${answer.errorType ?? 'error'}: ${answer.error ?? '(no message)'}`);
    if (answer.warnings?.length) found.push(`warnings: ${answer.warnings.join('; ')}`);
    const result = Array.isArray(answer.data?.result) && answer.data.resultType === 'vector' ? (answer.data.result as { metric: Record<string, string> }[]) : [];
    if (answer.status === 'success' && answer.data?.resultType !== 'vector') found.push(`a ${answer.data?.resultType} where a panel wants an instant vector`);
    if (mustAnswer && answer.status === 'success' && result.length === 0) found.push('no series');
    if (result.length > 0) {
      const grouped = [...expr.matchAll(/\bby\s*\(([^)]*)\)/g)].flatMap((m) => m[1]!.split(',').map((l) => l.trim())).filter((l) => l && l !== 'le');
      for (const label of new Set(grouped)) if (!result.some((s) => label in s.metric)) found.push(`no series has the label "${label}" it is grouped by`);
    }
    return found;
  }

  describe('against a real Prometheus', () => {
    it('evaluates every panel query without error or warning, and those over series the traffic made are not empty', async () => {
      const server = prometheus!;
      // Two scrapes that began after the traffic: every counter it moved has two samples since.
      const at = await server.waitForScrapes(2, trafficEnded);

      const targets = await dashboardTargets();
      const report: { title: string; expr: string; problems: string[] }[] = [];
      for (const { title, expr: raw } of targets) {
        const expr = substitute(raw);
        expect(expr, `a Grafana macro this test does not substitute in "${title}"`).not.toMatch(/\$/);
        const mayBeEmpty = Object.keys(MAY_BE_EMPTY).some((name) => new RegExp(`\\b${name}\\b`).test(expr));
        const found = problems(expr, await server.query(expr, at), !mayBeEmpty);
        if (found.length > 0) report.push({ title, expr, problems: found });
      }
      expect(report).toEqual([]);

      // The series the brief names as certainly produced are among those checked non-empty.
      const all = targets.map((t) => t.expr).join('\n');
      for (const name of ['http_requests_total', 'http_request_duration_seconds_bucket', 'mas_upstream_errors_total', 'gen_ai_client_operation_duration_seconds_bucket', 'mas_holds_open', 'mas_spent_coins_total']) {
        expect(all).toContain(name);
        expect(Object.keys(MAY_BE_EMPTY)).not.toContain(name);
      }

      // The same judge, on queries that are wrong in the ways a parser cannot see.
      const broken = [
        // not a bucket series: Prometheus 2.42 answers nothing
        'histogram_quantile(0.9, sum by (le) (rate(http_requests_total[1m])))',
        // many-to-many vector matching: an evaluation error
        'http_requests_total / on (route) http_request_duration_seconds_count',
        // a label no series has: one unnamed line
        'sum by (model) (rate(http_requests_total[1m]))',
        // a metric the service does not export
        'sum by (route) (rate(mas_requests_total[1m]))',
      ];
      for (const expr of broken) expect(problems(expr, await server.query(expr, at), true), expr).not.toEqual([]);
    });
  });
});
