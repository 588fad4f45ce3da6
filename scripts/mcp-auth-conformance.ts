import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { freePort } from '../adapters/embedded/postgres.ts';
import { mcpResourceUrl } from '../adapters/mcp/resource.ts';
import { launchChromium } from '../test/support/browser.ts';
import { ensureSystemTool } from './support/system-tools.ts';
import { compareWithBaseline, findSuite, knownScenarios, loadBaseline, readResults, redactFiles, runSuite, type SuiteRun } from './support/conformance.ts';
import {
  killLeftoversOnExit,
  positiveInt as envInt,
  printServerErrors,
  root,
  sayer,
  startServer,
  stopServer,
  type Server,
} from './support/server.ts';

/**
 * `npm run test:mcp-auth`: the official MCP conformance suite's authorization server scenarios
 * against the service's own OAuth authorization server (docs/oauth.md). They exist only in the
 * suite's 0.2.0 alphas, installed beside 0.1.16 (which `npm run test:mcp` runs) under the npm
 * alias @modelcontextprotocol/conformance-next, a pinned devDependency, run from node_modules.
 *
 * 1. The real server starts on a free port with a fresh temporary DATA_DIR (scripts/support/
 *    server.ts); its first start prints the demo account's one-time sign-in link.
 * 2. A public client is registered at POST /register, with the redirect URI the suite listens on
 *    (http://127.0.0.1:<free port>/callback) and token_endpoint_auth_method none.
 * 3. Chromium (Debian's, through playwright-core: test/support/browser.ts) redeems the sign-in
 *    link: the person is signed in.
 * 4. `conformance authorization --url <base> --client-id <id> --resource <base>/api/v1/mcp
 *    -p <port> -o <tmp>`, all scenarios: authorization-server-metadata-endpoint reads the
 *    RFC 8414 metadata; authorization-code-grant prints an authorization URL (PKCE S256, state,
 *    resource) and waits for the callback. The browser opens that URL, sees the consent page and
 *    presses Allow; the suite gets the code at its callback, exchanges it at /token (with the
 *    verifier, redirect_uri and resource) and checks the redirect (state, iss) and the token
 *    answer (200, JSON, Cache-Control: no-store, access_token, token_type).
 * 5. The results are compared with scripts/mcp-auth-conformance-baseline.json, with the rules of
 *    `npm run test:mcp` (scripts/support/conformance.ts): exit 1 on a failure or warning the
 *    baseline does not list. The server, the browser and the suite are stopped, whatever happened.
 *
 * No secret appears in this script's output: the sign-in link, the code (in the callback URL the
 * suite records) and every `mas_…` token are replaced with <SECRET> in what is shown or kept (the
 * suite itself shows only the first and last 4 characters of the tokens it got).
 *
 * Settings (environment): MCP_AUTH_CONFORMANCE_TIMEOUT (seconds for the suite, default 120),
 * MCP_AUTH_CONFORMANCE_VERBOSE=1 (the suite's own output as it runs, redacted),
 * MCP_AUTH_CONFORMANCE_BASELINE (another baseline file), MCP_AUTH_CONFORMANCE_KEEP_DATA=1 (keep
 * the temporary folder: DATA_DIR, server log, the suite's output and results, redacted).
 */
const say = sayer('mcp-auth-conformance');
const positiveInt = (name: string, fallback?: number) => envInt(say, name, fallback);
const SUITE = '@modelcontextprotocol/conformance-next';
const REDACTED = '<SECRET>';
const CLIENT_NAME = 'MCP conformance suite';

/** POST /register (RFC 7591): a public client whose one redirect URI is the suite's callback. */
async function registerClient(base: string, redirectUri: string): Promise<string> {
  const res = await fetch(`${base}/register`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      client_name: CLIENT_NAME,
      redirect_uris: [redirectUri],
      token_endpoint_auth_method: 'none',
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
    }),
  });
  const body = (await res.json().catch(() => ({}))) as { client_id?: string };
  if (res.status !== 201 || typeof body.client_id !== 'string') throw new Error(`POST /register answered ${res.status}: ${JSON.stringify(body)}`);
  return body.client_id;
}

/** Redeems the demo account's one-time link: the browser's context has a session from then on. */
async function signIn(page: Page, base: string, loginUrl: string): Promise<void> {
  await page.goto(loginUrl);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.waitForURL((u) => u.href === `${base}/account`, { timeout: 15_000 });
}

/** The person's part: the consent page of the suite's authorization request, and Allow; done once the browser reaches the callback. */
async function allow(page: Page, base: string, authorizationUrl: string, redirectUri: string): Promise<void> {
  await page.goto(authorizationUrl);
  const url = new URL(page.url());
  if (url.origin !== base || url.pathname !== '/authorize') throw new Error(`the authorization request led to ${url.origin}${url.pathname}, not to the consent page`);
  const heading = page.getByRole('heading', { name: `Connect ${CLIENT_NAME}?` });
  if (!(await heading.isVisible())) throw new Error(`no consent page for "${CLIENT_NAME}": ${(await page.locator('main').textContent().catch(() => ''))?.trim().slice(0, 300)}`);
  await page.getByRole('button', { name: 'Allow' }).click();
  await page.waitForURL((u) => u.href.startsWith(`${redirectUri}?`), { timeout: 15_000 });
}

async function main(): Promise<number> {
  const startedAt = Date.now();
  // A closed pipe (`| head`) must not end the run before it has stopped the server and cleaned up.
  process.stdout.on('error', () => undefined);
  process.stderr.on('error', () => undefined);
  const timeoutSeconds = positiveInt('MCP_AUTH_CONFORMANCE_TIMEOUT', 120)!;
  const verbose = process.env.MCP_AUTH_CONFORMANCE_VERBOSE === '1';
  const baselineFile = path.resolve(process.env.MCP_AUTH_CONFORMANCE_BASELINE || path.join(root, 'scripts', 'mcp-auth-conformance-baseline.json'));
  const baseline = await loadBaseline(baselineFile);
  const shownBaseline = baselineFile.startsWith(root + path.sep) ? path.relative(root, baselineFile) : baselineFile;
  const suite = await findSuite(SUITE);
  if (suite.version !== baseline.conformance) {
    say(`note: the baseline was made with conformance ${baseline.conformance}, the installed suite is ${suite.version}: its scenarios may differ`);
  }

  const work = await fs.mkdtemp(path.join(os.tmpdir(), 'mas-mcp-auth-conformance-'));
  const dataDir = path.join(work, 'data');
  const logFile = path.join(work, 'server.log');
  const resultsDir = path.join(work, 'results');
  let server: Server | undefined;
  let browser: Browser | undefined;
  let run: SuiteRun | undefined;
  let interrupted = false;
  const onSignal = (signal: NodeJS.Signals) => {
    if (interrupted) return;
    interrupted = true;
    say(`${signal}: stopping`);
    run?.child.kill('SIGTERM');
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  killLeftoversOnExit(work, () => server);
  let redact = (s: string) => s.replace(/mas_[A-Za-z0-9_-]{8,}/g, REDACTED);

  try {
    say(`starting the server (DATA_DIR ${dataDir})`);
    server = await startServer(say, work, dataDir, logFile);
    if (interrupted) return 130;
    const { base, key, loginUrl } = server;
    redact = (s: string) => s.split(loginUrl).join(`${base}/login/link?token=${REDACTED}`).split(key).join(REDACTED).replace(/mas_[A-Za-z0-9_-]{8,}/g, REDACTED);

    const callbackPort = await freePort();
    const redirectUri = `http://127.0.0.1:${callbackPort}/callback`;
    const clientId = await registerClient(base, redirectUri);
    browser = await launchChromium([], await ensureSystemTool('chromium'));
    const page = await (await browser.newContext()).newPage();
    await signIn(page, base, loginUrl);
    say(`server up, client ${clientId} registered, demo account signed in; running conformance ${suite.version} (authorization server scenarios) against ${base}`);

    const known = await knownScenarios(suite.bin, work, 'authorization');
    const unknown = known ? [...baseline.scenarios.keys()].filter((s) => !known.has(s)) : [];
    if (unknown.length > 0) say(`the baseline lists scenarios the suite does not have (misspelt, or renamed?): ${unknown.join(', ')}`);
    // All scenarios in one run: authorization-code-grant reads the metadata that
    // authorization-server-metadata-endpoint fetched, and has none when run alone.
    const args = [
      suite.bin,
      'authorization',
      '--url', base,
      '--client-id', clientId,
      '--resource', mcpResourceUrl(base),
      '--port', String(callbackPort),
      '--output-dir', resultsDir,
    ];
    let consent: Promise<void> | undefined;
    let browserError: Error | undefined;
    const suiteLog = path.join(work, 'conformance.log');
    // From the temporary folder: the suite writes nothing into the clone.
    run = runSuite(say, {
      args,
      cwd: work,
      logFile: suiteLog,
      redact,
      verbose,
      timeoutSeconds,
      onLine: (line) => {
        // The suite prints the authorization URL on a line of its own and waits for the callback.
        if (consent || !line.startsWith(`${base}/authorize?`)) return;
        consent = allow(page, base, line.trim(), redirectUri).catch((err: unknown) => {
          browserError = err as Error;
          // No callback will come: stop the suite rather than let it wait 5 minutes.
          run?.child.kill('SIGTERM');
        });
      },
    });
    const { code, timedOut, seconds } = await run.done;
    await consent;
    if (interrupted) return 130;
    if (browserError) say(`the browser could not complete the authorization: ${redact(browserError.message)}`);
    if (!consent && run.started.includes('authorization-code-grant')) say('the suite never printed an authorization URL for the browser');

    const results = await readResults(resultsDir, run.started, 'authorization-server');
    if (results.length === 0) {
      say(`the suite ran no scenario (exit ${code}); its output:`);
      process.stderr.write(await fs.readFile(suiteLog, 'utf8').catch(() => ''));
      return 1;
    }
    const unexpected = await compareWithBaseline({
      title: `MCP conformance ${suite.version}, authorization server, ${results.length} scenario(s), ${seconds.toFixed(1)} s`,
      results,
      baseline,
      shownBaseline,
      suiteLog,
      redact,
    });
    if (unexpected > 0) await printServerErrors(say, logFile, redact);
    if (server.hasExited()) {
      say('the server died during the run');
      await printServerErrors(say, logFile, redact);
      return 1;
    }
    if (timedOut || browserError) return 1;
    say(`${unexpected === 0 ? 'no unexpected failure' : `${unexpected} unexpected failure(s)`}; ${((Date.now() - startedAt) / 1000).toFixed(1)} s in all`);
    return unexpected === 0 ? 0 : 1;
  } catch (err) {
    // Playwright's and fetch's messages may quote a URL with the sign-in link's token.
    throw new Error(redact((err as Error).message));
  } finally {
    if (run && run.child.exitCode === null && run.child.signalCode === null) run.child.kill('SIGKILL');
    await browser?.close().catch(() => undefined);
    if (server) {
      say('stopping the server');
      await stopServer(say, server, work);
    }
    if (process.env.MCP_AUTH_CONFORMANCE_KEEP_DATA === '1') {
      await redactFiles(resultsDir, redact);
      say(`kept ${work}`);
    } else await fs.rm(work, { recursive: true, force: true }).catch(() => undefined);
  }
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    say(`failed: ${(err as Error).message}`);
    process.exit(1);
  },
);
