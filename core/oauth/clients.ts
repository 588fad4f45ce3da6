import type { EntityManager } from '@mikro-orm/postgresql';
import { LRUCache } from 'lru-cache';
import { z } from 'zod';
import { CoreError, invalid } from '../errors.ts';
import { randomBase62 } from '../ids.ts';
import type { UrlGuard } from '../ports.ts';
import { checkRedirectUris } from './redirects.ts';

/**
 * The apps that may ask for access (docs/oauth.md, "Clients"). Two kinds:
 * - registered through dynamic client registration (RFC 7591): a `mcl_…` id, stored;
 * - a Client ID Metadata Document: the `client_id` is an https URL whose JSON describes the
 *   app; it is fetched through the URL guard (no private addresses), at most 5 KB within 5 s,
 *   and kept in memory for 10 minutes (a failure for 1 minute).
 * Every client is public: it proves itself with PKCE, never with a secret, so that no client
 * secret is ever stored (`token_endpoint_auth_method` is always `none`).
 */
export interface OAuthClient {
  client_id: string;
  client_name: string;
  redirect_uris: string[];
  kind: 'registered' | 'metadata_document';
}

const GRANT_TYPES = ['authorization_code', 'refresh_token'];

/** Text a person reads on the consent page: no control characters, bounded. */
const displayName = z
  .string()
  .transform((s) => s.replace(/[\p{Cc}\p{Cf}]/gu, '').trim())
  .pipe(z.string().max(100, 'must be at most 100 characters'));

export const registerClientInput = z.object({
  redirect_uris: z.array(z.string().max(2000)).max(10),
  client_name: displayName.optional(),
  client_uri: z.string().max(2000).optional(),
  logo_uri: z.string().max(2000).optional(),
  grant_types: z.array(z.string().max(50)).max(5).optional(),
  response_types: z.array(z.string().max(50)).max(5).optional(),
  token_endpoint_auth_method: z.string().max(50).optional(),
  scope: z.string().max(1000).optional(),
  software_id: z.string().max(200).optional(),
  software_version: z.string().max(200).optional(),
});
export type RegisterClientInput = z.input<typeof registerClientInput>;

/** What registration answers (RFC 7591, section 3.2.1): the client as the server keeps it. */
export interface RegisteredClientView {
  client_id: string;
  client_id_issued_at: number;
  client_name: string;
  redirect_uris: string[];
  grant_types: string[];
  response_types: string[];
  token_endpoint_auth_method: 'none';
  client_uri?: string;
  software_id?: string;
  software_version?: string;
}

const UNNAMED = 'An unnamed app';

function checkGrants(input: { grant_types?: string[] | undefined; response_types?: string[] | undefined }) {
  const unknownGrant = input.grant_types?.find((g) => !GRANT_TYPES.includes(g));
  if (unknownGrant) throw invalid('grant_types', `The grant type ${JSON.stringify(unknownGrant)} is not supported: use authorization_code and refresh_token.`, 'invalid_client_metadata');
  const unknownResponse = input.response_types?.find((r) => r !== 'code');
  if (unknownResponse) throw invalid('response_types', `The response type ${JSON.stringify(unknownResponse)} is not supported: use code.`, 'invalid_client_metadata');
}

export async function registerClient(em: EntityManager, input: z.output<typeof registerClientInput>, now: Date): Promise<RegisteredClientView> {
  checkRedirectUris(input.redirect_uris);
  checkGrants(input);
  const clientId = `mcl_${randomBase62(24)}`;
  const name = input.client_name || UNNAMED;
  const kept = {
    ...(input.client_uri ? { client_uri: input.client_uri } : {}),
    ...(input.software_id ? { software_id: input.software_id } : {}),
    ...(input.software_version ? { software_version: input.software_version } : {}),
  };
  await em.execute('insert into oauth_clients (client_id, client_name, redirect_uris, metadata, created_at) values (?, ?, ?::jsonb, ?::jsonb, ?)', [
    clientId,
    name,
    JSON.stringify(input.redirect_uris),
    JSON.stringify(kept),
    now,
  ]);
  return {
    client_id: clientId,
    client_id_issued_at: Math.floor(now.getTime() / 1000),
    client_name: name,
    redirect_uris: input.redirect_uris,
    grant_types: GRANT_TYPES,
    response_types: ['code'],
    token_endpoint_auth_method: 'none',
    ...kept,
  };
}

export const clientIdSchema = z.string().min(1).max(2000);

const unknownClient = (why = 'No such client: register it first, or give a client metadata document URL.') =>
  new CoreError('invalid_request', why, { param: 'client_id', reason: 'invalid_client' });

const documentSchema = z.object({
  client_id: z.string(),
  redirect_uris: z.array(z.string()).min(1).max(10),
  client_name: displayName.optional(),
  grant_types: z.array(z.string()).optional(),
  response_types: z.array(z.string()).optional(),
  token_endpoint_auth_method: z.string().optional(),
});

export const CLIENT_DOCUMENT_MAX_BYTES = 5 * 1024;
const CLIENT_DOCUMENT_TIMEOUT_MS = 5_000;

/**
 * Client ID Metadata Documents, fetched once and kept for 10 minutes (a failure for 1 minute,
 * so that a client that keeps retrying cannot make this service fetch over and over).
 * Concurrent look-ups of one URL share one fetch.
 */
export class ClientDocuments {
  private readonly cache = new LRUCache<string, { client: OAuthClient } | { error: string }>({ max: 1_000, ttl: 10 * 60_000 });
  private readonly inFlight = new Map<string, Promise<{ client: OAuthClient } | { error: string }>>();
  private readonly guard: UrlGuard;
  /** Hosts whose documents may be served over plain http: INPUT_URL_ALLOWLIST, for tests. */
  private readonly httpHosts: Set<string>;

  constructor(guard: UrlGuard, httpHosts: readonly string[] = []) {
    this.guard = guard;
    this.httpHosts = new Set(httpHosts.map((h) => h.toLowerCase()));
  }

  /** Whether a client id is a URL, so names a document, rather than a registered id. */
  static isDocumentUrl(clientId: string): boolean {
    return /^https?:\/\//i.test(clientId);
  }

  async get(url: string): Promise<OAuthClient> {
    const cached = this.cache.get(url);
    const found = cached ?? (await this.load(url));
    if ('error' in found) throw unknownClient(`The client metadata document at ${url.slice(0, 200)} cannot be used: ${found.error}.`);
    return found.client;
  }

  private load(url: string) {
    let pending = this.inFlight.get(url);
    if (!pending) {
      pending = this.fetchDocument(url)
        .then((client) => ({ client }))
        .catch((err: unknown) => ({ error: err instanceof Error ? err.message : String(err) }))
        .then((entry) => {
          this.cache.set(url, entry, 'error' in entry ? { ttl: 60_000 } : {});
          this.inFlight.delete(url);
          return entry;
        });
      this.inFlight.set(url, pending);
    }
    return pending;
  }

  private async fetchDocument(raw: string): Promise<OAuthClient> {
    let url: URL;
    try {
      url = new URL(raw);
    } catch {
      throw new Error('it is not a URL');
    }
    const httpAllowed = url.protocol === 'http:' && this.httpHosts.has(url.hostname.replace(/^\[|\]$/g, '').toLowerCase());
    if (url.protocol !== 'https:' && !httpAllowed) throw new Error('a client id URL must use https');
    if (url.hash || url.username || url.password) throw new Error('a client id URL must not have a fragment or credentials');
    if (url.pathname === '/' || /\/\.\.?(\/|$)/.test(url.pathname)) throw new Error('a client id URL must have a path, without . or .. segments');
    if (url.href !== raw) throw new Error('a client id URL must be in its normal form');
    const timeout = new Promise<never>((_, reject) => setTimeout(() => reject(new Error('it did not answer within 5 s')), CLIENT_DOCUMENT_TIMEOUT_MS).unref());
    const bytes = await Promise.race([this.guard.fetch(raw, { maxBytes: CLIENT_DOCUMENT_MAX_BYTES, timeoutMs: CLIENT_DOCUMENT_TIMEOUT_MS }), timeout]);
    let json: unknown;
    try {
      json = JSON.parse(new TextDecoder().decode(bytes));
    } catch {
      throw new Error('it is not JSON');
    }
    const parsed = documentSchema.safeParse(json);
    if (!parsed.success) throw new Error(`it is not a client metadata document (${parsed.error.issues[0]?.path.join('.') || 'shape'})`);
    const doc = parsed.data;
    if (doc.client_id !== raw) throw new Error('its client_id is not its own URL');
    if (doc.token_endpoint_auth_method && doc.token_endpoint_auth_method !== 'none') throw new Error('only public clients (token_endpoint_auth_method none) are accepted');
    try {
      checkRedirectUris(doc.redirect_uris);
      checkGrants(doc);
    } catch (err) {
      throw new Error(err instanceof Error ? err.message.replace(/\.$/, '') : 'its metadata is not accepted', { cause: err });
    }
    return { client_id: raw, client_name: doc.client_name || url.host, redirect_uris: doc.redirect_uris, kind: 'metadata_document' };
  }
}

/** The client with this id, registered or described by its document; an unknown one is `invalid_client`. */
export async function resolveClient(deps: { clientDocuments: ClientDocuments }, em: EntityManager, clientId: string): Promise<OAuthClient> {
  if (ClientDocuments.isDocumentUrl(clientId)) return deps.clientDocuments.get(clientId);
  if (!/^mcl_[0-9A-Za-z]{1,64}$/.test(clientId)) throw unknownClient();
  const [row] = await em.execute<{ client_id: string; client_name: string; redirect_uris: string[] }[]>(
    'select client_id, client_name, redirect_uris from oauth_clients where client_id = ?',
    [clientId],
  );
  if (!row) throw unknownClient();
  return { client_id: row.client_id, client_name: row.client_name, redirect_uris: row.redirect_uris, kind: 'registered' };
}
