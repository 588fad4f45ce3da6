import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import type { LookupAddress } from 'node:dns';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import type { MikroORM } from '@mikro-orm/postgresql';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createUrlGuard, type GuardedHttp } from '../../adapters/net/url-guard.ts';
import { localDiskStorage } from '../../adapters/storage/local-disk.ts';
import { loadCatalogFile } from '../../config/catalog.ts';
import { wireCore, type WiredCore } from '../../config/compose.ts';
import { loadEnv } from '../../config/env.ts';
import { seedModels } from '../../core/catalog/catalog.ts';
import type { CoreDeps } from '../../core/context.ts';
import { ClientDocuments } from '../../core/oauth/clients.ts';
import { makeAccount, makeKey, openTestOrm, silentLogger } from '../support/db.ts';
import { createTestApp, serve } from '../support/http.ts';
import { reportSection, table } from './support/results.ts';

/**
 * SSRF (issue 20, part 7). A canary HTTP server on loopback counts every request that reaches
 * it; a corpus of URLs aimed at it, or at other private space, goes through the three places
 * where this service fetches a URL a client gave it:
 *   - media job inputs: POST /api/v1/generations (the URL guard's check, then the job's fetch);
 *   - the MCP tool upload_file with a url (the guard's fetch);
 *   - OAuth Client ID Metadata Documents: GET /authorize and POST /token with a client_id URL.
 * The service here is wired as the processes wire it (config/compose.ts) with an EMPTY
 * INPUT_URL_ALLOWLIST: nothing on this machine is exempt. Names that resolve to private
 * addresses, redirects and DNS rebinding use the guard's injectable resolver (the `lookup`
 * option), both through the surfaces and on the guard directly.
 */

let orm: MikroORM;
let wired: WiredCore;
let canary: http.Server;
let canary6: http.Server | undefined;
let canaryPort: number;
let canaryHits = 0;
/** The canary's count once the whole corpus has run, before the control fetch. */
let corpusHits: number | undefined;
let redirector: http.Server;
let redirectorPort: number;
let redirectorHits = 0;
const closers: (() => Promise<void>)[] = [];

/** Refusals per entry point and address class: [refused, tried]. */
const results = new Map<string, Map<string, [number, number]>>();
function record(entry: string, cls: string, refused: boolean): void {
  const byClass = results.get(entry) ?? new Map<string, [number, number]>();
  results.set(entry, byClass);
  const cell = byClass.get(cls) ?? [0, 0];
  byClass.set(cls, [cell[0] + (refused ? 1 : 0), cell[1] + 1]);
}

// ---- the corpus -----------------------------------------------------------------------------

type Case = { cls: string; host: string };
const literalCorpus = (): Case[] => {
  const c = (cls: string, hosts: string[]) => hosts.map((host) => ({ cls, host }));
  return [
    ...c('IPv4 loopback', ['127.0.0.1', '127.1', '127.0.1', '0x7f.0.0.1', '0x7f.1', '0x7f000001', '2130706433', '0177.0.0.1', '0177.1', '017700000001', '127.255.255.254']),
    ...c('IPv4 private', ['10.0.0.1', '10.1', '012.0.0.1', '167772161', '172.16.0.1', '0xac100001', '172.31.255.255', '192.168.0.1', '192.168.1', '3232235521', '0300.0250.0.1']),
    ...c('IPv4 link-local (metadata)', ['169.254.169.254', '0xa9fea9fe', '2852039166', '0251.0376.0251.0376', '169.254.0.1']),
    ...c('IPv4 CGNAT', ['100.64.0.1', '1681915905', '0x64400001', '100.127.255.254']),
    ...c('IPv4 unspecified', ['0.0.0.0', '0', '0x0', '00']),
    ...c('IPv6 loopback', ['[::1]', '[0:0:0:0:0:0:0:1]', '[::]']),
    ...c('IPv6 IPv4-mapped / compatible', ['[::ffff:127.0.0.1]', '[::ffff:7f00:1]', '[0:0:0:0:0:ffff:127.0.0.1]', '[::ffff:a9fe:a9fe]', '[::ffff:10.0.0.1]', '[::127.0.0.1]']),
    ...c('IPv6 NAT64 64:ff9b::/96', ['[64:ff9b::127.0.0.1]', '[64:ff9b::7f00:1]', '[64:ff9b::a9fe:a9fe]', '[64:ff9b::a00:1]', '[64:ff9b:1::7f00:1]']),
    ...c('IPv6 6to4 2002::/16', ['[2002:7f00:1::]', '[2002:7f00:1::1]', '[2002:a9fe:a9fe::1]', '[2002:a00:1::]']),
    ...c('IPv6 ULA fc00::/7', ['[fc00::1]', '[fd00::1]', '[fdff:ffff::1]']),
    ...c('IPv6 link-local fe80::/10', ['[fe80::1]', '[febf::1]']),
    ...c('name (system DNS)', ['localhost', 'LOCALHOST', 'localhost.']),
  ];
};

/** What the injected resolver answers: names an attacker controls, pointing inside. */
const PUBLIC = '93.184.216.34';
const NAMES: Record<string, { cls: string; answer: LookupAddress[] }> = {
  'canary.attacker.test': { cls: 'name → loopback', answer: [{ address: '127.0.0.1', family: 4 }] },
  'v6.attacker.test': { cls: 'name → loopback', answer: [{ address: '::1', family: 6 }] },
  'mapped.attacker.test': { cls: 'name → loopback', answer: [{ address: '::ffff:127.0.0.1', family: 6 }] },
  'nat64.attacker.test': { cls: 'name → loopback', answer: [{ address: '64:ff9b::7f00:1', family: 6 }] },
  'ten.attacker.test': { cls: 'name → private', answer: [{ address: '10.0.0.1', family: 4 }] },
  'ula.attacker.test': { cls: 'name → private', answer: [{ address: 'fd00::1', family: 6 }] },
  'metadata.attacker.test': { cls: 'name → link-local', answer: [{ address: '169.254.169.254', family: 4 }] },
  'cgnat.attacker.test': { cls: 'name → CGNAT', answer: [{ address: '100.64.0.1', family: 4 }] },
  // One public and one private answer: the client may pick either, so the name is refused.
  'mixed.attacker.test': { cls: 'name → public + loopback', answer: [{ address: PUBLIC, family: 4 }, { address: '127.0.0.1', family: 4 }] },
};
const REDIRECTOR = 'redirector.test';
const resolverCalls = new Map<string, number>();
/** The injected resolver: NAMES, the redirector (allowlisted, so reachable), and a rebinding name. */
const fakeResolve = (hostname: string): Promise<LookupAddress[]> => {
  const name = hostname.toLowerCase().replace(/\.$/, '');
  const n = (resolverCalls.get(name) ?? 0) + 1;
  resolverCalls.set(name, n);
  if (name === REDIRECTOR) return Promise.resolve([{ address: '127.0.0.1', family: 4 }]);
  // DNS rebinding: public the first time (the check), the canary from then on (the connection).
  if (name.startsWith('rebind')) return Promise.resolve([{ address: n === 1 ? PUBLIC : '127.0.0.1', family: 4 }]);
  const entry = NAMES[name];
  if (!entry) return Promise.reject(Object.assign(new Error(`getaddrinfo ENOTFOUND ${hostname}`), { code: 'ENOTFOUND' }));
  return Promise.resolve(entry.answer);
};

// ---- the service, twice: as wired, and with the injected resolver ---------------------------

interface Service {
  base: string;
  deps: CoreDeps;
  /** POST /token is rate limited (60 a minute per client address): the corpus stays under it. */
  tokenCalls: number;
}
let plain: Service;
let resolved: Service;
let resolvedGuard: GuardedHttp;

async function startService(deps: CoreDeps): Promise<Service> {
  const served = await serve(createTestApp({ deps }));
  closers.push(served.close);
  return { base: served.base, deps, tokenCalls: 0 };
}

const listen = (server: http.Server, host: string, port = 0) =>
  new Promise<number>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve((server.address() as AddressInfo).port));
  });

beforeAll(async () => {
  canary = http.createServer((_req, res) => {
    canaryHits++;
    res.end('canary');
  });
  canaryPort = await listen(canary, '127.0.0.1');
  // The same port on IPv6 loopback, where this machine has it: [::1] URLs would land here.
  canary6 = http.createServer((_req, res) => {
    canaryHits++;
    res.end('canary');
  });
  await listen(canary6, '::1', canaryPort).catch(() => (canary6 = undefined));
  redirector = http.createServer((req, res) => {
    redirectorHits++;
    const to: Record<string, string> = {
      '/to-loopback': `http://127.0.0.1:${canaryPort}/redirected`,
      '/to-short-form': `http://127.1:${canaryPort}/redirected`,
      '/to-v6': `http://[::1]:${canaryPort}/redirected`,
      '/to-name': `http://canary.attacker.test:${canaryPort}/redirected`,
      '/to-metadata': 'http://169.254.169.254/latest/meta-data/',
    };
    const at = (req.url ?? '').replace(/\?.*$/, '');
    const target = to[at.replace(/\/30\d(\.json)?$/, '')];
    const status = Number(/\/(30\d)(\.json)?$/.exec(at)?.[1] ?? 302);
    if (!target) return void res.writeHead(404).end();
    res.writeHead(status, { location: target }).end();
  });
  redirectorPort = await listen(redirector, '127.0.0.1');

  orm = await openTestOrm();
  await seedModels(orm.em.fork(), await loadCatalogFile('config/models.yaml', 50n));
  const env = loadEnv({
    DATA_DIR: path.join(os.tmpdir(), 'mas-test-data'),
    PUBLIC_BASE_URL: 'http://localhost',
    // Nothing exempt: every loopback and private address must be refused.
    INPUT_URL_ALLOWLIST: '',
    RATE_LIMIT_PER_MINUTE: '100000',
    DEMO_COINS: '0',
    API_PRICE_PERCENT: '50',
  });
  wired = wireCore(env, {
    orm,
    logger: silentLogger,
    providers: { local: { kind: 'local' } },
    storage: localDiskStorage(path.join(os.tmpdir(), 'mas-test-storage')),
    signingSecret: 'test-signing-secret-test-signing-secret',
    catalogTtlMs: 0,
  });
  plain = await startService(wired);
  // The same core with the guard on the injected resolver; only the redirector is allowlisted
  // (it stands for a public site: it must be reachable for its redirect to be seen).
  resolvedGuard = createUrlGuard({ allowlist: [REDIRECTOR], lookup: fakeResolve });
  resolved = await startService({ ...wired, urlGuard: resolvedGuard, clientDocuments: new ClientDocuments(resolvedGuard, [REDIRECTOR]) });
});

afterAll(async () => {
  for (const close of closers.splice(0)) await close();
  await wired?.close();
  await orm?.close();
  for (const s of [canary, canary6, redirector]) {
    if (!s) continue;
    s.closeAllConnections();
    await new Promise((r) => s.close(r));
  }
});

// ---- the three entry points -----------------------------------------------------------------

const bearer = (key: string) => ({ authorization: `Bearer ${key}` });

async function funded() {
  const account = await makeAccount(orm, { coins: '100' });
  const key = await makeKey(orm, account.id);
  return { accountId: account.id, key: key.key };
}

async function moneyOf(accountId: string) {
  const em = orm.em.fork();
  const [w] = await em.execute<{ c: string }[]>('select (subscription_micro + purchased_micro)::text as c from wallets where account_id = ?', [accountId]);
  const [l] = await em.execute<{ n: number }[]>('select count(*)::int as n from ledger_entries where account_id = ?', [accountId]);
  const [g] = await em.execute<{ n: number }[]>('select count(*)::int as n from generations where account_id = ?', [accountId]);
  const [h] = await em.execute<{ n: number }[]>("select count(*)::int as n from holds where account_id = ? and status = 'open'", [accountId]);
  const [f] = await em.execute<{ n: number }[]>('select count(*)::int as n from files where account_id = ?', [accountId]);
  return { coins: w!.c, ledgerRows: l!.n, generations: g!.n, openHolds: h!.n, files: f!.n };
}

/** POST /api/v1/generations with the URL as a media input: refused means 400 invalid_url, its message naming the field. */
async function viaGenerations(svc: Service, key: string, url: string): Promise<{ refused: boolean; detail: string }> {
  const res = await fetch(`${svc.base}/api/v1/generations`, {
    method: 'POST',
    headers: { ...bearer(key), 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'mas/image-demo', prompt: 'a fox', inputs: { reference_image: url } }),
  });
  const body = (await res.json()) as { error?: { code?: string; message?: string } };
  const refused = res.status === 400 && body.error?.code === 'invalid_url' && (body.error.message ?? '').includes("'inputs.reference_image'");
  return { refused, detail: `${res.status} ${JSON.stringify(body).slice(0, 300)}` };
}

async function mcpClient(svc: Service, key: string): Promise<Client> {
  const client = new Client({ name: 'ssrf-test', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(`${svc.base}/api/v1/mcp`), { requestInit: { headers: bearer(key) } }));
  return client;
}

/** MCP upload_file with the URL: refused means isError with the url field named. */
async function viaUploadFile(client: Client, url: string): Promise<{ refused: boolean; detail: string }> {
  const r = (await client.callTool({ name: 'upload_file', arguments: { url } })) as CallToolResult;
  const text = r.content.flatMap((c) => (c.type === 'text' ? [c.text] : [])).join('\n');
  return { refused: r.isError === true && /"code":"invalid_url"/.test(text), detail: text.slice(0, 300) };
}

/**
 * The client id as a metadata document URL, in its normal form (a URL not in normal form is
 * refused before any fetch: this corpus is for the guard). GET /authorize (no session needed
 * to look the client up) answers an error page; POST /token answers invalid_client (its own
 * document URL, `?t`, so that the failure cached for the first is not what answers; the first
 * 50 URLs of each service only, under the endpoint's rate limit).
 */
async function viaOAuth(svc: Service, clientId: string): Promise<{ refused: boolean; detail: string }> {
  const q = new URLSearchParams({ client_id: clientId, response_type: 'code', redirect_uri: 'http://127.0.0.1:9/callback', code_challenge: 'a'.repeat(43), code_challenge_method: 'S256', state: 's' });
  const page = await fetch(`${svc.base}/authorize?${q.toString()}`, { redirect: 'manual' });
  const pageText = await page.text();
  const authorizeRefused = page.status === 400 && page.headers.get('location') === null && /cannot be used/.test(pageText);
  if (svc.tokenCalls >= 50) return { refused: authorizeRefused, detail: `authorize ${page.status}` };
  svc.tokenCalls++;
  const token = await fetch(`${svc.base}/token`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ grant_type: 'authorization_code', code: 'x', code_verifier: 'y'.repeat(43), client_id: `${clientId}?t`, redirect_uri: 'http://127.0.0.1:9/callback' }).toString(),
  });
  const tokenBody = (await token.json().catch(() => ({}))) as { error?: string };
  const tokenRefused = token.status >= 400 && token.status < 500 && tokenBody.error === 'invalid_client';
  return { refused: authorizeRefused && tokenRefused, detail: `authorize ${page.status}; token ${token.status} ${JSON.stringify(tokenBody)}` };
}

const mediaUrl = (host: string, n: number, port = canaryPort) => `http://${host}:${port}/ssrf/${n}.png`;
const clientIdUrl = (host: string, n: number, port = canaryPort) => new URL(`https://${host}:${port}/clients/${n}.json`).href;

const failures: string[] = [];
const expectRefused = (entry: string, cls: string, url: string, r: { refused: boolean; detail: string }) => {
  record(entry, cls, r.refused);
  if (!r.refused) failures.push(`${entry} ${cls} ${url}: ${r.detail}`);
};

describe('SSRF: every client-given URL aimed inside is refused, and the canary is never reached', () => {
  beforeEach(() => {
    failures.length = 0;
  });

  it('the literal-address corpus, through POST /generations, MCP upload_file and the OAuth client id', async () => {
    const { accountId, key } = await funded();
    const before = await moneyOf(accountId);
    const client = await mcpClient(plain, key);
    for (const [n, { cls, host }] of literalCorpus().entries()) {
      const url = mediaUrl(host, n);
      expectRefused('POST /api/v1/generations', cls, url, await viaGenerations(plain, key, url));
      expectRefused('MCP upload_file', cls, url, await viaUploadFile(client, url));
      expectRefused('OAuth client_id document', cls, clientIdUrl(host, n), await viaOAuth(plain, clientIdUrl(host, n)));
    }
    await client.close();
    expect(failures).toEqual([]);
    // Nothing charged, held, made or stored.
    expect(await moneyOf(accountId)).toEqual(before);
    expect(canaryHits).toBe(0);
  });

  it('names that resolve to private addresses (the injected resolver), through the same three surfaces', async () => {
    const { accountId, key } = await funded();
    const before = await moneyOf(accountId);
    const client = await mcpClient(resolved, key);
    let n = 1000;
    for (const [name, { cls }] of Object.entries(NAMES)) {
      const url = mediaUrl(name, ++n);
      expectRefused('POST /api/v1/generations', cls, url, await viaGenerations(resolved, key, url));
      expectRefused('MCP upload_file', cls, url, await viaUploadFile(client, url));
      expectRefused('OAuth client_id document', cls, clientIdUrl(name, n), await viaOAuth(resolved, clientIdUrl(name, n)));
      // The guard itself, both halves: the check when a URL is accepted, and the fetch.
      const check = await resolvedGuard.check(url).then(() => false, () => true);
      const fetched = await resolvedGuard.fetch(url).then(() => false, (err: Error) => /private/.test(err.message));
      expectRefused('guard check + fetch', cls, url, { refused: check && fetched, detail: `check refused ${check}, fetch refused ${fetched}` });
    }
    await client.close();
    expect(failures).toEqual([]);
    expect(await moneyOf(accountId)).toEqual(before);
    // The resolver was asked: the refusals come from its answers, not from a parse error.
    for (const name of Object.keys(NAMES)) expect(resolverCalls.get(name), name).toBeGreaterThan(0);
    expect(canaryHits).toBe(0);
  });

  it('redirects to private addresses are not followed: a reachable site that answers 30x toward the canary', async () => {
    const { accountId, key } = await funded();
    const before = await moneyOf(accountId);
    const client = await mcpClient(resolved, key);
    const hitsBefore = redirectorHits;
    const tokensBefore = resolved.tokenCalls;
    let tried = 0;
    for (const target of ['/to-loopback', '/to-short-form', '/to-v6', '/to-name', '/to-metadata']) {
      for (const status of [301, 302, 303, 307, 308]) {
        tried++;
        const url = `http://${REDIRECTOR}:${redirectorPort}${target}/${status}`;
        // The guard: the site passes the check (allowlisted here, standing for a public host), its redirect is refused.
        await resolvedGuard.check(url);
        const fetched = await resolvedGuard.fetch(url).then(() => 'fetched', (err: Error) => err.message);
        expectRefused('guard fetch', 'redirect → private', url, { refused: /redirect/.test(fetched), detail: fetched });
        expectRefused('MCP upload_file', 'redirect → private', url, await viaUploadFile(client, url));
        const doc = `${url}.json`;
        expectRefused('OAuth client_id document', 'redirect → private', doc, await viaOAuth(resolved, doc));
      }
    }
    await client.close();
    expect(failures).toEqual([]);
    // The site was reached every time (guard, upload_file, authorize: 3 per URL, and each token call); its target never.
    expect(redirectorHits - hitsBefore).toBe(tried * 3 + (resolved.tokenCalls - tokensBefore));
    expect(await moneyOf(accountId)).toEqual(before);
    expect(canaryHits).toBe(0);
  });

  it('DNS rebinding: a name public when checked and private when connected to is refused at the connection', async () => {
    const rounds = 10;
    let checkedPublic = 0;
    for (let i = 0; i < rounds; i++) {
      const name = `rebind-${i}.attacker.test`;
      const url = mediaUrl(name, 2000 + i);
      // The check sees the public answer and accepts the URL (as POST /generations would) …
      await resolvedGuard.check(url);
      checkedPublic++;
      // … the fetch resolves again, gets the canary's address, and refuses to connect.
      const fetched = await resolvedGuard.fetch(url, { timeoutMs: 5_000 }).then(() => 'fetched', (err: Error) => err.message);
      expectRefused('guard check then fetch', 'DNS rebinding', url, { refused: /private/.test(fetched), detail: fetched });
      expect(resolverCalls.get(name)).toBe(2);
    }
    // Through POST /generations: accepted at check time (public), so the job's own fetch is the
    // guard's fetch above; and through upload_file, whose only lookup is the connection's.
    const { key } = await funded();
    const client = await mcpClient(resolved, key);
    for (let i = 0; i < rounds; i++) {
      const name = `rebind-upload-${i}.attacker.test`;
      await resolvedGuard.check(mediaUrl(name, 3000 + i)); // first answer (public) spent on the check
      expectRefused('MCP upload_file', 'DNS rebinding', name, await viaUploadFile(client, mediaUrl(name, 3000 + i)));
    }
    await client.close();
    expect(checkedPublic).toBe(rounds);
    expect(failures).toEqual([]);
    expect(canaryHits).toBe(0);
  });

  it('the canary works: an allowlisted guard reaches it (so 0 hits above means refused, not unreachable)', async () => {
    corpusHits = canaryHits;
    expect(corpusHits).toBe(0);
    const open = createUrlGuard({ allowlist: ['127.0.0.1'] });
    expect(Buffer.from(await open.fetch(`http://127.0.0.1:${canaryPort}/control`)).toString()).toBe('canary');
    expect(canaryHits).toBe(1);
  });
});

afterAll(async () => {
  const classes = [...new Set([...results.values()].flatMap((m) => [...m.keys()]))];
  const rows: (string | number)[][] = [];
  for (const [entry, byClass] of results) {
    for (const cls of classes) {
      const cell = byClass.get(cls);
      if (cell) rows.push([entry, cls, `${cell[0]}/${cell[1]}`]);
    }
  }
  const total = [...results.values()].flatMap((m) => [...m.values()]).reduce((a, [r, t]) => [a[0] + r, a[1] + t], [0, 0]);
  await reportSection(
    'ssrf',
    7,
    [
      '## 7. SSRF corpus',
      '',
      `A canary HTTP server on 127.0.0.1${canary6 ? ' and [::1]' : ''} (one port) counted the requests that reached it; the service was wired as the processes wire it, with an empty INPUT_URL_ALLOWLIST. ` +
        'Names, redirects and DNS rebinding go through the URL guard\'s injected resolver. The OAuth row counts a URL refused when both GET /authorize (error page, no redirect) and POST /token (invalid_client) refused it.',
      '',
      `Refused ${total[0]}/${total[1]}; canary hits after the corpus: **${corpusHits ?? `${canaryHits} (the run stopped early)`}** (a control fetch through an allowlisting guard reached it once, so it was listening).`,
      '',
      table(['Entry point', 'Address class', 'Refused'], rows),
    ].join('\n'),
  );
});
