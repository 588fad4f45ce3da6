import { ConnectionException, DriverException } from '@mikro-orm/core';
import { initTRPC, TRPCError } from '@trpc/server';
import { ZodError } from 'zod';
import type { CoreContext } from './context.ts';
import { CoreError, isCoreError, unauthorized } from './errors.ts';
import { authenticate, authenticateManagement } from './auth/api-keys.ts';
import { authenticateAdmin } from './auth/admin-tokens.ts';
import { authenticateAdminSession, isAdminSessionToken } from './admin/users.ts';
import type { Actor, AdminPrincipal, InternalPrincipal, ManagementPrincipal, SessionPrincipal, SpendingPrincipal } from './auth/principals.ts';
import { authenticateSession } from './auth/sessions.ts';
import { requireVerifiedEmail } from './auth/verified-email.ts';
import { ACCESS_TOKEN_PREFIX, authenticateAppToken } from './oauth/tokens.ts';
import { annotate, errorType, inSpan, recordingHere } from './telemetry.ts';
import { SpanStatusCode } from '@opentelemetry/api';
import { addTopUpHint } from './accounts/top-up-hint.ts';

const t = initTRPC.context<CoreContext>().create({ isServer: true });

export const router = t.router;
export const createCallerFactory = t.createCallerFactory;

/**
 * The base procedures, one per kind of caller (core/auth/principals.ts). Every use case is
 * built on exactly one of them; none checks a credential itself.
 *
 * Chat charges are written behind their answers (core/chat/charge-writer.ts). Every base
 * procedure but chat's first waits for the charges of its account queued on this instance (an
 * operator's: all of them), so that a balance, history or record read after an answer shows its
 * charge; chat itself never waits for an earlier chat's charge.
 */

/**
 * The one middleware under every procedure (one layer: each layer of tRPC's costs every call,
 * the chat's included):
 * - Tracing on (core/telemetry.ts): every procedure call is a span `core <path>` (`core
 *   chat.complete`), under the request's; a failure is marked with its error code. Off: no span.
 *   The base procedures below add the caller's account and key to it once the credential is
 *   checked (`annotatePrincipal`).
 * - A refusal for want of coins (402 `insufficient_balance`) says where to add credits,
 *   whichever use case and transport met it (core/accounts/top-up-hint.ts).
 */
const tracedProcedure = t.procedure.use(({ ctx, path, type, next }) => {
  const done = recordingHere()
    ? inSpan(`core ${path}`, () => ({ 'mas.procedure': path, 'mas.procedure.type': type }), async (span) => {
        const result = await next();
        if (!result.ok && span) {
          const code = toCoreError(result.error)?.code ?? errorType(result.error);
          span.setAttribute('error.type', code);
          span.setStatus({ code: SpanStatusCode.ERROR, message: code });
        }
        return result;
      })
    : next();
  return done.then((result) => {
    if (!result.ok) {
      const failure = toCoreError(result.error);
      if (failure?.code === 'insufficient_balance') {
        addTopUpHint(failure, ctx.deps.config.links, ctx.deps.payments !== undefined);
        result.error.message = failure.message;
      }
    }
    return result;
  });
});

/** The caller's ids on the procedure's span: never the credential itself. */
function annotatePrincipal(p: { accountId: string; keyId?: string }): void {
  annotate(() => ({ 'mas.account_id': p.accountId, ...(p.keyId ? { 'mas.key_id': p.keyId } : {}) }));
}

/** No caller identity needed: health checks, public documents, signed links. */
export const publicProcedure = tracedProcedure;

/**
 * Spends an account's coins: an API key (`Authorization: Bearer`), checked on every call and
 * counted against its per-minute limit; its account is `ctx.principal`.
 */
export const spendingProcedure = tracedProcedure.use(async ({ ctx, next }) => {
  const principal = await spenderOf(ctx);
  await consumeRateLimit(ctx, principal);
  await ctx.deps.charges.settledFor(principal.accountId);
  return next({ ctx: { ...ctx, principal } });
});

/**
 * The key checked like `spendingProcedure` does, without counting a request: for a transport
 * that must refuse a bad key at its door (MCP answers 401 before it speaks the protocol) and
 * counts each call of a use case instead.
 */
export const spenderCheckProcedure = tracedProcedure.use(async ({ ctx, next }) => {
  const principal = await spenderOf(ctx);
  await ctx.deps.charges.settledFor(principal.accountId);
  return next({ ctx: { ...ctx, principal } });
});

/**
 * `spendingProcedure` for chat completions, the hot path: the key of a paid account may come
 * from the cache of recent look-ups, which saves a round trip to the database. A revoked key
 * still stops working at once: the chat reservation carries the key id and refuses a revoked
 * key in the same statement, before anything is spent; and a call on a cached key that fails
 * for any reason checks the key again, so a revoked key is answered 401, never another error.
 */
export const chatProcedure = tracedProcedure.use(async ({ ctx, next }) => {
  const bearer = bearerOf(ctx);
  const principal: SpendingPrincipal = isAppToken(bearer) ? await spenderOf(ctx) : await authenticate(ctx.deps.keys, bearer, ctx.deps.lastUsed, { recent: true, now: ctx.deps.clock() });
  annotatePrincipal(principal);
  // Throws `unauthorized` when the cached key has been revoked since.
  const recheck = async () => {
    if (principal.fromCache) await authenticate(ctx.deps.keys, bearer, ctx.deps.lastUsed, { now: ctx.deps.clock() });
  };
  await consumeRateLimit(ctx, principal).catch(async (err: unknown) => {
    await recheck();
    throw err;
  });
  const result = await next({ ctx: { ...ctx, principal } });
  if (!result.ok) await recheck();
  return result;
});

/** A person signed in to the account pages: their account is `ctx.principal.accountId`. */
export const sessionProcedure = tracedProcedure.use(async ({ ctx, next }) => {
  if (ctx.credential.kind !== 'session') throw unauthorized('session');
  const principal: SessionPrincipal = await authenticateSession(ctx.em, ctx.credential.token, ctx.deps.clock());
  annotatePrincipal(principal);
  await ctx.deps.charges.settledFor(principal.accountId);
  return next({ ctx: { ...ctx, principal } });
});

/**
 * Keys and organizations, managed by a person (docs/organizations.md): signed in to the account
 * pages, or through a management key (`Authorization: Bearer`, checked and counted like an API
 * key; an API key for models is refused, 403). `ctx.actor` is the person and, for a key made for
 * one organization, that organization; roles are checked by each use case.
 */
export const managerProcedure = tracedProcedure.use(async ({ ctx, next }) => {
  if (ctx.credential.kind === 'session') {
    const principal: SessionPrincipal = await authenticateSession(ctx.em, ctx.credential.token, ctx.deps.clock());
    annotatePrincipal(principal);
    await ctx.deps.charges.settledFor(principal.accountId);
    const actor: Actor = { personId: principal.accountId, organizationId: null };
    return next({ ctx: { ...ctx, principal, actor } });
  }
  const principal = await authenticateManagement(ctx.deps.keys, bearerOf(ctx), ctx.deps.lastUsed, ctx.deps.clock());
  annotatePrincipal(principal);
  await consumeRateLimit(ctx, principal);
  await ctx.deps.charges.settledFor(principal.accountId);
  const actor: Actor = { personId: principal.personId, organizationId: principal.organizationId, keyId: principal.keyId };
  return next({ ctx: { ...ctx, principal, actor } });
});

/** `managerProcedure` for making keys and organizations: a signed-in person's e-mail must be confirmed (a management key's maker's was). */
export const verifiedManagerProcedure = managerProcedure.use(async ({ ctx, next }) => {
  if (ctx.principal.kind === 'session') await requireVerifiedEmail(ctx.em, ctx.principal.accountId);
  return next();
});

/**
 * The account's own payments (docs/payments.md): an API key, checked and counted as by
 * `spendingProcedure` (a customer's back office), or a person signed in to the account pages.
 * One use case, whichever of the two calls it.
 */
export const payerProcedure = tracedProcedure.use(async ({ ctx, next }) => {
  if (ctx.credential.kind === 'session') {
    const principal: SessionPrincipal = await authenticateSession(ctx.em, ctx.credential.token, ctx.deps.clock());
    annotatePrincipal(principal);
    await ctx.deps.charges.settledFor(principal.accountId);
    return next({ ctx: { ...ctx, principal } });
  }
  const principal = await spenderOf(ctx);
  await consumeRateLimit(ctx, principal);
  await ctx.deps.charges.settledFor(principal.accountId);
  return next({ ctx: { ...ctx, principal } });
});

/**
 * `sessionProcedure` for what waits until the account's e-mail address is confirmed (creating
 * API keys, allowing an app): an account made on the sign-up page is refused until its link is
 * followed (docs/accounts.md).
 */
export const verifiedSessionProcedure = sessionProcedure.use(async ({ ctx, next }) => {
  await requireVerifiedEmail(ctx.em, ctx.principal.accountId);
  return next();
});

/** `payerProcedure` for paying: a signed-in person's account must have its e-mail confirmed (a key's account always has). */
export const verifiedPayerProcedure = payerProcedure.use(async ({ ctx, next }) => {
  if (ctx.principal.kind === 'session') await requireVerifiedEmail(ctx.em, ctx.principal.accountId);
  return next();
});

/** Reads for operators: an admin token of any role, or the internal caller (the CLI). */
export const adminProcedure = tracedProcedure.use(async ({ ctx, next }) => {
  const principal: AdminPrincipal | InternalPrincipal = await operatorOf(ctx);
  await ctx.deps.charges.settledAll();
  return next({ ctx: { ...ctx, principal } });
});

/** Actions of operators (accounts, credits, keys of any account, the catalog): the `operator` role, or the internal caller. */
export const operatorProcedure = tracedProcedure.use(async ({ ctx, next }) => {
  const principal: AdminPrincipal | InternalPrincipal = await operatorOf(ctx);
  if (principal.kind === 'admin' && principal.role !== 'operator') {
    throw new CoreError('forbidden', 'This action needs an admin token with the operator role.', { reason: 'operator_role_required' });
  }
  await ctx.deps.charges.settledAll();
  return next({ ctx: { ...ctx, principal } });
});

async function operatorOf(ctx: CoreContext): Promise<AdminPrincipal | InternalPrincipal> {
  if (ctx.credential.kind === 'internal') return { kind: 'internal' };
  if (ctx.credential.kind === 'admin') {
    // An admin user's session (the admin pages) or an admin token (scripts, dashboards).
    return isAdminSessionToken(ctx.credential.token)
      ? authenticateAdminSession(ctx.em, ctx.credential.token, ctx.deps.clock())
      : authenticateAdmin(ctx.em, ctx.credential.token);
  }
  throw unauthorized('admin');
}

/** The service's own steps (workflow activities, sweeps): only in-process callers, never a network adapter. */
export const internalProcedure = tracedProcedure.use(({ ctx, next }) => {
  if (ctx.credential.kind !== 'internal') throw new CoreError('forbidden', 'This operation is internal.', { reason: 'internal_only' });
  const principal: InternalPrincipal = { kind: 'internal' };
  return next({ ctx: { ...ctx, principal } });
});

/**
 * The spender behind a bearer credential: an API key, or an app's OAuth access token for the
 * resource the adapter serves (core/oauth/tokens.ts). Both spend through a key, counted and
 * limited alike; the app's key is the one its connection owns.
 */
async function spenderOf(ctx: CoreContext): Promise<SpendingPrincipal> {
  const bearer = bearerOf(ctx);
  if (!isAppToken(bearer)) {
    const principal = await authenticate(ctx.deps.keys, bearer, ctx.deps.lastUsed, { now: ctx.deps.clock() });
    annotatePrincipal(principal);
    return principal;
  }
  const resource = ctx.credential.kind === 'bearer' ? ctx.credential.resource : undefined;
  const principal = await authenticateAppToken(ctx.em, bearer!, resource, ctx.deps.clock());
  ctx.deps.lastUsed.touch(principal.keyId);
  annotatePrincipal(principal);
  return principal;
}

const isAppToken = (bearer: string | null) => bearer !== null && bearer.startsWith(ACCESS_TOKEN_PREFIX);

function bearerOf(ctx: CoreContext): string | null {
  if (ctx.credential.kind !== 'bearer') throw unauthorized();
  return ctx.credential.token;
}

async function consumeRateLimit(ctx: CoreContext, principal: SpendingPrincipal | ManagementPrincipal): Promise<void> {
  // A transport that calls core twice for one request shares `meta`: the request counts once.
  const limit = ctx.meta.rateLimit ?? (await ctx.deps.rateLimiter.consume(principal.keyId));
  ctx.meta.rateLimit = limit;
  if (!limit.allowed) {
    throw new CoreError('rate_limited', `Rate limit reached: ${limit.limit} requests per minute per API key. Retry in ${limit.resetSeconds} s.`, {
      reason: 'rate_limit_exceeded',
      retryAfterSeconds: limit.resetSeconds,
    });
  }
}

/**
 * What a procedure call threw, as a CoreError when it is one: tRPC wraps errors thrown inside
 * procedures, and input validation fails with a ZodError. Anything else is a bug (undefined).
 */
export function toCoreError(err: unknown): CoreError | undefined {
  const cause = err instanceof TRPCError ? (err.cause ?? err) : err;
  if (isCoreError(cause)) return cause;
  if (isDatabaseUnreachable(cause)) {
    return new CoreError('unavailable', 'The service cannot reach its database. Retry shortly.', { reason: 'database_unreachable' });
  }
  if (cause instanceof DriverException && String(cause.code) === STATEMENT_TIMEOUT) {
    return new CoreError('unavailable', 'The database is too busy to answer in time. Retry shortly.', { reason: 'database_timeout' });
  }
  if (isNulRefusal(cause)) {
    return new CoreError('invalid_request', 'Invalid request: text must not contain the NUL character (\\u0000).', { reason: 'invalid_value' });
  }
  if (cause instanceof ZodError) {
    const issue = mostSpecific(cause.issues[0]);
    const path = issue?.path ?? [];
    const param = path.map(String).join('.') || undefined;
    const missing = issue?.code === 'invalid_type' && /received undefined$/.test(issue.message);
    const detail = (issue?.message ?? 'invalid').replace(/^Invalid input: /, '');
    const message = param
      ? missing
        ? `Missing required parameter: '${param}'.`
        : `Invalid value for '${param}': ${detail}.`
      : `Invalid request: ${detail}.`;
    return new CoreError('invalid_request', message, {
      ...(param ? { param } : {}),
      reason: missing ? 'missing_field' : 'invalid_value',
    });
  }
  return undefined;
}

/** query_canceled: this service cancels no query itself, so it is a statement_timeout. */
const STATEMENT_TIMEOUT = '57014';

/** Socket errors and the SQLSTATEs of a database that is down, starting, stopping or full. */
const UNREACHABLE_CODES = new Set([
  'ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'ENOTFOUND', 'EHOSTUNREACH', 'EPIPE',
  '57P01', '57P02', '57P03', '08000', '08001', '08003', '08004', '08006', '53300',
]);

function isDatabaseUnreachable(err: unknown): boolean {
  if (err instanceof ConnectionException) return true;
  return err instanceof DriverException && UNREACHABLE_CODES.has(String(err.code));
}

/**
 * Text holding U+0000, which PostgreSQL stores in neither text nor JSONB: refused by the database
 * when a statement carries it (a job's prompt, a key's name, an id looked up), inside the use
 * case's transaction, so nothing was reserved or written. A client's error, not ours: 400. It is
 * not checked before (a walk of every request's input would also refuse the fields a schema
 * ignores); the OpenAPI document states the rule (adapters/rest/openapi.ts).
 * 22021: invalid byte sequence (0x00 in text), 22P05: untranslatable character (\u0000 in JSONB),
 * 08P01 "invalid message format": a bound parameter holding a NUL.
 */
function isNulRefusal(err: unknown): boolean {
  if (!(err instanceof DriverException)) return false;
  const code = String(err.code);
  return code === '22021' || code === '22P05' || (code === '08P01' && /invalid message format/.test(err.message));
}

type Issue = ZodError['issues'][number];

/**
 * For a value that matched no branch of a union (content: a string or a list of parts), the
 * useful complaint is the one from the branch the value was shaped like, not "invalid input".
 */
function mostSpecific(issue: Issue | undefined): Issue | undefined {
  if (!issue || issue.code !== 'invalid_union' || !('errors' in issue)) return issue;
  const branches = (issue.errors as Issue[][]).filter((b) => b.length > 0);
  const shaped = branches.find((b) => !(b[0]!.code === 'invalid_type' && b[0]!.path.length === 0)) ?? branches[0];
  const inner = shaped?.[0];
  return inner ? mostSpecific({ ...inner, path: [...issue.path, ...inner.path] } as Issue) : issue;
}
