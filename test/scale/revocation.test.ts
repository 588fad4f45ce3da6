import { createHash, randomBytes } from 'node:crypto';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { csrfOf, hiddenFields, signUpPerson, type Person } from '../support/cookie-browser.ts';
import { nowMs, sleep, startTestCluster, upstreamOf, type TestCluster } from './support.ts';

/**
 * Issue 21, revocation: "a key, app connection, session or admin token revoked on one instance
 * is refused by every instance on its next request." For an API key, an OAuth app connection
 * (its access token at the MCP server), an account session and an admin token: about 100 requests a second go
 * through nginx to two API instances; an operator revokes the credential with the CLI, a third
 * process, while the load goes on. PostgreSQL's commit timestamp of the revoking transaction
 * (track_commit_timestamp; the audit row is written in the same transaction) splits the requests:
 * per instance, none sent after that instant may be accepted, and each instance must have
 * accepted the credential before and refused it after.
 */

let t: TestCluster;
const reports: string[] = [];

beforeAll(async () => {
  // The per-key limit would otherwise refuse (429) part of the load: only the revoke may.
  t = await startTestCluster('revocation', { env: { RATE_LIMIT_PER_MINUTE: '1000000' } });
});

afterAll(async () => {
  if (reports.length) console.log(`\nRevocation under load (times in ms relative to the revoke: its commit timestamp, or the moment a reader first saw it when that was later)\n\n${reports.join('\n\n')}\n`);
  await t?.stop();
});

// ---------------------------------------------------------------------------------------------
// The load and its tally.

interface Sample {
  label: string;
  /** nowMs() just before fetch. */
  sentAt: number;
  /** When the whole answer had been read. */
  doneAt: number;
  /** 0: the request failed without an answer. */
  status: number;
  upstream: string;
  error?: string;
}

type CliResult = Awaited<ReturnType<TestCluster['cluster']['cli']>>;

/**
 * About 100 requests a second, at most `maxInFlight` of them unanswered: on a busy machine the
 * instances answer fewer, and an unbounded queue would leave every request sent after the
 * commit waiting seconds before its credential is looked up, which would prove little. With
 * the bound, a request sent just after the commit is looked up soon after it.
 */
const LOAD = { intervalMs: 10, maxInFlight: 16, beforeMs: 2_000, afterMs: 2_000 };

/**
 * Starts one request every `intervalMs` (a tick is skipped while `maxInFlight` are unanswered)
 * until `beforeMs` after the start, runs `revoke` while the load goes on, keeps the load
 * `afterMs` after it returned, then waits for every answer.
 */
async function underLoad(
  request: (i: number) => { label: string; send: () => Promise<Response> },
  revoke: () => Promise<CliResult>,
  audit: { action: string; targetId: string },
) {
  const samples: Sample[] = [];
  const pending: Promise<void>[] = [];
  let stop = false;
  let inFlight = 0;
  let skipped = 0;
  const loop = (async () => {
    let due = nowMs();
    for (let i = 0; !stop; ) {
      const wait = due - nowMs();
      if (wait > 0) await sleep(wait);
      if (stop) break;
      // A late event loop does not burst to catch up: the rate stays about the one asked for.
      due = Math.max(due + LOAD.intervalMs, nowMs() - LOAD.intervalMs);
      if (inFlight >= LOAD.maxInFlight) {
        skipped++;
        continue;
      }
      const { label, send } = request(i++);
      inFlight++;
      const sentAt = nowMs();
      pending.push(
        send()
          .then(
            async (res) => {
              await res.arrayBuffer().catch(() => undefined);
              samples.push({ label, sentAt, doneAt: nowMs(), status: res.status, upstream: upstreamOf(res) });
            },
            (err: unknown) => void samples.push({ label, sentAt, doneAt: nowMs(), status: 0, upstream: '', error: String(err) }),
          )
          .finally(() => inFlight--),
      );
    }
  })();
  const loadStart = nowMs();
  await sleep(LOAD.beforeMs);
  // When a reader first saw the revoke: its audit row is written in the same transaction. A
  // transaction's commit timestamp is taken before its commit is flushed and visible to others
  // (several ms on a slow disk), so a request sent between the two may rightly still be
  // accepted; the split is the later of the two (`splitMs`).
  let seen = false;
  let visibleAt: number | undefined;
  let giveUpAt = Number.POSITIVE_INFINITY;
  const watcher = (async () => {
    while (!seen && nowMs() < giveUpAt) {
      const { rows } = await t.sql.query('select 1 from admin_audit_log where action = $1 and target_id = $2 limit 1', [audit.action, audit.targetId]);
      if (rows.length > 0) {
        visibleAt = nowMs();
        seen = true;
      } else await sleep(1);
    }
  })();
  const cli = await revoke();
  // A revoke that failed writes no audit row: stop looking 5 s after it returned (the test then fails on its exit code).
  giveUpAt = nowMs() + 5_000;
  await watcher;
  await sleep(LOAD.afterMs);
  stop = true;
  await loop;
  await Promise.all(pending);
  return { samples, cli, loadStart, loadEnd: nowMs(), skipped, visibleAt: visibleAt ?? Number.NEGATIVE_INFINITY };
}

/** Where the requests are split: the revoke's commit timestamp, or when a reader first saw it when that was later. */
function splitMs(commitMs: number, run: { visibleAt: number }): number {
  return Math.max(commitMs, run.visibleAt);
}

/** When the transaction that wrote the newest audit row of this action on this target committed, in ms since the epoch (with microseconds). */
async function auditCommitMs(action: string, targetId: string): Promise<number> {
  const { rows } = await t.sql.query<{ ms: number | null }>(
    `select (extract(epoch from pg_xact_commit_timestamp(xmin)) * 1000)::float8 as ms
       from admin_audit_log where action = $1 and target_id = $2 order by id desc limit 1`,
    [action, targetId],
  );
  expect(rows[0]?.ms, `the audit row ${action} ${targetId} and its commit timestamp`).toEqual(expect.any(Number));
  return rows[0]!.ms!;
}

async function rowCommitMs(table: 'api_keys' | 'app_connections', id: string): Promise<number> {
  const { rows } = await t.sql.query<{ ms: number }>(`select (extract(epoch from pg_xact_commit_timestamp(xmin)) * 1000)::float8 as ms from ${table} where id = $1`, [id]);
  return rows[0]!.ms;
}

interface InstanceTally {
  instance: string;
  /** Accepted, sent before the commit. */
  acceptedBefore: number;
  /** Accepted, sent before the commit, answered after it (in flight across the revoke). */
  acceptedInFlight: number;
  /** Accepted, sent after the commit: must be 0. */
  acceptedAfter: number;
  /** Refused, sent before the commit (their look-up ran after it). */
  refusedBefore: number;
  /** Refused, sent after the commit. */
  refusedAfter: number;
  /** Anything else (other statuses, failed requests), before / after the commit. */
  otherBefore: number;
  otherAfter: number;
  /** Send time of the last accepted request, relative to the commit. */
  lastAcceptedSent: number | null;
  /** Send time of the first refused request, relative to the commit. */
  firstRefusedSent: number | null;
  /** When the first refusal was answered, relative to the commit. */
  firstRefusedDone: number | null;
  /** The first request sent after the commit: when it was sent and answered (relative to the commit), and its status. */
  firstAfter: { sent: number; done: number; status: number } | null;
  /** Accepted answers by label, before the commit (`chat`, `balance`, …). */
  acceptedBeforeByLabel: Record<string, number>;
  refusedAfterByLabel: Record<string, number>;
  otherStatuses: Record<string, number>;
}

function tally(samples: Sample[], commitMs: number, accepted: (s: Sample) => boolean, refused: (s: Sample) => boolean): InstanceTally[] {
  const names = new Map(t.cluster.apis.map((a) => [`127.0.0.1:${a.port}`, a.name]));
  const byInstance = new Map<string, InstanceTally>();
  const of = (upstream: string) => {
    const instance = names.get(upstream) ?? (upstream || '(no answer)');
    let row = byInstance.get(instance);
    if (!row) {
      row = {
        instance,
        acceptedBefore: 0,
        acceptedInFlight: 0,
        acceptedAfter: 0,
        refusedBefore: 0,
        refusedAfter: 0,
        otherBefore: 0,
        otherAfter: 0,
        lastAcceptedSent: null,
        firstRefusedSent: null,
        firstRefusedDone: null,
        firstAfter: null,
        acceptedBeforeByLabel: {},
        refusedAfterByLabel: {},
        otherStatuses: {},
      };
      byInstance.set(instance, row);
    }
    return row;
  };
  for (const s of [...samples].sort((a, b) => a.sentAt - b.sentAt)) {
    const row = of(s.upstream);
    const after = s.sentAt > commitMs;
    if (after && row.firstAfter === null) row.firstAfter = { sent: s.sentAt - commitMs, done: s.doneAt - commitMs, status: s.status };
    if (accepted(s)) {
      if (after) row.acceptedAfter++;
      else {
        row.acceptedBefore++;
        row.acceptedBeforeByLabel[s.label] = (row.acceptedBeforeByLabel[s.label] ?? 0) + 1;
        if (s.doneAt > commitMs) row.acceptedInFlight++;
      }
      row.lastAcceptedSent = s.sentAt - commitMs;
    } else if (refused(s)) {
      if (after) {
        row.refusedAfter++;
        row.refusedAfterByLabel[s.label] = (row.refusedAfterByLabel[s.label] ?? 0) + 1;
      } else row.refusedBefore++;
      if (row.firstRefusedSent === null) row.firstRefusedSent = s.sentAt - commitMs;
      if (row.firstRefusedDone === null || s.doneAt - commitMs < row.firstRefusedDone) row.firstRefusedDone = s.doneAt - commitMs;
    } else {
      if (after) row.otherAfter++;
      else row.otherBefore++;
      const key = `${s.label} ${s.status}${s.error ? ` ${s.error}` : ''}`;
      row.otherStatuses[key] = (row.otherStatuses[key] ?? 0) + 1;
    }
  }
  return [...byInstance.values()].sort((a, b) => a.instance.localeCompare(b.instance));
}

const ms = (v: number | null) => (v === null ? '-' : v.toFixed(1));

function report(title: string, run: Awaited<ReturnType<typeof underLoad>>, commitMs: number, rows: InstanceTally[], extra: string[] = []): string {
  const { samples, cli, loadStart, loadEnd, skipped } = run;
  const seconds = (loadEnd - loadStart) / 1000;
  const head = ['instance', 'accepted before', '(in flight)', 'accepted after commit', 'refused before', 'refused after', 'other', 'last accepted sent', 'first refused sent', 'first refusal answered', 'first sent after commit: sent, answered, status'];
  const body = rows.map((r) => [
    r.instance,
    String(r.acceptedBefore),
    String(r.acceptedInFlight),
    String(r.acceptedAfter),
    String(r.refusedBefore),
    String(r.refusedAfter),
    String(r.otherBefore + r.otherAfter),
    ms(r.lastAcceptedSent),
    ms(r.firstRefusedSent),
    ms(r.firstRefusedDone),
    r.firstAfter ? `${ms(r.firstAfter.sent)}, ${ms(r.firstAfter.done)}, ${r.firstAfter.status}` : '-',
  ]);
  const widths = head.map((h, i) => Math.max(h.length, ...body.map((b) => b[i]!.length)));
  const line = (cells: string[]) => `| ${cells.map((c, i) => c.padEnd(widths[i]!)).join(' | ')} |`;
  const latencies = samples.map((s) => s.doneAt - s.sentAt).sort((a, b) => a - b);
  const pct = (p: number) => latencies[Math.min(latencies.length - 1, Math.floor((p / 100) * latencies.length))]!.toFixed(0);
  return [
    `## ${title}`,
    `${samples.length} requests in ${seconds.toFixed(1)} s (${(samples.length / seconds).toFixed(0)} req/s; ${skipped} ticks of 10 ms skipped at ${LOAD.maxInFlight} in flight); latency p50 ${pct(50)} ms, p99 ${pct(99)} ms, max ${latencies.at(-1)!.toFixed(0)} ms`,
    `CLI ${cli.endedAt - cli.startedAt} ms (exit ${cli.code}); commit ${(commitMs - cli.startedAt).toFixed(0)} ms after the CLI started, ${(cli.endedAt - commitMs).toFixed(0)} ms before it returned`,
    ...extra,
    line(head),
    line(widths.map((w) => '-'.repeat(w))),
    ...body.map(line),
    ...rows.flatMap((r) => (Object.keys(r.otherStatuses).length ? [`${r.instance} other answers: ${JSON.stringify(r.otherStatuses)}`] : [])),
  ].join('\n');
}

/** The assertions every case makes: exact, per instance. */
function expectRevokedEverywhere(title: string, rows: InstanceTally[], samples: Sample[], commitMs: number) {
  const text = `${title}\n${JSON.stringify(rows, null, 1)}`;
  // Every answer came from one of the cluster's two instances.
  expect(rows.map((r) => r.instance).sort(), text).toEqual(t.cluster.apis.map((a) => a.name).sort());
  for (const r of rows) {
    expect(r.acceptedBefore, `${r.instance} accepted the credential before the revoke: ${text}`).toBeGreaterThan(0);
    expect(r.acceptedAfter, `${r.instance} accepted requests sent after the revoke committed: ${text}`).toBe(0);
    expect(r.refusedAfter, `${r.instance} refused the credential after the revoke: ${text}`).toBeGreaterThan(0);
  }
  // After the commit there is no other answer than the refusal (no 5xx, no failed request).
  const after = samples.filter((s) => s.sentAt > commitMs);
  expect(after.length).toBeGreaterThan(0);
  expect(rows.reduce((n, r) => n + r.otherAfter, 0), text).toBe(0);
}

// ---------------------------------------------------------------------------------------------
// The OAuth flow of a real app (as test/integration/oauth.test.ts), against the cluster's URL.

const CALLBACK = 'http://127.0.0.1:47123/callback';

async function connectApp(person: Person): Promise<{ access: string; connectionId: string }> {
  const base = t.cluster.url;
  const resource = `${base}/api/v1/mcp`;
  const registered = await fetch(`${base}/register`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ redirect_uris: [CALLBACK], client_name: 'Revocation test client', token_endpoint_auth_method: 'none' }),
  });
  const client = (await registered.json()) as { client_id: string };
  expect(registered.status, JSON.stringify(client)).toBe(201);

  const verifier = randomBytes(48).toString('base64url');
  const challenge = createHash('sha256').update(verifier).digest('base64url');
  const state = randomBytes(6).toString('hex');
  const q = new URLSearchParams({ client_id: client.client_id, response_type: 'code', code_challenge: challenge, code_challenge_method: 'S256', resource, redirect_uri: CALLBACK, state });
  const consent = await person.browser.fetch(`/authorize?${q.toString()}`);
  const page = await consent.text();
  expect(consent.status, page.slice(0, 500)).toBe(200);
  const allowed = await person.browser.post('/authorize', { ...hiddenFields(page), _csrf: csrfOf(page)!, decision: 'allow', spend_cap_coins: '', lifetime: '30' });
  expect(allowed.status).toBe(303);
  const to = new URL(allowed.headers.get('location')!);
  expect(to.searchParams.get('state')).toBe(state);
  const code = to.searchParams.get('code')!;
  expect(code).toMatch(/^mas_ac_/);

  const exchanged = await fetch(`${base}/token`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ grant_type: 'authorization_code', code, code_verifier: verifier, client_id: client.client_id, redirect_uri: CALLBACK, resource }),
  });
  const tokens = (await exchanged.json()) as { access_token: string };
  expect(exchanged.status, JSON.stringify(tokens)).toBe(200);
  expect(tokens.access_token).toMatch(/^mas_at_/);
  const { rows } = await t.sql.query<{ id: string }>('select id from app_connections where account_id = $1 and client_id = $2 and revoked_at is null', [person.accountId, client.client_id]);
  expect(rows).toHaveLength(1);
  return { access: tokens.access_token, connectionId: rows[0]!.id };
}

// ---------------------------------------------------------------------------------------------

describe('a credential revoked through the CLI on a third process is refused by every instance on its next request', () => {
  it('an API key: balance reads and chat completions (the cached-key path)', async () => {
    const { keyId, key } = await t.fundedKey('1000');
    const base = t.cluster.url;
    const auth = { authorization: `Bearer ${key}` };
    const chatBody = JSON.stringify({ model: 'mas/echo', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 });
    // The key works on both instances before the load.
    for (let i = 0; i < 2; i++) {
      const res = await fetch(`${base}/api/v1/chat/completions`, { method: 'POST', headers: { ...auth, 'content-type': 'application/json' }, body: chatBody });
      expect(res.status, await res.text()).toBe(200);
    }

    const run = await underLoad(
      (i) =>
        i % 3 === 0
          ? { label: 'chat', send: () => fetch(`${base}/api/v1/chat/completions`, { method: 'POST', headers: { ...auth, 'content-type': 'application/json' }, body: chatBody }) }
          : { label: 'balance', send: () => fetch(`${base}/api/v1/balance`, { headers: auth }) },
      () => t.cluster.cli(['key', 'revoke', '--id', keyId]),
      { action: 'key.revoke', targetId: keyId },
    );
    expect(run.cli.code, `${run.cli.stdout}\n${run.cli.stderr}`).toBe(0);
    expect(run.cli.stdout).toContain(keyId);

    const committedMs = await auditCommitMs('key.revoke', keyId);
    const commitMs = splitMs(committedMs, run);
    const keyRowMs = await rowCommitMs('api_keys', keyId);
    const rows = tally(run.samples, commitMs, (s) => s.status >= 200 && s.status < 300, (s) => s.status === 401);
    reports.push(
      report('API key (GET /api/v1/balance, 2 of 3; POST /api/v1/chat/completions mas/echo, 1 of 3)', run, commitMs, rows, [
        `api_keys row's commit timestamp - audit row's: ${(keyRowMs - committedMs).toFixed(3)} ms (same transaction); first seen by a reader ${(run.visibleAt - committedMs).toFixed(1)} ms after the commit timestamp`,
        ...rows.map((r) => `${r.instance} accepted before by route: ${JSON.stringify(r.acceptedBeforeByLabel)}; refused after by route: ${JSON.stringify(r.refusedAfterByLabel)}`),
      ]),
    );
    expectRevokedEverywhere('API key', rows, run.samples, commitMs);
    // The chat path answers from a per-instance cache of keys: it was used, and refused, on both.
    for (const r of rows) {
      expect(r.acceptedBeforeByLabel.chat ?? 0, r.instance).toBeGreaterThan(0);
      expect(r.refusedAfterByLabel.chat ?? 0, r.instance).toBeGreaterThan(0);
    }
  });

  it('an OAuth app connection: its access token at the MCP server', async () => {
    const person = await signUpPerson(t.cluster.url, t.orm, 'revocation-app', { mailDir: path.join(t.cluster.env.DATA_DIR!, 'mail') });
    const { access, connectionId } = await connectApp(person);
    const url = `${t.cluster.url}/api/v1/mcp`;
    const headers = { authorization: `Bearer ${access}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' };
    const list = '{"jsonrpc":"2.0","id":1,"method":"tools/list"}';
    const balance = '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"get_balance","arguments":{}}}';
    // The token works: the tools, and a tool call through core.
    for (const body of [list, balance]) {
      const res = await fetch(url, { method: 'POST', headers, body });
      const text = await res.text();
      expect(res.status, text).toBe(200);
      expect(text).toMatch(body === list ? /"tools"/ : /"content"/);
      expect(text).not.toMatch(/"isError":true/);
    }

    const run = await underLoad(
      (i) => (i % 2 === 0 ? { label: 'tools/list', send: () => fetch(url, { method: 'POST', headers, body: list }) } : { label: 'get_balance', send: () => fetch(url, { method: 'POST', headers, body: balance }) }),
      () => t.cluster.cli(['app', 'revoke', '--id', connectionId, '--reason', 'scale test: revocation under load']),
      { action: 'app_connection.revoke', targetId: connectionId },
    );
    expect(run.cli.code, `${run.cli.stdout}\n${run.cli.stderr}`).toBe(0);

    const committedMs = await auditCommitMs('app_connection.revoke', connectionId);
    const commitMs = splitMs(committedMs, run);
    const rowMs = await rowCommitMs('app_connections', connectionId);
    const rows = tally(run.samples, commitMs, (s) => s.status >= 200 && s.status < 300, (s) => s.status === 401);
    reports.push(
      report('OAuth app connection (POST /api/v1/mcp with its access token: tools/list, tools/call get_balance)', run, commitMs, rows, [
        `app_connections row's commit timestamp - audit row's: ${(rowMs - committedMs).toFixed(3)} ms (same transaction); first seen by a reader ${(run.visibleAt - committedMs).toFixed(1)} ms after the commit timestamp`,
      ]),
    );
    expectRevokedEverywhere('OAuth app connection', rows, run.samples, commitMs);
  });

  it('an account session: the account pages', async () => {
    const person = await signUpPerson(t.cluster.url, t.orm, 'revocation-session', { mailDir: path.join(t.cluster.env.DATA_DIR!, 'mail') });
    const url = `${t.cluster.url}/account`;
    const headers = { cookie: `mas_session=${person.session}` };
    const first = await fetch(url, { headers, redirect: 'manual' });
    expect(first.status, await first.text()).toBe(200);
    // The refusal of a page: a redirect to the sign-in page.
    const refusedPage = (s: Sample) => s.status === 303;

    const samplesLocation: string[] = [];
    const run = await underLoad(
      () => ({
        label: 'GET /account',
        send: async () => {
          const res = await fetch(url, { headers, redirect: 'manual' });
          if (res.status === 303 && samplesLocation.length < 3) samplesLocation.push(res.headers.get('location') ?? '');
          return res;
        },
      }),
      () => t.cluster.cli(['account', 'end-sessions', '--account', person.email, '--reason', 'scale test: revocation under load']),
      { action: 'account.end_sessions', targetId: person.accountId },
    );
    expect(run.cli.code, `${run.cli.stdout}\n${run.cli.stderr}`).toBe(0);
    expect(run.cli.stdout).toMatch(/^1 session\(s\) of /);
    for (const l of samplesLocation) expect(l).toBe('/login?next=%2Faccount');

    const commitMs = splitMs(await auditCommitMs('account.end_sessions', person.accountId), run);
    const rows = tally(run.samples, commitMs, (s) => s.status === 200, refusedPage);
    reports.push(report('Account session (GET /account with the session cookie; refused = 303 to /login)', run, commitMs, rows));
    expectRevokedEverywhere('Account session', rows, run.samples, commitMs);
  });

  it('an admin token: the admin API', async () => {
    const made = await t.cluster.cli(['admin', 'token', 'create', '--name', 'scale revocation', '--role', 'viewer', '--json']);
    expect(made.code, made.stderr).toBe(0);
    const { id, token } = JSON.parse(made.stdout) as { id: string; token: string };
    const url = `${t.cluster.url}/admin/graphql`;
    const headers = { authorization: `Bearer ${token}`, 'content-type': 'application/json' };
    const body = JSON.stringify({ query: '{ accounts(first: 1) { edges { node { id } } } }' });
    const first = await fetch(url, { method: 'POST', headers, body });
    expect(first.status, await first.text()).toBe(200);

    const run = await underLoad(
      () => ({ label: 'POST /admin/graphql', send: () => fetch(url, { method: 'POST', headers, body }) }),
      () => t.cluster.cli(['admin', 'token', 'revoke', '--id', id]),
      { action: 'admin_token.revoke', targetId: id },
    );
    expect(run.cli.code, `${run.cli.stdout}\n${run.cli.stderr}`).toBe(0);

    const commitMs = splitMs(await auditCommitMs('admin_token.revoke', id), run);
    const rows = tally(run.samples, commitMs, (s) => s.status === 200, (s) => s.status === 401);
    reports.push(report('Admin token (POST /admin/graphql; refused = 401)', run, commitMs, rows));
    expectRevokedEverywhere('Admin token', rows, run.samples, commitMs);
  });
});
