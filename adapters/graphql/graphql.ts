import express, { Router, type ErrorRequestHandler, type Request } from 'express';
import type { Logger } from 'pino';
import { createContext, type CoreDeps } from '../../core/context.ts';
import { createCaller } from '../../core/router.ts';
import { toCoreError } from '../../core/trpc.ts';
import { HTTP_STATUS } from '../http/status.ts';
import type { HttpAdapter } from '../http/app.ts';
import type { GraphQLContext, TemporalUi } from './context.ts';
import { maskError, requestErrorBody } from './errors.ts';
import { LIMITS, selectionLimits } from './limits.ts';
import { schema } from './schema.ts';
import { createYoga } from './yoga.ts';

export const GRAPHQL_PATH = '/admin/graphql';

export interface GraphqlOptions extends Partial<TemporalUi> {
  logger: Logger;
}

/**
 * The admin API (docs/admin.graphql): GraphQL over POST at /admin/graphql, with
 * `Authorization: Bearer <admin token>`. The door checks the token with core (admin.whoami)
 * before the body is read or Yoga runs: an API key, an account session or nothing gets 401
 * and learns nothing of the schema. Then one core caller serves the whole request.
 */
export function graphqlAdapter(deps: CoreDeps, opts: GraphqlOptions): HttpAdapter {
  const yoga = createYoga<GraphQLContext>({
    schema,
    graphqlEndpoint: GRAPHQL_PATH,
    graphiql: false,
    landingPage: false,
    logging: false,
    batching: false,
    maskedErrors: { maskError: maskError(opts.logger) },
    plugins: [selectionLimits(LIMITS)],
    context: ({ res }) => res.locals.graphql as GraphQLContext,
  });
  const temporal: TemporalUi = { uiUrl: opts.uiUrl, namespace: opts.namespace ?? 'default' };

  const router = Router();
  router.use((_req, res, next) => {
    res.locals.route = GRAPHQL_PATH;
    next();
  });
  router.post(
    '/',
    async (req, res, next) => {
      const core = createCaller(createContext(deps, { kind: 'admin', token: bearer(req) }, { requestId: String(req.id) }));
      try {
        const admin = await core.admin.whoami();
        res.locals.graphql = { core, admin, temporal, logger: req.log ?? opts.logger } satisfies GraphQLContext;
        next();
      } catch (err) {
        const failure = toCoreError(err);
        if (!failure) return next(err);
        if (failure.code === 'unauthorized') res.setHeader('WWW-Authenticate', 'Bearer realm="mas-admin"');
        const code = failure.code === 'unauthorized' ? 'UNAUTHENTICATED' : 'SERVICE_UNAVAILABLE';
        res.status(HTTP_STATUS[failure.code]).json(requestErrorBody(`${failure.message} Send an admin token as "Authorization: Bearer <token>".`, code));
      }
    },
    // Every body is read as JSON, whatever its Content-Type: Yoga never reads an unbounded body itself.
    express.json({ limit: LIMITS.bodyBytes, strict: true, type: () => true }),
    (req, res) => yoga(req, res),
  );
  router.all('/', (_req, res) => {
    res.setHeader('Allow', 'POST');
    res.status(405).json(requestErrorBody('Send GraphQL requests with POST.', 'METHOD_NOT_ALLOWED'));
  });
  router.use((_req, res) => res.status(404).json(requestErrorBody('Unknown route.', 'NOT_FOUND')));
  router.use(bodyErrors(opts.logger));
  return { path: GRAPHQL_PATH, router };
}

/** The body parser's refusals, in the GraphQL error shape; anything else is a logged 500. */
function bodyErrors(logger: Logger): ErrorRequestHandler {
  return (err: { type?: string; status?: number }, req, res, _next) => {
    if (res.headersSent) return void res.destroy();
    if (err.type === 'entity.too.large') {
      return void res.status(413).json(requestErrorBody(`The request body is too large: at most ${LIMITS.bodyBytes / 1024} KB.`, 'REQUEST_TOO_LARGE'));
    }
    if (typeof err.status === 'number' && err.status >= 400 && err.status < 500) {
      return void res.status(400).json(requestErrorBody('The request body is not a JSON GraphQL request.', 'BAD_REQUEST'));
    }
    (req.log ?? logger).error({ err }, 'unhandled error');
    res.status(500).json(requestErrorBody('Internal server error. The request id is in the x-request-id header.', 'INTERNAL_SERVER_ERROR'));
  };
}

function bearer(req: Request): string | null {
  return /^Bearer[ ]+(\S+)\s*$/i.exec(req.headers.authorization ?? '')?.[1] ?? null;
}
