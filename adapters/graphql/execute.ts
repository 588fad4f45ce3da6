import type { Logger } from 'pino';
import { createContext, type CoreDeps } from '../../core/context.ts';
import { createCaller } from '../../core/router.ts';
import type { GraphQLContext, TemporalUi } from './context.ts';
import { maskError } from './errors.ts';
import { graphql, type GraphQLError } from './graphql-js.ts';
import { schema } from './schema.ts';

export interface AdminQueryOptions {
  temporal: TemporalUi;
  logger: Logger;
  requestId?: string;
  clientIp?: string | undefined;
}

/**
 * Runs one admin GraphQL operation in this process, with the context the GraphQL adapter
 * builds (a core caller with the credential, the admin from admin.whoami): the admin pages
 * read and act through the same queries as the admin API. The door check (whoami) throws
 * core's errors (unauthorized when the session ended); GraphQL errors are returned masked as
 * the API masks them (a core error's message and code; anything else without its details).
 */
export async function executeAdminQuery<T = Record<string, unknown>>(
  deps: CoreDeps,
  credential: { kind: 'admin'; token: string | null },
  source: string,
  variables: Record<string, unknown>,
  opts: AdminQueryOptions,
): Promise<{ data: T | null; errors: readonly GraphQLError[] }> {
  const core = createCaller(createContext(deps, credential, { requestId: opts.requestId, clientIp: opts.clientIp }));
  const admin = await core.admin.whoami();
  const contextValue: GraphQLContext = { core, admin, temporal: opts.temporal, logger: opts.logger };
  const result = await graphql({ schema, source, variableValues: variables, contextValue });
  const mask = maskError(opts.logger);
  return { data: (result.data ?? null) as T | null, errors: (result.errors ?? []).map((e) => mask(e) as GraphQLError) };
}
