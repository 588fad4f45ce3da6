import { createHash, randomBytes } from 'node:crypto';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CallToolResultSchema, type CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomBase62 } from '../../core/ids.ts';
import { parseCoins } from '../../core/money/coins.ts';
import { credit } from '../../core/money/wallet.ts';
import { makeKey } from '../support/db.ts';
import { bearer, getJson } from '../support/http.ts';
import { startJobHarness, type JobHarness } from '../support/jobs.ts';
import { reportSection, table } from './support/results.ts';
import { csrfOf, hiddenFields, signUpPerson, type Person } from '../support/cookie-browser.ts';

/**
 * Issue 20, part 6: the isolation matrix (BOLA). Two accounts, A and B, made through the real
 * sign-up form. A gets every object that has an id: a chat completion, two media jobs (one succeeded, one still
 * running), a file, an API key, an app connection made by the real OAuth flow, ledger entries,
 * and the signed result links of its job and file. Then B, on every surface with its own
 * credentials (REST with its key; MCP with its key, its connector link and its OAuth access
 * token; the account pages with its session and a valid CSRF token; the GraphQL admin API with
 * each of those non-admin credentials), asks for each of A's objects by id. Every answer must
 * be a refusal carrying none of A's data, and must equal the answer for a made-up id of the
 * same shape (the id echoed aside). Afterwards A's objects are as they were.
 */
let h: JobHarness;
let base: string;
beforeAll(async () => {
  h = await startJobHarness({ publicBaseUrlIsServed: true });
  base = h.base;
});
afterAll(async () => {
  await h?.close();
});

const PNG = Buffer.from('89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c4890000000d4944415478da63f8cfc0f01f0005000201a5b2b1a30000000049454e44ae426082', 'hex');
const CALLBACK = 'http://127.0.0.1:47123/callback';
const mcpResource = () => `${base}/api/v1/mcp`;

// ---------------------------------------------------------------------------------------------
// The people: signed up through the form, in a cookie-jar browser (test/support/cookie-browser.ts).

/** A person signed up through the form, with 100 coins. */
async function signUp(tag: string): Promise<Person> {
  const person = await signUpPerson(base, h.orm, tag);
  await credit(h.orm.em.fork(), { accountId: person.accountId, kind: 'topup', amount: parseCoins('100'), reference: `fixture-${tag}`, idempotencyKey: `isolation-topup:${person.accountId}`, description: 'Top-up' });
  return person;
}

/** The OAuth flow as an MCP client runs it: registration, consent (allow), code for tokens. */
async function connectApp(person: Person, clientName: string): Promise<{ access: string; connectionId: string }> {
  const reg = await getJson(`${base}/register`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ redirect_uris: [CALLBACK], client_name: clientName, token_endpoint_auth_method: 'none' }),
  });
  expect(reg.status, JSON.stringify(reg.body)).toBe(201);
  const clientId = reg.body.client_id as string;
  const verifier = randomBytes(48).toString('base64url');
  const challenge = createHash('sha256').update(verifier).digest('base64url');
  const q = new URLSearchParams({ client_id: clientId, response_type: 'code', code_challenge: challenge, code_challenge_method: 'S256', resource: mcpResource(), redirect_uri: CALLBACK, state: 'st' });
  const consent = await person.browser.fetch(`/authorize?${q.toString()}`);
  const page = await consent.text();
  expect(consent.status, page.slice(0, 300)).toBe(200);
  const allowed = await person.browser.post('/authorize', { ...hiddenFields(page), _csrf: csrfOf(page)!, decision: 'allow', spend_cap_coins: '', lifetime: '30' });
  expect(allowed.status).toBe(303);
  const code = new URL(allowed.headers.get('location')!).searchParams.get('code')!;
  const tokens = await getJson(`${base}/token`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ grant_type: 'authorization_code', code, code_verifier: verifier, client_id: clientId, redirect_uri: CALLBACK, resource: mcpResource() }),
  });
  expect(tokens.status, JSON.stringify(tokens.body)).toBe(200);
  const [row] = await h.orm.em.fork().execute<{ id: string }[]>('select id from app_connections where account_id = ? and client_id = ?', [person.accountId, clientId]);
  return { access: tokens.body.access_token as string, connectionId: row!.id };
}

async function mcpClient(transport: StreamableHTTPClientTransport): Promise<Client> {
  const client = new Client({ name: 'isolation', version: '1.0.0' });
  await client.connect(transport);
  return client;
}
const withBearer = (token: string) => new StreamableHTTPClientTransport(new URL(mcpResource()), { requestInit: { headers: { Authorization: `Bearer ${token}` } } });
const viaLink = (key: string) => new StreamableHTTPClientTransport(new URL(`${mcpResource()}/${key}`));

// ---------------------------------------------------------------------------------------------
// The matrix.

const OBJECTS = ['generation', 'file', 'chat completion', 'API key', 'app connection', 'ledger entry', 'result link'] as const;
const SURFACES = ['REST (B key)', 'MCP (B key)', 'MCP (B connector link)', 'MCP (B OAuth token)', 'Account pages (B session)', 'GraphQL admin (B credentials)'] as const;
type ObjectName = (typeof OBJECTS)[number];
type Surface = (typeof SURFACES)[number];

/** One answer, as text (JSON, HTML or a tool result), with whether it is a refusal. */
interface Answer {
  status: number;
  text: string;
  refused: boolean;
}

interface Probe {
  object: ObjectName;
  surface: Surface;
  name: string;
  real: string;
  madeUp: string;
  /**
   * An identifier B may use that answers with B's own things by design, never a lookup of A's:
   * a list cursor (wallet history's `starting_after=le_N` is a position in B's own list) or an
   * idempotency key (scoped to the account: B's retry makes B's own file). It passes when the
   * answer carries none of A's data and equals the made-up id's.
   */
  own?: boolean;
  run(id: string): Promise<Answer>;
}

interface Outcome {
  probe: Probe;
  real: Answer;
  madeUp: Answer;
  leak: string | null;
  mismatch: boolean;
}

async function http(url: string, init: RequestInit = {}): Promise<Answer> {
  const res = await fetch(url, { ...init, redirect: 'manual' });
  const text = await res.text();
  return { status: res.status, text, refused: res.status >= 400 && res.status < 500 };
}

async function tool(client: Client, name: string, args: Record<string, unknown>): Promise<Answer> {
  try {
    const r = (await client.callTool({ name, arguments: args })) as CallToolResult;
    const json = r.content.flatMap((c) => (c.type === 'text' && c.text.startsWith('{"error"') ? [c.text] : []))[0];
    const status = json ? (JSON.parse(json) as { status: number }).status : 200;
    return { status, text: JSON.stringify({ content: r.content, structuredContent: r.structuredContent ?? null }), refused: r.isError === true && r.structuredContent === undefined };
  } catch (err) {
    // A JSON-RPC error (or the door's refusal) is a refusal too.
    const e = err as { code?: number; message?: string };
    return { status: typeof e.code === 'number' ? e.code : 0, text: `jsonrpc ${e.code} ${e.message}`, refused: true };
  }
}

/** A made-up id of the same shape as `id`: same prefix, same length, same alphabet, and in no table. */
/** A tasks/* request (MCP tasks, adapters/mcp/tasks.ts): its answer, or its JSON-RPC error as a refusal. */
async function taskRequest(run: () => Promise<unknown>): Promise<Answer> {
  try {
    return { status: 200, text: JSON.stringify(await run()), refused: false };
  } catch (err) {
    const e = err as { code?: number; message?: string };
    return { status: typeof e.code === 'number' ? e.code : 0, text: `jsonrpc ${e.code} ${e.message}`, refused: true };
  }
}

function madeUpLike(id: string): string {
  const cut = id.indexOf('_') + 1;
  const rest = id.slice(cut);
  const fresh = /^[0-9a-f]+$/.test(rest) ? randomBytes(rest.length).toString('hex').slice(0, rest.length) : randomBase62(rest.length);
  return `${id.slice(0, cut)}${fresh}`;
}

describe('the isolation matrix', () => {
  it("B reaches none of A's objects on any surface, and A's ids answer as made-up ones", { timeout: 180_000 }, async () => {
    const started = Date.now();

    // --- B first: all of B's ledger entries come before A's, so that a cursor at A's entry and
    // one at a made-up (higher) entry are the same position in B's list.
    const b = await signUp('iso-b');
    const bKey = (await makeKey(h.orm, b.accountId, 'B key')).key;
    const bApp = await connectApp(b, 'B app');
    const bJob = await getJson(`${base}/api/v1/generations`, {
      method: 'POST',
      headers: { ...bearer(bKey), 'content-type': 'application/json', prefer: 'wait=30' },
      body: JSON.stringify({ model: 'mas/image-demo', prompt: 'B job', settings: { size: 128 } }),
    });
    expect(bJob.body.status, JSON.stringify(bJob.body)).toBe('succeeded');
    const bForm = new FormData();
    bForm.append('file', new Blob([PNG]), 'b.png');
    const bFile = await getJson(`${base}/api/v1/files`, { method: 'POST', headers: bearer(bKey), body: bForm });
    expect(bFile.status).toBe(200);
    const bJobLink = new URL(bJob.body.output.url as string);
    const bFileLink = new URL(bFile.body.url as string);

    // --- A, with a marker in everything it owns, to find in any answer.
    const a = await signUp('iso-a');
    const MARK = `secret-of-A-${randomBytes(6).toString('hex')}`;
    const aKey = await makeKey(h.orm, a.accountId, `${MARK} key`);
    const aApp = await connectApp(a, `${MARK} app`);
    const aDone = await getJson(`${base}/api/v1/generations`, {
      method: 'POST',
      headers: { ...bearer(aKey.key), 'content-type': 'application/json', prefer: 'wait=30' },
      body: JSON.stringify({ model: 'mas/image-demo', prompt: `${MARK} done`, settings: { size: 128 } }),
    });
    expect(aDone.body.status, JSON.stringify(aDone.body)).toBe('succeeded');
    const aRunning = await getJson(`${base}/api/v1/generations`, {
      method: 'POST',
      headers: { ...bearer(aKey.key), 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'mas/image-demo', prompt: `${MARK} running`, settings: { size: 128, delay_ms: 240_000 } }),
    });
    expect(aRunning.status).toBe(202);
    const aForm = new FormData();
    aForm.append('file', new Blob([PNG]), `${MARK}.png`);
    const aUploadKey = `upload-${randomBytes(12).toString('hex')}`;
    const aFile = await getJson(`${base}/api/v1/files`, { method: 'POST', headers: { ...bearer(aKey.key), 'idempotency-key': aUploadKey }, body: aForm });
    expect(aFile.status).toBe(200);
    const aChat = await getJson(`${base}/api/v1/chat/completions`, {
      method: 'POST',
      headers: { ...bearer(aKey.key), 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'mas/echo', messages: [{ role: 'user', content: `${MARK} chat` }], max_tokens: 16 }),
    });
    expect(aChat.status, JSON.stringify(aChat.body)).toBe(200);
    const aChatId = aChat.body.id as string;
    const aHistory = await getJson(`${base}/api/v1/wallet/history`, { headers: bearer(aKey.key) });
    expect(aHistory.status).toBe(200);
    const aLedger = (aHistory.body.data as { id: string }[]).map((r) => r.id);
    expect(aLedger.length).toBeGreaterThanOrEqual(2);
    const aJobLink = new URL(aDone.body.output.url as string);
    const aFileLink = new URL(aFile.body.url as string);

    const aJobIds = [aDone.body.id as string, aRunning.body.id as string];
    const aFileId = aFile.body.id as string;
    const aEntry = aLedger[0]!;
    // Everything of A's that must never show in an answer to B (the probed id aside, which an error may echo).
    const aSecrets = [MARK, aUploadKey, a.email, a.accountId, aKey.key, aKey.key.slice(0, 12), aApp.access, aJobLink.searchParams.get('signature')!, aFileLink.searchParams.get('signature')!, ...aJobIds, aFileId, aChatId, aKey.id, aApp.connectionId, ...aLedger];

    const state = async () => {
      const em = h.orm.em.fork();
      const [w] = await em.execute<{ a: string; b: string }[]>(
        `select (select (subscription_micro + purchased_micro + held_micro)::text from wallets where account_id = ?) as a,
                (select (subscription_micro + purchased_micro + held_micro)::text from wallets where account_id = ?) as b`,
        [a.accountId, b.accountId],
      );
      const [n] = await em.execute<{ a: number; b: number }[]>(
        `select count(*) filter (where account_id = ?)::int as a, count(*) filter (where account_id = ?)::int as b from ledger_entries where account_id in (?, ?)`,
        [a.accountId, b.accountId, a.accountId, b.accountId],
      );
      return { wallets: w!, entries: n! };
    };
    const before = await state();

    // Made-up ids of each shape, checked to exist nowhere.
    const [maxEntry] = await h.orm.em.fork().execute<{ m: string }[]>('select max(id)::text as m from ledger_entries');
    const made = {
      job: madeUpLike(aJobIds[0]!),
      file: madeUpLike(aFileId),
      key: madeUpLike(aKey.id),
      app: madeUpLike(aApp.connectionId),
      entry: `le_${BigInt(maxEntry!.m) + 1_000_000_000n}`,
      chat: `chatcmpl-${randomBase62(aChatId.length - 'chatcmpl-'.length)}`,
    };
    for (const [table_, id] of [['generations', made.job], ['files', made.file], ['api_keys', made.key], ['app_connections', made.app], ['completion_records', made.chat]] as const) {
      expect(await h.orm.em.fork().execute(`select 1 from ${table_} where id = ?`, [id])).toHaveLength(0);
    }

    // --- B's clients on every MCP door.
    const mcpKey = await mcpClient(withBearer(bKey));
    const mcpLink = await mcpClient(viaLink(bKey));
    const mcpOAuth = await mcpClient(withBearer(bApp.access));
    const mcp: [Surface, Client][] = [
      ['MCP (B key)', mcpKey],
      ['MCP (B connector link)', mcpLink],
      ['MCP (B OAuth token)', mcpOAuth],
    ];

    // --- The probes.
    const probes: Probe[] = [];
    const add = (object: ObjectName, surface: Surface, name: string, real: string, madeUp: string, run: (id: string) => Promise<Answer>, own = false) =>
      probes.push({ object, surface, name, real, madeUp, run, own });
    const rest = (path: string, init: RequestInit = {}) => http(`${base}/api/v1${path}`, { ...init, headers: { ...bearer(bKey), ...(init.headers as Record<string, string>) } });
    const json = { 'content-type': 'application/json' };

    // Ledger entries first: nothing B does below may add to B's list before its cursor probes.
    add('ledger entry', 'REST (B key)', 'GET /wallet/history?starting_after', aEntry, made.entry, (id) => rest(`/wallet/history?starting_after=${id}`), true);
    add('ledger entry', 'Account pages (B session)', 'GET /account/usage?starting_after', aEntry, made.entry, (id) => b.browser.fetch(`/account/usage?starting_after=${id}`).then(async (r) => ({ status: r.status, text: await r.text(), refused: r.status >= 400 && r.status < 500 })), true);

    for (const [i, job] of aJobIds.entries()) {
      const which = i === 0 ? 'succeeded job' : 'running job';
      add('generation', 'REST (B key)', `GET /generations/:id (${which})`, job, made.job, (id) => rest(`/generations/${id}`));
      add('generation', 'REST (B key)', `POST /generations/:id/cancel (${which})`, job, made.job, (id) => rest(`/generations/${id}/cancel`, { method: 'POST' }));
      add('generation', 'REST (B key)', `DELETE /generations/:id (${which})`, job, made.job, (id) => rest(`/generations/${id}`, { method: 'DELETE' }));
      for (const [surface, client] of mcp) add('generation', surface, `get_generation (${which})`, job, made.job, (id) => tool(client, 'get_generation', { id }));
      // A job id as a list cursor: only B's own jobs are a position in B's list; A's is as unknown as a made-up one.
      add('generation', 'REST (B key)', `GET /generations?starting_after (${which})`, job, made.job, (id) => rest(`/generations?starting_after=${id}`));
      for (const [surface, client] of mcp) add('generation', surface, `list_generations starting_after (${which})`, job, made.job, (id) => tool(client, 'list_generations', { starting_after: id }));
      // A task is its job (taskId = job id): the tasks/* requests of the 2025-11-25 revision.
      for (const [surface, client] of mcp) {
        add('generation', surface, `tasks/get (${which})`, job, made.job, (id) => taskRequest(() => client.experimental.tasks.getTask(id)));
        add('generation', surface, `tasks/result (${which})`, job, made.job, (id) => taskRequest(() => client.experimental.tasks.getTaskResult(id, CallToolResultSchema)));
        add('generation', surface, `tasks/cancel (${which})`, job, made.job, (id) => taskRequest(() => client.experimental.tasks.cancelTask(id)));
        add('generation', surface, `tasks/list with the job as cursor (${which})`, job, made.job, (id) => taskRequest(() => client.experimental.tasks.listTasks(id)));
      }
    }
    add('file', 'REST (B key)', 'GET /files/:id', aFileId, made.file, (id) => rest(`/files/${id}`));
    add('chat completion', 'REST (B key)', 'GET /chat/completions/:id', aChatId, made.chat, (id) => rest(`/chat/completions/${id}`));
    add('file', 'REST (B key)', 'DELETE /files/:id', aFileId, made.file, (id) => rest(`/files/${id}`, { method: 'DELETE' }));
    add('file', 'REST (B key)', 'POST /generations with the file as input', aFileId, made.file, (id) =>
      rest('/generations', { method: 'POST', headers: json, body: JSON.stringify({ model: 'mas/image-demo', settings: { size: 128 }, inputs: { reference_image: id } }) }),
    );
    // A's upload's Idempotency-Key, with the same bytes under another name: a key shared across
    // accounts would replay A's file, or refuse with a conflict that a made-up key never gets.
    const ownFile = (status: number, file: { id?: string; url?: string } | undefined, replayed: boolean | null): Answer => ({
      status,
      text: JSON.stringify({ replayed, isA: file?.id === aFileId, fields: Object.keys(file ?? {}).sort() }),
      refused: false,
    });
    add('file', 'REST (B key)', "POST /files with A's Idempotency-Key", aUploadKey, `upload-${randomBytes(12).toString('hex')}`, async (key) => {
      const form = new FormData();
      form.append('file', new Blob([PNG]), 'b-retry.png');
      const r = await getJson(`${base}/api/v1/files`, { method: 'POST', headers: { ...bearer(bKey), 'idempotency-key': key }, body: form });
      return ownFile(r.status, r.body as { id?: string }, r.headers.get('idempotent-replayed') === 'true');
    }, true);
    for (const [surface, client] of mcp) {
      add('file', surface, "upload_file with A's idempotency_key", aUploadKey, `upload-${randomBytes(12).toString('hex')}`, async (key) => {
        const r = (await client.callTool({ name: 'upload_file', arguments: { content: PNG.toString('base64'), filename: 'b-retry.png', idempotency_key: key } })) as CallToolResult;
        return ownFile(r.isError ? 400 : 200, r.structuredContent as { id?: string } | undefined, null);
      }, true);
    }
    for (const [surface, client] of mcp) {
      add('file', surface, 'generate with the file as input', aFileId, made.file, (id) => tool(client, 'generate', { model: 'mas/image-demo', settings: { size: 128 }, inputs: { reference_image: id }, wait_seconds: 0 }));
    }

    // Result links: the id with no signature, with B's own valid link's expiry and signature, with
    // A's expiry and a forged signature, and with the signature of A's link of the other kind.
    const forged = randomBytes(32).toString('base64url').slice(0, 43);
    const linkVariants = (kind: 'generation' | 'file', own: URL, theirs: URL, otherKind: URL): [string, (id: string) => string][] => {
      const path = (id: string) => (kind === 'generation' ? `/generations/${id}/output` : `/files/${id}/content`);
      return [
        ['no signature', (id) => path(id)],
        ["B's expiry and signature", (id) => `${path(id)}${own.search}`],
        ['forged signature', (id) => `${path(id)}?expires=${theirs.searchParams.get('expires')}&signature=${forged}`],
        ['signature of the other kind', (id) => `${path(id)}${otherKind.search}`],
      ];
    };
    for (const [label, url] of linkVariants('generation', bJobLink, aJobLink, aFileLink)) {
      add('result link', 'REST (B key)', `GET /generations/:id/output, ${label}`, aJobIds[0]!, made.job, (id) => rest(url(id)));
    }
    for (const [label, url] of linkVariants('file', bFileLink, aFileLink, aJobLink)) {
      add('result link', 'REST (B key)', `GET /files/:id/content, ${label}`, aFileId, made.file, (id) => rest(url(id)));
    }

    // The account pages, with B's session and a valid CSRF token for it.
    const bCsrf = csrfOf(await (await b.browser.fetch('/account/keys')).text())!;
    expect(bCsrf).toBeTruthy();
    const page = async (res: Promise<Response>): Promise<Answer> => {
      const r = await res;
      return { status: r.status, text: await r.text(), refused: r.status >= 400 && r.status < 500 };
    };
    add('API key', 'Account pages (B session)', 'GET /account/keys/:id/revoke', aKey.id, made.key, (id) => page(b.browser.fetch(`/account/keys/${id}/revoke`)));
    add('API key', 'Account pages (B session)', 'POST /account/keys/:id/revoke', aKey.id, made.key, (id) => page(b.browser.post(`/account/keys/${id}/revoke`, { _csrf: bCsrf })));
    add('app connection', 'Account pages (B session)', 'POST /account/apps/:id/revoke', aApp.connectionId, made.app, (id) => page(b.browser.post(`/account/apps/${id}/revoke`, { _csrf: bCsrf })));

    // The GraphQL admin API with every non-admin credential of B's.
    const credentials: [string, Record<string, string>][] = [
      ["B's API key", bearer(bKey)],
      ["B's session cookie", { cookie: `mas_session=${b.session}` }],
      ["B's session as a bearer", bearer(b.session)],
      ["B's OAuth access token", bearer(bApp.access)],
    ];
    const gqlQueries: [ObjectName, string, string, string, (id: string) => Record<string, unknown>][] = [
      ['generation', 'query generation', aJobIds[0]!, made.job, (id) => ({ query: 'query($id: ID!) { generation(id: $id) { id prompt output { url } } }', variables: { id } })],
      ['generation', 'mutation cancelGeneration', aJobIds[1]!, made.job, (id) => ({ query: 'mutation($id: ID!) { cancelGeneration(id: $id) { id } }', variables: { id } })],
      ['file', 'query files(account)', aFileId, made.file, () => ({ query: 'query($a: ID) { files(account: $a) { edges { node { id } } } }', variables: { a: a.accountId } })],
      ['API key', 'query apiKey', aKey.id, made.key, (id) => ({ query: 'query($id: ID!) { apiKey(id: $id) { id name } }', variables: { id } })],
      ['API key', 'mutation revokeKey', aKey.id, made.key, (id) => ({ query: 'mutation($id: ID!) { revokeKey(id: $id) { id } }', variables: { id } })],
      ['app connection', 'mutation revokeAppConnection', aApp.connectionId, made.app, (id) => ({ query: 'mutation($id: ID!) { revokeAppConnection(id: $id) { __typename } }', variables: { id } })],
      ['ledger entry', 'query ledgerEntries(reference)', aEntry, made.entry, (id) => ({ query: 'query($r: String) { ledgerEntries(filter: { reference: $r }) { edges { node { id } } } }', variables: { r: id } })],
    ];
    for (const [credential, headers] of credentials) {
      for (const [object, name, real, madeUp, body] of gqlQueries) {
        add(object, 'GraphQL admin (B credentials)', `${name} with ${credential}`, real, madeUp, async (id) => {
          const answer = await http(`${base}/admin/graphql`, { method: 'POST', headers: { ...json, ...headers }, body: JSON.stringify(body(id)) });
          // Refused at the door: 401 and no data at all.
          return { ...answer, refused: answer.status === 401 && !/"data"/.test(answer.text) };
        });
      }
    }

    // --- Run them: each with A's real id, then with the made-up one. A secret is found as a whole
    // token (so that A's `le_12` is not found inside B's `le_123`, nor in a random signature).
    const secretIn = (secret: string, text: string) => new RegExp(`(?<![A-Za-z0-9_-])${secret.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}(?![A-Za-z0-9])`).test(text);
    const normalize = (text: string, id: string) => text.split(id).join('<id>').replace(/name="_csrf" value="[^"]+"/g, 'name="_csrf" value="<csrf>"');
    const outcomes: Outcome[] = [];
    for (const probe of probes) {
      const real = await probe.run(probe.real);
      const madeUp = await probe.run(probe.madeUp);
      const realText = normalize(real.text, probe.real);
      const found = aSecrets.find((s) => secretIn(s, realText));
      const leak = found !== undefined ? `contains A's data (${found === MARK ? 'a marker' : found.slice(0, 8)}…)` : !real.refused && !probe.own ? `not a refusal (${real.status})` : null;
      const mismatch = real.status !== madeUp.status || realText !== normalize(madeUp.text, probe.madeUp);
      outcomes.push({ probe, real, madeUp, leak, mismatch });
    }
    await Promise.all(mcp.map(([, c]) => c.close()));

    // --- A's objects are as they were, and B was charged nothing.
    const after = await state();
    const aGet = (path: string) => getJson(`${base}/api/v1${path}`, { headers: bearer(aKey.key) });
    const [aKeyRow] = await h.orm.em.fork().execute<{ revoked_at: Date | null }[]>('select revoked_at from api_keys where id = ?', [aKey.id]);
    const [aAppRow] = await h.orm.em.fork().execute<{ revoked_at: Date | null; key_revoked_at: Date | null }[]>(
      'select c.revoked_at, k.revoked_at as key_revoked_at from app_connections c join api_keys k on k.id = c.key_id where c.id = ?',
      [aApp.connectionId],
    );
    const aAppMcp = await mcpClient(withBearer(aApp.access));
    const aAppBalance = (await aAppMcp.callTool({ name: 'get_balance', arguments: {} })) as CallToolResult;
    await aAppMcp.close();
    const unchanged: [string, boolean][] = [
      ["A's succeeded job still succeeded, its link still served", (await aGet(`/generations/${aJobIds[0]}`)).body.status === 'succeeded' && (await fetch(aJobLink)).status === 200],
      ["A's running job not canceled", ['queued', 'running'].includes((await aGet(`/generations/${aJobIds[1]}`)).body.status as string)],
      ["A's file present, its link still served", (await aGet(`/files/${aFileId}`)).status === 200 && (await fetch(aFileLink)).status === 200],
      ["A's key not revoked, and works", aKeyRow!.revoked_at === null && (await aGet('/balance')).status === 200],
      ["A's app connection active, its token works", aAppRow!.revoked_at === null && aAppRow!.key_revoked_at === null && aAppBalance.isError !== true],
      ["A's wallet and ledger unchanged", after.wallets.a === before.wallets.a && after.entries.a === before.entries.a],
      ['B charged nothing, no ledger entry added', after.wallets.b === before.wallets.b && after.entries.b === before.entries.b],
    ];

    // --- The report.
    const leaks = outcomes.filter((o) => o.leak !== null);
    const mismatches = outcomes.filter((o) => o.mismatch);
    const cell = (object: ObjectName, surface: Surface) => {
      const here = outcomes.filter((o) => o.probe.object === object && o.probe.surface === surface);
      if (here.length === 0) return '–';
      return `refused ${here.filter((o) => o.leak === null).length}/${here.length}${here.some((o) => o.mismatch) ? ` (${here.filter((o) => o.mismatch).length} id-oracle mismatch)` : ''}`;
    };
    const seconds = ((Date.now() - started) / 1000).toFixed(1);
    const ownProbes = outcomes.filter((o) => o.probe.own);
    await reportSection(
      'isolation',
      6,
      `## Isolation matrix (BOLA)

Two accounts made through the sign-up form, A and B. A owns a succeeded and a running media job, a file, a chat completion, an API key, an app connection (made by the real OAuth flow), ledger entries, and the signed result links of its job and its file. B, with its own credentials on every surface, asks for each of A's objects by id; each request is sent again with a made-up id of the same shape (same prefix, length and alphabet; in no table), and the two answers are compared whole: same status, same body once the id is taken out (and the page's CSRF token). A leak is an answer that is not a refusal, or that carries any of A's data (its ids other than the one asked for, email, key, token, link signatures, or the marker in its prompts, file name, key and app names).

${table(
  ['Object', ...SURFACES],
  OBJECTS.map((object) => [object, ...SURFACES.map((surface) => cell(object, surface))]),
)}

- Attempts with A's ids: **${outcomes.length}** (and as many with made-up ids); leaks: **${leaks.length}**; id-oracle mismatches (A's id answered otherwise than a made-up one): **${mismatches.length}**.
- Statuses of the answers to A's ids: ${Object.entries(outcomes.reduce<Record<string, number>>((m, o) => ((m[o.real.status] = (m[o.real.status] ?? 0) + 1), m), {})).map(([s, n]) => `${s} × ${n}`).join(', ')}.
- After the probes: ${unchanged.map(([what, ok]) => `${what}: ${ok ? 'yes' : '**no**'}`).join('; ')}.
- "–": no route, tool or page of that surface takes that kind of id (REST has no key or app routes, a chat completion is read by REST only, MCP tools take job and file ids only, the account pages take key, app and ledger cursor ids only, result links are REST routes). The GraphQL admin API refuses every non-admin credential (B's key, session cookie, session as a bearer, OAuth token) at its door with 401, before reading the query.
- ${ownProbes.length} of the probes use an identifier that answers with B's own things by design, and count as refused when that answer carries none of A's data and equals the made-up one: a ledger entry id as a list cursor (\`starting_after=le_N\`, REST wallet history and the usage page, the only places a ledger entry id is taken: B's own page came back), and A's upload's idempotency key (REST \`Idempotency-Key\`, MCP \`upload_file\`'s \`idempotency_key\`, with the same bytes: B got a new file of its own, never A's replayed, never a conflict).
- ${probes.length} probes, ${outcomes.length * 2} requests, in ${seconds} s.
`,
    );

    // Clean up: A cancels its own running job (refunded), so that no job is left running; the
    // report is written first, so that a leak that already ended it is still reported.
    const canceled = await getJson(`${base}/api/v1/generations/${aJobIds[1]}/cancel`, { method: 'POST', headers: bearer(aKey.key) });

    expect(leaks.map((o) => `${o.probe.surface} ${o.probe.name}: ${o.leak} ${o.real.text.slice(0, 300)}`)).toEqual([]);
    expect(mismatches.map((o) => `${o.probe.surface} ${o.probe.name}: ${o.real.status} ${o.real.text.slice(0, 400)} <> ${o.madeUp.status} ${o.madeUp.text.slice(0, 400)}`)).toEqual([]);
    expect(unchanged.filter(([, ok]) => !ok).map(([what]) => what)).toEqual([]);
    expect(canceled.status, JSON.stringify(canceled.body)).toBe(200);
    // Every object was probed on at least one surface.
    expect(OBJECTS.filter((o) => !outcomes.some((x) => x.probe.object === o))).toEqual([]);
  });
});
