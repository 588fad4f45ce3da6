import { hostHeaderValidation } from '@modelcontextprotocol/sdk/server/middleware/hostHeaderValidation.js';
import { WebStandardStreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js';
import { isLegacyRequest } from '@modelcontextprotocol/server';
import { Router, type Request, type Response } from 'express';
import type { Logger } from 'pino';
import type { Credential } from '../../core/auth/principals.ts';
import { createContext, type CoreDeps } from '../../core/context.ts';
import { publicError } from '../../core/errors.ts';
import { createCaller } from '../../core/router.ts';
import { toCoreError } from '../../core/trpc.ts';
import type { HttpAdapter } from '../http/app.ts';
import { sendErrorBody } from '../http/error-body.ts';
import { protectedResourceMetadataUrl } from './oauth.ts';
import { baseUrlFor, mcpResourceUrl } from './resource.ts';
import { createModernHandler, createModernServer } from './modern.ts';
import { createMcpServer, type McpServerOptions } from './server.ts';
import { sendWebResponse, toWebRequest } from './web.ts';

export interface McpOptions {
  publicBaseUrl: string;
  logger: Logger;
  version: string;
  /** How long `generate` waits for its job (MCP_GENERATE_WAIT_SECONDS) when it can send progress. */
  generateWaitSeconds: number;
  /**
   * How long `generate` waits when the call carries no progressToken (MCP_GENERATE_QUIET_WAIT_SECONDS,
   * 50 s by default): clients that get no progress give up on a call after 60 s (the TypeScript SDK,
   * the MCP Inspector), so the running job is returned before that.
   */
  generateQuietWaitSeconds?: number | undefined;
  /** How often `generate` sends progress while it waits (10 s; the tests pass 1 s, so that a job of theirs takes seconds). */
  progressEverySeconds?: number | undefined;
  /** Host names (no port) besides PUBLIC_BASE_URL's and the loopback names that may reach MCP (MCP_ALLOWED_HOSTS). */
  allowedHosts?: string[] | undefined;
}

/**
 * The body limit of an MCP request. Agents cannot send multipart, so upload_file's base64
 * content travels in the JSON body, and the whole body is parsed, checked and decoded on the
 * event loop: 64 MiB held every other client for about 300 ms here, 16 MiB for under 100 ms.
 * 16 MiB leaves about 12 MB of file (docs/mcp.md); bigger files go by URL or POST /files.
 */
export const MCP_MAX_BODY_BYTES = 16 * 1024 * 1024;

/** MCP_GENERATE_QUIET_WAIT_SECONDS's default: under the 60 s timeout of the TypeScript SDK and the MCP Inspector. */
export const DEFAULT_QUIET_WAIT_SECONDS = 50;
/** How often `generate` sends progress while it waits: many clients give up after 60 s without it. */
export const DEFAULT_PROGRESS_EVERY_SECONDS = 10;

/**
 * The MCP server (SPEC part 4): Streamable HTTP at /api/v1/mcp with `Authorization: Bearer
 * <key>`, and at /api/v1/mcp/<key>, the personal connector link. Stateless: every POST gets a
 * new server and transport, so any instance answers any request; answers stream as SSE so
 * progress can flow. The key is checked at the door (401 before any protocol), like REST's.
 */
export function mcpAdapter(deps: CoreDeps, opts: McpOptions): HttpAdapter {
  const router = Router();
  const hosts = new Set(['localhost', '127.0.0.1', '[::1]', new URL(opts.publicBaseUrl).hostname.toLowerCase(), ...(opts.allowedHosts ?? [])]);
  // DNS rebinding: a Host, or a browser's Origin, that is not ours is refused (the SDK's middleware for the Host).
  router.use(hostHeaderValidation([...hosts]));
  router.use((req, res, next) => {
    const origin = req.headers.origin;
    if (origin === undefined || hosts.has(hostOf(origin))) return next();
    res.status(403).json({ jsonrpc: '2.0', error: { code: -32000, message: 'Forbidden: this Origin may not use the MCP server.' }, id: null });
  });

  const resource = mcpResourceUrl(opts.publicBaseUrl);
  // The metadata's URL at the host the client used, when PUBLIC_BASE_URL is the loopback default (docs/oauth.md).
  const resourceMetadata = (req: Request) => protectedResourceMetadataUrl(baseUrlFor(opts.publicBaseUrl, deps.config.oauth.loopbackAliases, req.headers.host));
  // A fixed route label for metrics: the connector link's key must never become a label.
  // With `Authorization: Bearer`, the token may be a key or an app's OAuth access token for this
  // resource; the connector link carries a key only.
  const handle = (label: string, credentialOf: (req: Request) => Credential & { kind: 'bearer' }) => async (req: Request, res: Response) => {
    res.locals.route = label;
    await serve(req, res, credentialOf(req));
  };
  const serve = async (req: Request, res: Response, credential: Credential & { kind: 'bearer' }) => {
    const core = (signal?: AbortSignal) => createCaller(createContext(deps, credential, { requestId: String(req.id), signal, meta: {} }));
    try {
      await core().keys.verify();
    } catch (err) {
      const failure = toCoreError(err);
      if (!failure) throw err;
      // A management key (docs/organizations.md) is a known key that may not spend: 403, as on REST.
      const status = failure.code === 'unauthorized' ? 401 : failure.code === 'forbidden' ? 403 : 503;
      // RFC 9728, section 5.1: a client that has no token yet finds the authorization server from here.
      if (status === 401) res.setHeader('WWW-Authenticate', challenge(credential, resourceMetadata(req)));
      const hint = status === 401 ? ' Send a key as "Authorization: Bearer <key>", use your connector link, or connect with OAuth.' : '';
      const { message, type, code } = publicError(failure, `${failure.message}${hint}`);
      sendErrorBody(res, status, { message, type, param: null, code });
      return;
    }
    const options: McpServerOptions = { core: (signal) => core(signal), logger: req.log ?? opts.logger, version: opts.version, generateWaitSeconds: opts.generateWaitSeconds, generateQuietWaitSeconds: opts.generateQuietWaitSeconds ?? DEFAULT_QUIET_WAIT_SECONDS, progressEverySeconds: opts.progressEverySeconds ?? DEFAULT_PROGRESS_EVERY_SECONDS, resultRetentionSeconds: deps.config.resultRetentionSeconds, publicBaseUrl: opts.publicBaseUrl };
    const { request, release } = toWebRequest(req, res);
    // Once the SDK has its answer, what it left of the body is read and dropped (web.ts), as
    // REST's parser does: a body over the limit gets its 413 on a connection that stays usable.
    const answer = async (respond: () => Promise<globalThis.Response>) => {
      let response: globalThis.Response;
      try {
        response = await respond();
      } finally {
        release();
      }
      await sendWebResponse(res, response);
    };
    // The protocol revision decides the binding: the 2025 revisions (no per-request envelope) go
    // to the v1 SDK, as before; 2026-07-28 to the v2 SDK. The SDK's own classification, read
    // from a clone of the body under the same size limit.
    if (await isLegacyRequest(request, undefined, { maxRequestBodySize: MCP_MAX_BODY_BYTES })) {
      const server = createMcpServer(options);
      const transport = new WebStandardStreamableHTTPServerTransport({ sessionIdGenerator: undefined, maxRequestBodySize: MCP_MAX_BODY_BYTES });
      res.once('close', () => {
        void transport.close();
        void server.close();
      });
      await server.connect(transport);
      await answer(() => transport.handleRequest(request));
      return;
    }
    modernOptions.set(request, options);
    await answer(() => modern.fetch(request));
  };
  // The v2 handler makes each request's server from the options the door checked for that request.
  const modernOptions = new WeakMap<globalThis.Request, McpServerOptions>();
  const modern = createModernHandler((request) => {
    const options = request && modernOptions.get(request);
    if (!options) throw new Error('MCP request without its checked credential');
    return createModernServer(options);
  }, MCP_MAX_BODY_BYTES);

  router.post('/', handle('/api/v1/mcp', (req) => ({ kind: 'bearer', token: bearer(req), resource })));
  router.post('/:key', handle('/api/v1/mcp/:key', (req) => ({ kind: 'bearer', token: String(req.params.key) })));
  // Without sessions there is no stream to open (GET) or session to end (DELETE): 405, as the spec says.
  router.all(['/', '/:key'], (_req, res) => {
    res.setHeader('Allow', 'POST');
    res.status(405).json({ jsonrpc: '2.0', error: { code: -32000, message: 'Method not allowed: this server has no sessions; send requests with POST.' }, id: null });
  });
  return { path: '/api/v1/mcp', router };
}

/**
 * The 401 challenge. At /api/v1/mcp it points to the protected resource metadata (RFC 9728),
 * and says `invalid_token` only when a token was sent (RFC 6750, section 3.1); the connector
 * link has its key in the path, so there is nothing to discover.
 */
function challenge(credential: Credential & { kind: 'bearer' }, resourceMetadata: string): string {
  if (credential.resource === undefined) return 'Bearer realm="mas", error="invalid_token"';
  const parts = ['Bearer realm="mas"', `resource_metadata="${resourceMetadata}"`];
  if (credential.token !== null) parts.push('error="invalid_token"', 'error_description="The token is invalid, expired or revoked."');
  return parts.join(', ');
}

function bearer(req: Request): string | null {
  return /^Bearer[ ]+(\S+)\s*$/i.exec(req.headers.authorization ?? '')?.[1] ?? null;
}

function hostOf(origin: string): string {
  try {
    return new URL(origin).hostname.toLowerCase().replace(/^([0-9a-f:]+)$/, '[$1]');
  } catch {
    return '';
  }
}
