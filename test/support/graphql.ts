import type { MikroORM } from '@mikro-orm/postgresql';
import { expect } from 'vitest';
import { loadCatalogFile } from '../../config/catalog.ts';
import { seedModels } from '../../core/catalog/catalog.ts';
import { createContext, type CoreDeps } from '../../core/context.ts';
import { createCaller } from '../../core/router.ts';
import { openTestOrm, testDeps } from './db.ts';
import { createTestApp, serve } from './http.ts';

export type GraphQLAnswer = { status: number; body: { data?: any; errors?: { message: string; extensions: Record<string, unknown> }[] } };

/**
 * The GraphQL admin API served on a real port, with the catalog seeded and two admin tokens
 * (a viewer's and an operator's), and the helpers its tests share.
 */
export async function startAdminApi() {
  const orm: MikroORM = await openTestOrm();
  const deps: CoreDeps = testDeps(orm);
  await seedModels(orm.em.fork(), await loadCatalogFile('config/models.yaml', 50n));
  const { base, close } = await serve(createTestApp({ deps }));
  const internal = () => createCaller(createContext(deps, { kind: 'internal' }));
  const viewer = (await internal().admins.createToken({ name: 'dashboard', role: 'viewer' })).token;
  const operator = (await internal().admins.createToken({ name: 'ops script', role: 'operator' })).token;

  async function gql(token: string | null, query: string, variables: Record<string, unknown> = {}, headers: Record<string, string> = {}): Promise<GraphQLAnswer> {
    const res = await fetch(`${base}/admin/graphql`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...(token ? { authorization: `Bearer ${token}` } : {}), ...headers },
      body: JSON.stringify({ query, variables }),
    });
    return { status: res.status, body: (await res.json()) as GraphQLAnswer['body'] };
  }

  /** The data, failing with the errors when there are some. */
  async function data(token: string, query: string, variables: Record<string, unknown> = {}) {
    const { status, body } = await gql(token, query, variables);
    expect(body.errors, JSON.stringify(body.errors)).toBeUndefined();
    expect(status).toBe(200);
    return body.data;
  }

  return {
    orm,
    deps,
    base,
    viewer,
    operator,
    internal,
    gql,
    data,
    close: async () => {
      await close();
      await orm.close();
    },
  };
}
