import { createHash } from 'node:crypto';
import type { EntityManager } from '@mikro-orm/postgresql';
import { z } from 'zod';
import type { SessionPrincipal } from '../auth/principals.ts';
import { hashSecret, newSecret } from '../auth/secrets.ts';
import { CoreError, invalid } from '../errors.ts';
import { InvalidAmountError, parseCoins, type Micro } from '../money/coins.ts';
import { organizationIdSchema, requireRole } from '../organizations/roles.ts';
import { clientIdSchema, resolveClient, type ClientDocuments, type OAuthClient } from './clients.ts';
import { redirectHost, redirectUriMatches } from './redirects.ts';

/**
 * The authorization request (OAuth 2.1 section 4.1, docs/oauth.md): an app sends a person
 * here to ask for access to their account through the MCP server.
 *
 * It is checked in two steps, as OAuth requires:
 * 1. the client and its redirect URI: when either is wrong, nothing may be sent to the
 *    redirect URI (it may be an attacker's), so the person gets an error page (`checkClient`
 *    throws);
 * 2. the rest (PKCE, response type, resource): these errors go back to the app at its redirect
 *    URI, with `error`, `state` and `iss` (RFC 9207).
 * Then a signed-in person allows (an authorization code) or denies (`access_denied`).
 */
export interface OAuthConfig {
  /** The authorization server's issuer: PUBLIC_BASE_URL. */
  issuer: string;
  /** The one protected resource tokens are for: the MCP server's URL (RFC 8707, RFC 9728). */
  resource: string;
  /**
   * PUBLIC_BASE_URL was not set, so the service is at its default loopback address
   * (http://localhost:$PORT): the MCP server's URL at `localhost`, `127.0.0.1` or `[::1]` is one
   * resource (`resourceFor`). With an explicit PUBLIC_BASE_URL, `resource` alone is.
   */
  loopbackAliases: boolean;
  /** Hosts whose client metadata documents may use plain http (INPUT_URL_ALLOWLIST, tests). */
  httpClientIdHosts: string[];
}

interface Deps {
  config: { oauth: OAuthConfig };
  clientDocuments: ClientDocuments;
  clock: () => Date;
}

export const authorizationRequestInput = z.object({
  client_id: clientIdSchema,
  redirect_uri: z.string().max(2000).optional(),
  response_type: z.string().max(100).optional(),
  code_challenge: z.string().max(200).optional(),
  code_challenge_method: z.string().max(20).optional(),
  state: z.string().max(2000).optional(),
  resource: z.string().max(2000).optional(),
  scope: z.string().max(2000).optional(),
});
export type AuthorizationRequestInput = z.input<typeof authorizationRequestInput>;

/** Lifetimes a person may give an app connection on the consent page, in days (`none`: until revoked). */
export const CONNECTION_LIFETIMES = ['7', '30', '90', 'none'] as const;
export const DEFAULT_CONNECTION_LIFETIME = '30';
/** The largest spend cap the consent page accepts, in coins. */
const MAX_SPEND_CAP_COINS = 1_000_000_000n;
/** Apps one account may have connected at once; they do not count toward its 10 API keys. */
export const MAX_ACTIVE_APP_CONNECTIONS = 25;
/** An authorization code lives one minute and is used once. */
export const CODE_TTL_SECONDS = 60;

export const approveInput = authorizationRequestInput.extend({
  /** Coins, optional: an empty field means no cap. */
  spend_cap_coins: z.string().trim().max(30).optional(),
  lifetime: z.enum(CONNECTION_LIFETIMES).default(DEFAULT_CONNECTION_LIFETIME),
  /**
   * The wallet the app spends from: absent, the person's own; an organization's they belong to
   * (any role): its coins, within the person's spend limit there (docs/oauth.md).
   */
  organization_id: organizationIdSchema.optional(),
});

/** What the consent page shows. */
export interface AuthorizationView {
  object: 'authorization_request';
  client: { id: string; name: string; redirect_host: string; kind: OAuthClient['kind'] };
  /** The request as it will be approved, to carry through the consent form. */
  request: Required<Pick<AuthorizationRequestInput, 'client_id' | 'redirect_uri' | 'code_challenge' | 'resource'>> & { state?: string };
}

/** An answer for the app, at its redirect URI. */
export interface AuthorizationRedirect {
  object: 'authorization_redirect';
  redirect_to: string;
}

/** Step 1: the client and the redirect URI. Throws when either is wrong; the person sees the message. */
export async function checkClient(deps: Deps, em: EntityManager, input: z.output<typeof authorizationRequestInput>): Promise<{ client: OAuthClient; redirectUri: string }> {
  const client = await resolveClient(deps, em, input.client_id);
  if (input.redirect_uri === undefined) {
    if (client.redirect_uris.length !== 1) throw invalid('redirect_uri', 'This app registered several redirect URIs, so the request must name one.', 'invalid_redirect_uri');
    return { client, redirectUri: client.redirect_uris[0]! };
  }
  if (!client.redirect_uris.some((registered) => redirectUriMatches(input.redirect_uri!, registered))) {
    throw invalid('redirect_uri', 'The redirect URI is not one this app registered, so the request was stopped here.', 'invalid_redirect_uri');
  }
  return { client, redirectUri: input.redirect_uri };
}

/** A redirect to the app with these parameters, plus `state` and `iss`. */
function redirectTo(deps: Deps, redirectUri: string, state: string | undefined, params: Record<string, string>): AuthorizationRedirect {
  const url = new URL(redirectUri);
  for (const [k, v] of Object.entries(params)) url.searchParams.set(k, v);
  if (state !== undefined) url.searchParams.set('state', state);
  url.searchParams.set('iss', deps.config.oauth.issuer);
  return { object: 'authorization_redirect', redirect_to: url.href };
}

/** The canonical form of a resource URI (RFC 8707): no fragment, no trailing slash. */
export function canonicalResource(raw: string): string | undefined {
  try {
    const url = new URL(raw);
    url.hash = '';
    return url.href.replace(/\/$/, '');
  } catch {
    return undefined;
  }
}

const LOOPBACK_HOSTS = new Set(['localhost', '127.0.0.1', '[::1]']);

/**
 * The protected resource a request names, as tokens are bound to it: the configured resource
 * (canonical) when `raw` names it, else undefined. With the default loopback base URL, the same
 * URL at another loopback host (`127.0.0.1` for `localhost`, `[::1]`) names it too: a client on
 * the person's computer reaches the service by any of them (docs/oauth.md).
 */
export function resourceFor(config: Pick<OAuthConfig, 'resource' | 'loopbackAliases'>, raw: string): string | undefined {
  const expected = canonicalResource(config.resource)!;
  const given = canonicalResource(raw);
  if (given === undefined) return undefined;
  if (given === expected) return expected;
  if (!config.loopbackAliases) return undefined;
  const url = new URL(given);
  if (!LOOPBACK_HOSTS.has(url.hostname)) return undefined;
  url.hostname = new URL(expected).hostname;
  return canonicalResource(url.href) === expected ? expected : undefined;
}

const CHALLENGE = /^[A-Za-z0-9_-]{43}$/;

/**
 * Both steps. A request that passes step 1 and fails step 2 is answered with a redirect that
 * carries the error to the app; one that passes both is shown to the person.
 */
export async function checkAuthorization(deps: Deps, em: EntityManager, input: z.output<typeof authorizationRequestInput>): Promise<AuthorizationView | AuthorizationRedirect> {
  const { client, redirectUri } = await checkClient(deps, em, input);
  const fail = (error: string, description: string) => redirectTo(deps, redirectUri, input.state, { error, error_description: description });
  if (input.response_type !== 'code') return fail('unsupported_response_type', 'Only response_type=code is supported.');
  if (input.code_challenge === undefined) return fail('invalid_request', 'PKCE is required: send code_challenge with code_challenge_method=S256.');
  if (input.code_challenge_method !== 'S256') return fail('invalid_request', 'Only code_challenge_method=S256 is supported.');
  if (!CHALLENGE.test(input.code_challenge)) return fail('invalid_request', 'code_challenge must be the base64url SHA-256 of the code verifier (43 characters).');
  const expected = canonicalResource(deps.config.oauth.resource)!;
  const resource = input.resource === undefined ? expected : resourceFor(deps.config.oauth, input.resource);
  if (resource !== expected) {
    return fail('invalid_target', `This server issues tokens only for its MCP server, ${deps.config.oauth.resource}.`);
  }
  return {
    object: 'authorization_request',
    client: { id: client.client_id, name: client.client_name, redirect_host: redirectHost(redirectUri), kind: client.kind },
    request: { client_id: client.client_id, redirect_uri: redirectUri, code_challenge: input.code_challenge, resource: expected, ...(input.state !== undefined ? { state: input.state } : {}) },
  };
}

function parseCap(raw: string | undefined): Micro | null {
  if (raw === undefined || raw === '') return null;
  let cap: Micro;
  try {
    cap = parseCoins(raw);
  } catch (err) {
    if (err instanceof InvalidAmountError) throw invalid('spend_cap_coins', 'The spend cap must be a number of coins, such as 50 or 12.5, or empty for no cap.');
    throw err;
  }
  if (cap <= 0n) throw invalid('spend_cap_coins', 'The spend cap must be more than 0 coins, or empty for no cap.');
  if (cap > MAX_SPEND_CAP_COINS * 1_000_000n) throw invalid('spend_cap_coins', `The spend cap can be at most ${MAX_SPEND_CAP_COINS} coins.`);
  return cap;
}

/**
 * The person allows: a single-use code bound to the client, the redirect URI, the PKCE
 * challenge, the resource and the person's choices (spend cap, lifetime). The app connection
 * itself is made when the app exchanges the code (core/oauth/tokens.ts), so that a code the app
 * never collects leaves nothing behind. With `organization_id`, the person must be a member of
 * that organization (else 404, as for every organization they cannot see): the code names the
 * organization as the wallet and the person as its member, so the app's key spends the
 * organization's coins within that member's spend limit, and ends when the member is removed.
 */
export async function approveAuthorization(deps: Deps, em: EntityManager, principal: SessionPrincipal, input: z.output<typeof approveInput>): Promise<AuthorizationRedirect> {
  const checked = await checkAuthorization(deps, em, input);
  if (checked.object === 'authorization_redirect') return checked;
  const cap = parseCap(input.spend_cap_coins);
  const now = deps.clock();
  const { request, client } = checked;
  // Approving an app that is connected already replaces its connection: no room is needed.
  const app = { clientId: client.id, name: client.name, host: redirectHost(request.redirect_uri) };
  const organizationId = input.organization_id ?? null;
  if (organizationId) await requireRole(em, { personId: principal.accountId, organizationId: null }, organizationId, 'member', { param: 'organization_id' });
  const wallet = organizationId ?? principal.accountId;
  const member = organizationId ? principal.accountId : null;
  if ((await liveConnectionsOf(em, wallet, app, now, false, member)).length === 0) await checkConnectionRoom(em, wallet, member);
  const code = newSecret('mas_ac_');
  // Codes expired for an hour are of no use to anyone: a few are swept on each approval.
  await em.execute(`delete from oauth_codes where code_hash in (select code_hash from oauth_codes where expires_at < ? limit 100)`, [new Date(now.getTime() - 3_600_000)]);
  await em.execute(
    `insert into oauth_codes (code_hash, client_id, client_name, redirect_uri, code_challenge, resource, account_id, member_id, spend_cap_micro, lifetime_days, expires_at)
     values (?, ?, ?, ?, ?, ?, ?, ?, ?::bigint, ?, ?)`,
    [
      hashSecret(code),
      client.id,
      client.name,
      request.redirect_uri,
      request.code_challenge,
      request.resource,
      wallet,
      member,
      cap?.toString() ?? null,
      input.lifetime === 'none' ? null : Number(input.lifetime),
      new Date(now.getTime() + CODE_TTL_SECONDS * 1000),
    ],
  );
  return redirectTo(deps, request.redirect_uri, request.state, { code });
}

/** The person denies: `access_denied` for the app, and nothing is kept. */
export async function denyAuthorization(deps: Deps, em: EntityManager, input: z.output<typeof authorizationRequestInput>): Promise<AuthorizationRedirect> {
  const { redirectUri } = await checkClient(deps, em, input);
  return redirectTo(deps, redirectUri, input.state, { error: 'access_denied', error_description: 'The person did not allow access.' });
}

/**
 * The account's live (neither revoked nor expired) connections of one app, newest first: the
 * same client_id, or the same name signing in through the same host (a client registered again
 * gets a new client_id). Reconnecting replaces them (docs/oauth.md, "Reconnecting an app").
 * On an organization's wallet, a member's connections only (`memberId`): each member connects
 * their own apps; null: the account's personal connections.
 */
export async function liveConnectionsOf(
  em: EntityManager,
  accountId: string,
  app: { clientId: string; name: string; host: string },
  now: Date,
  lock = false,
  memberId: string | null = null,
): Promise<{ id: string; key_id: string }[]> {
  return em.execute<{ id: string; key_id: string }[]>(
    `select id, key_id from app_connections
      where account_id = ? and member_id is not distinct from ? and revoked_at is null and (expires_at is null or expires_at > ?) and (client_id = ? or (client_name = ? and redirect_host = ?))
      order by created_at desc, id desc${lock ? ' for update' : ''}`,
    [accountId, memberId, now, app.clientId, app.name, app.host],
  );
}

/** Refuses a new connection when the account (on an organization's wallet: the member) already has the most it may have. */
export async function checkConnectionRoom(em: EntityManager, accountId: string, memberId: string | null = null): Promise<void> {
  const [row] = await em.execute<{ n: number }[]>(
    `select count(*)::int as n from app_connections where account_id = ? and member_id is not distinct from ? and revoked_at is null and (expires_at is null or expires_at > now())`,
    [accountId, memberId],
  );
  if (row!.n >= MAX_ACTIVE_APP_CONNECTIONS) {
    throw new CoreError('limit_reached', `This account already has ${MAX_ACTIVE_APP_CONNECTIONS} connected apps, the most allowed. Disconnect one first.`, {
      reason: 'app_connection_limit_reached',
    });
  }
}

/** PKCE S256 (RFC 7636): the challenge is the base64url SHA-256 of the verifier. */
export function pkceMatches(verifier: string, challenge: string): boolean {
  if (!/^[A-Za-z0-9\-._~]{43,128}$/.test(verifier)) return false;
  return createHash('sha256').update(verifier).digest('base64url') === challenge;
}
