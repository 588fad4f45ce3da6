import { spawn } from 'node:child_process';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseCoins } from '../../core/money/coins.ts';
import { credit } from '../../core/money/wallet.ts';
import { csrfOf, hiddenFields, signUpPerson, type Person } from '../support/cookie-browser.ts';
import { makeAccount, makeKey } from '../support/db.ts';
import { startJobHarness, type JobHarness } from '../support/jobs.ts';
import { MCP_PYTHON_VERSION, mcpPython } from '../support/python-mcp.ts';

/**
 * The official Python MCP SDK (`mcp` 2.3.0, in a venv under ~/.cache/mas made on first use),
 * which first tries the 2026-07-28 revision, against the server over real HTTP: with a key in
 * the header, the connector link, and its OAuth client at http://127.0.0.1:<port> while
 * PUBLIC_BASE_URL is its default, http://localhost:<port> (loopback OAuth, docs/oauth.md). The
 * person's browser is a cookie jar over fetch: the consent page works without JavaScript.
 */
let h: JobHarness;
let python: string;
beforeAll(async () => {
  python = await mcpPython();
  h = await startJobHarness({ publicBaseUrlIsDefault: true });
}, 600_000);
afterAll(() => h?.close());

const SCRIPT = path.join(import.meta.dirname, 'mcp_python_client.py');

interface Outcome {
  protocol_version: string;
  server: string | null;
  tools: string[];
  is_error: boolean;
  job: { id: string; status: string } | null;
  progress: { progress: number; total: number | null; message: string | null }[];
  posts: { method: string; status: number }[];
}

/** Runs the Python client; `onAuthorize` plays the browser and answers with the URL it landed on. */
function runPython(url: string, way: string, key?: string, onAuthorize?: (authorizationUrl: string) => Promise<string>): Promise<Outcome> {
  return new Promise((resolve, reject) => {
    const child = spawn(python, [SCRIPT, url, way, ...(key ? [key] : [])], { stdio: ['pipe', 'pipe', 'pipe'] });
    let stderr = '';
    let outcome: Outcome | undefined;
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    createInterface({ input: child.stdout }).on('line', (line) => {
      const message = JSON.parse(line) as { event: string; url?: string } & Outcome;
      if (message.event === 'result') outcome = message;
      if (message.event === 'authorize') {
        onAuthorize!(message.url!).then(
          (landed) => child.stdin.write(`${landed}\n`),
          (err: unknown) => {
            child.kill();
            reject(err as Error);
          },
        );
      }
    });
    child.once('exit', (code) => (code === 0 && outcome ? resolve(outcome) : reject(new Error(`the Python client exited with ${code}:\n${stderr.slice(-4000)}`))));
  });
}

/** The person's browser at the authorization URL: the consent page, then Allow; the redirect it lands on. */
async function allow(person: Person, authorizationUrl: string): Promise<string> {
  const url = new URL(authorizationUrl);
  const res = await person.browser.fetch(`${url.pathname}${url.search}`);
  const page = await res.text();
  expect(res.status, page.slice(0, 800)).toBe(200);
  const approved = await person.browser.post('/authorize', { ...hiddenFields(page), _csrf: csrfOf(page)!, decision: 'allow', spend_cap_coins: '', lifetime: '30' });
  expect(approved.status).toBe(303);
  return approved.headers.get('location')!;
}

function expectModern(outcome: Outcome) {
  expect(outcome.protocol_version).toBe('2026-07-28');
  expect(outcome.server).toBe('model-access-service');
  expect(outcome.tools).toEqual(expect.arrayContaining(['list_models', 'generate', 'get_generation', 'get_balance']));
  // No 2025 fallback: the first MCP exchange that got through was server/discover, and nothing was a 400.
  expect(outcome.posts.filter((p) => p.status === 400)).toEqual([]);
  expect(outcome.posts.map((p) => p.method)).not.toContain('initialize');
  expect(outcome.posts.find((p) => p.status === 200)?.method).toBe('server/discover');
  expect(outcome.is_error).toBe(false);
  expect(outcome.job?.status).toBe('succeeded');
  expect(outcome.progress.length).toBeGreaterThanOrEqual(1);
  expect(outcome.progress[0]!.message).toContain(outcome.job!.id);
}

describe(`the Python MCP SDK ${MCP_PYTHON_VERSION}`, () => {
  it('connects at 2026-07-28 with a key in the header, lists the tools and runs generate with progress', async () => {
    const account = await makeAccount(h.orm, { coins: '100' });
    const { key } = await makeKey(h.orm, account.id);
    const outcome = await runPython(`${h.base}/api/v1/mcp`, 'header', key);
    expectModern(outcome);
    expect(outcome.posts.every((p) => p.status === 200 || p.status === 202)).toBe(true);
  });

  it('does the same through the connector link', async () => {
    const account = await makeAccount(h.orm, { coins: '100' });
    const { key } = await makeKey(h.orm, account.id);
    const outcome = await runPython(`${h.base}/api/v1/mcp/${key}`, 'link');
    expectModern(outcome);
  });

  it('completes OAuth at 127.0.0.1 while PUBLIC_BASE_URL is the default http://localhost:<port>', async () => {
    const port = new URL(h.base).port;
    expect(h.deps.config.oauth.resource).toBe(`http://localhost:${port}/api/v1/mcp`);
    expect(h.deps.config.oauth.loopbackAliases).toBe(true);

    // The person signs in at the service's own address, where the consent page is.
    const person = await signUpPerson(`http://localhost:${port}`, h.orm, 'mcp-python');
    await credit(h.orm.em.fork(), { accountId: person.accountId, kind: 'topup', amount: parseCoins('100'), reference: 'fixture', idempotencyKey: `mcp-python:${person.accountId}`, description: 'Top-up' });
    let authorizationUrl = '';
    const outcome = await runPython(`${h.base}/api/v1/mcp`, 'oauth', undefined, (url) => {
      authorizationUrl = url;
      return allow(person, url);
    });
    // The client asked for the MCP server it connected to, at 127.0.0.1, and got it.
    expect(new URL(authorizationUrl).searchParams.get('resource')).toBe(`${h.base}/api/v1/mcp`);
    expectModern(outcome);
    // The first POST met the door (401, which starts OAuth); after sign-in, no other refusal.
    expect(outcome.posts[0]!.status).toBe(401);
    expect(outcome.posts.slice(1).every((p) => p.status === 200 || p.status === 202)).toBe(true);
    const [app] = await h.orm.em.fork().execute<{ client_name: string }[]>('select client_name from app_connections where account_id = ?', [person.accountId]);
    expect(app?.client_name).toBe('Python MCP SDK test');
  });
});
