import { CustomOAuthError, InvalidClientError, ServerError, TooManyRequestsError } from '@modelcontextprotocol/sdk/server/auth/errors.js';
import type { OAuthServerProvider } from '@modelcontextprotocol/sdk/server/auth/provider.js';
import type { OAuthClientInformationFull } from '@modelcontextprotocol/sdk/shared/auth.js';
import { Router, type ErrorRequestHandler, type Request, type RequestHandler, type Response } from 'express';
import { ipKeyGenerator } from 'express-rate-limit';
import { createContext, type CoreDeps } from '../../core/context.ts';
import { createCaller } from '../../core/router.ts';
import type { RateLimiter } from '../../core/ports.ts';
import { toCoreError } from '../../core/trpc.ts';
import type { HttpAdapter } from '../http/app.ts';
import { baseUrlFor, MCP_PATH, mcpResourceUrl } from './resource.ts';

/**
 * The OAuth authorization server that MCP clients (Claude, ChatGPT, Cursor, VS Code) use to
 * connect without a copied key (docs/oauth.md), and the metadata that lets them find it:
 * - RFC 9728 protected resource metadata for the MCP server, at its well-known path and at the
 *   root path;
 * - RFC 8414 authorization server metadata;
 * - `/register` (RFC 7591), `/token` and `/revoke` (RFC 7009): the SDK's handlers (method
 *   checks, CORS, per-address rate limits, error shapes) over a provider whose every method is
 *   one core use case; PKCE is checked by core, with the code, in one transaction.
 * `/authorize` is a page for people, with sign-in and consent: it lives with the account pages
 * (adapters/web). Access tokens are checked where MCP requests arrive (adapters/mcp/mcp.ts).
 */
export interface OAuthOptions {
  publicBaseUrl: string;
  /**
   * Makes the endpoints' per-address limits on the process's limit store (Redis when REDIS_URL
   * is set, so that every instance shares one count; else this process's memory).
   */
  windowLimiter: (w: { points: number; durationSeconds: number; prefix: string }) => RateLimiter;
}

/** Requests per client address: token and revoke 60 a minute, registrations 60 an hour. */
const ENDPOINT_LIMITS = {
  token: { points: 60, durationSeconds: 60 },
  register: { points: 60, durationSeconds: 3600 },
  revoke: { points: 60, durationSeconds: 60 },
} as const;

/**
 * An endpoint's limit, counted on the process's store (the SDK's own in-memory limiter is
 * turned off). Over the limit, the SDK's answer: 429 `too_many_requests`, with Retry-After.
 */
function endpointLimit(name: keyof typeof ENDPOINT_LIMITS, make: OAuthOptions['windowLimiter']): RequestHandler {
  const limiter = make({ ...ENDPOINT_LIMITS[name], prefix: `mas:oauth:${name}` });
  return (req, res, next) => {
    // One count per IPv4 address or IPv6 /56 (a client holds a whole IPv6 prefix).
    limiter.consume(ipKeyGenerator(req.ip ?? 'unknown')).then((state) => {
      if (state.allowed) return next();
      res.setHeader('Retry-After', String(state.resetSeconds));
      res.status(429).json(new TooManyRequestsError(`You have exceeded the rate limit for ${name} requests.`).toResponseObject());
    }, next);
  };
}

/**
 * One of the SDK's endpoint handlers, made on its endpoint's first request: the handlers and
 * what they bring (cors, their body parsers and schemas, about 4 MiB of heap) stay out of a
 * process no OAuth client calls. A failed import answers that request with the error and is
 * tried again on the next.
 */
function onFirstRequest(make: () => Promise<RequestHandler>): RequestHandler {
  let loading: Promise<RequestHandler> | undefined;
  return (req, res, next) => {
    (loading ??= make()).then(
      (handler) => handler(req, res, next),
      (err: unknown) => {
        loading = undefined;
        next(err);
      },
    );
  };
}

/** The metadata documents' paths (RFC 9728, section 3.1): the MCP server's, then the root fallback. */
export const PROTECTED_RESOURCE_PATHS = [`/.well-known/oauth-protected-resource${MCP_PATH}`, '/.well-known/oauth-protected-resource'];

export function protectedResourceMetadataUrl(publicBaseUrl: string): string {
  return `${publicBaseUrl.replace(/\/+$/, '')}${PROTECTED_RESOURCE_PATHS[0]}`;
}

/** OAuth error codes core uses as a `reason`; anything else it refuses is `invalid_request`. */
const OAUTH_CODES = new Set(['invalid_request', 'invalid_client', 'invalid_grant', 'invalid_target', 'invalid_redirect_uri', 'invalid_client_metadata', 'unsupported_grant_type']);

/** A core refusal as the OAuth error the SDK's handlers answer with (400, `{error, error_description}`). */
function oauthError(err: unknown, fallback = 'invalid_request'): Error {
  const failure = toCoreError(err);
  if (!failure || failure.code === 'unavailable') return new ServerError(failure?.message ?? 'Internal Server Error');
  const code = failure.reason && OAUTH_CODES.has(failure.reason) && failure.reason !== 'invalid_request' ? failure.reason : fallback;
  return code === 'invalid_client' ? new InvalidClientError(failure.message) : new CustomOAuthError(code, failure.message);
}

export function oauthAdapter(deps: CoreDeps, opts: OAuthOptions): HttpAdapter {
  const base = opts.publicBaseUrl.replace(/\/+$/, '');
  const core = (req?: Request) => createCaller(createContext(deps, { kind: 'none' }, { requestId: req ? String(req.id) : undefined, clientIp: req?.ip }));
  const callAs = async <T>(fallback: string, fn: () => Promise<T>): Promise<T> => {
    try {
      return await fn();
    } catch (err) {
      throw oauthError(err, fallback);
    }
  };
  const call = <T>(fn: () => Promise<T>) => callAs('invalid_request', fn);

  const provider: OAuthServerProvider = {
    clientsStore: {
      async getClient(clientId) {
        try {
          const client = await core().oauth.client({ client_id: clientId });
          return { client_id: client.client_id, client_name: client.client_name, redirect_uris: client.redirect_uris, token_endpoint_auth_method: 'none' };
        } catch (err) {
          if (toCoreError(err)?.reason === 'invalid_client') return undefined;
          throw oauthError(err);
        }
      },
      async registerClient(client) {
        // Every client is public (PKCE, no secret): a secret the SDK made for the request is dropped, never stored.
        // Metadata that does not fit is `invalid_client_metadata` (RFC 7591, section 3.2.2).
        const registered = await callAs('invalid_client_metadata', () =>
          core().oauth.registerClient({
            redirect_uris: client.redirect_uris,
            client_name: client.client_name,
            client_uri: client.client_uri,
            grant_types: client.grant_types,
            response_types: client.response_types,
            token_endpoint_auth_method: client.token_endpoint_auth_method,
            scope: client.scope,
            software_id: client.software_id,
            software_version: client.software_version,
          }),
        );
        return registered as OAuthClientInformationFull;
      },
    },
    // Core checks the verifier against the code's challenge, in the exchange's transaction.
    skipLocalPkceValidation: true,
    authorize: () => Promise.reject(new Error('/authorize is served by the account pages')),
    challengeForAuthorizationCode: () => Promise.reject(new Error('PKCE is checked by core')),
    verifyAccessToken: () => Promise.reject(new Error('access tokens are checked by core at the MCP door')),
    exchangeAuthorizationCode: (client, code, codeVerifier, redirectUri, resource) =>
      call(() =>
        core().oauth.exchangeCode({
          client_id: client.client_id,
          code,
          code_verifier: codeVerifier ?? '',
          ...(redirectUri !== undefined ? { redirect_uri: redirectUri } : {}),
          ...(resource ? { resource: resource.href } : {}),
        }),
      ),
    exchangeRefreshToken: (client, refreshToken, _scopes, resource) =>
      call(() => core().oauth.refresh({ client_id: client.client_id, refresh_token: refreshToken, ...(resource ? { resource: resource.href } : {}) })),
    revokeToken: async (client, request) => {
      await call(() => core().oauth.revoke({ client_id: client.client_id, token: request.token }));
    },
  };

  // The resource is the MCP server at the host the client used (baseUrlFor); the authorization
  // server stays PUBLIC_BASE_URL's, so its metadata, issuer and endpoints are one.
  const loopbackAliases = deps.config.oauth.loopbackAliases;
  const resourceMetadata = (req: Request) => ({
    resource: mcpResourceUrl(baseUrlFor(base, loopbackAliases, req.headers.host)),
    authorization_servers: [base],
    bearer_methods_supported: ['header'],
    resource_name: 'Model Access Service (MCP)',
    resource_documentation: `${base}/api/v1/docs`,
  });
  const serverMetadata = {
    issuer: base,
    authorization_endpoint: `${base}/authorize`,
    token_endpoint: `${base}/token`,
    registration_endpoint: `${base}/register`,
    revocation_endpoint: `${base}/revoke`,
    response_types_supported: ['code'],
    response_modes_supported: ['query'],
    grant_types_supported: ['authorization_code', 'refresh_token'],
    code_challenge_methods_supported: ['S256'],
    token_endpoint_auth_methods_supported: ['none'],
    revocation_endpoint_auth_methods_supported: ['none'],
    // RFC 9207: the authorization response names its issuer.
    authorization_response_iss_parameter_supported: true,
    // The MCP authorization spec of 2025-11-25: an https client_id may be a metadata document's URL.
    client_id_metadata_document_supported: true,
    service_documentation: `${base}/api/v1/docs`,
  };
  const metadata = (doc: (req: Request) => object) => (req: Request, res: Response) => {
    res.setHeader('Access-Control-Allow-Origin', '*');
    res.setHeader('Cache-Control', 'public, max-age=3600');
    res.json(doc(req));
  };

  const router = Router();
  const label = (route: string) => (_req: Request, res: Response, next: () => void) => {
    res.locals.route = route;
    next();
  };
  // Browser-based clients read the metadata cross-origin: a preflight gets its answer too.
  router.options([...PROTECTED_RESOURCE_PATHS, '/.well-known/oauth-authorization-server'], (_req, res) => {
    res.setHeader('Access-Control-Allow-Origin', '*');
    res.setHeader('Access-Control-Allow-Methods', 'GET, OPTIONS');
    res.setHeader('Access-Control-Allow-Headers', 'mcp-protocol-version, content-type');
    res.setHeader('Access-Control-Max-Age', '86400');
    res.status(204).end();
  });
  router.get(PROTECTED_RESOURCE_PATHS, label('/.well-known/oauth-protected-resource'), metadata(resourceMetadata));
  router.get('/.well-known/oauth-authorization-server', label('/.well-known/oauth-authorization-server'), metadata(() => serverMetadata));
  router.use('/token', label('/token'), endpointLimit('token', opts.windowLimiter), onFirstRequest(async () => (await import('@modelcontextprotocol/sdk/server/auth/handlers/token.js')).tokenHandler({ provider, rateLimit: false })));
  router.use('/register', label('/register'), endpointLimit('register', opts.windowLimiter), onFirstRequest(async () => (await import('@modelcontextprotocol/sdk/server/auth/handlers/register.js')).clientRegistrationHandler({ clientsStore: provider.clientsStore, rateLimit: false })));
  router.use('/revoke', label('/revoke'), endpointLimit('revoke', opts.windowLimiter), onFirstRequest(async () => (await import('@modelcontextprotocol/sdk/server/auth/handlers/revoke.js')).revocationHandler({ provider, rateLimit: false })));
  // A body the SDK's parsers refuse (too large, malformed, an unknown charset) is the client's
  // fault: an OAuth error with its 4xx status, never the server's 500.
  router.use(((err, req, res, next) => {
    const status = (err as { status?: unknown }).status;
    if (!['/token', '/register', '/revoke'].includes(req.path) || typeof status !== 'number' || status < 400 || status >= 500) return next(err);
    res.status(status).json({ error: 'invalid_request', error_description: status === 413 ? 'The request body is too large.' : 'The request body could not be read.' });
  }) as ErrorRequestHandler);
  return { path: '/', router };
}
