import type { ArgBuilder, SchemaTypes } from '@pothos/core';
import { builder } from '../builder.ts';

/**
 * Relay connections over core's pages (`{data, has_more}`, newest first, at most 100): `first`
 * and `after` only (forward paging); a cursor is the id of its row, as REST's `starting_after`.
 */
type Types = typeof builder extends PothosSchemaTypes.SchemaBuilder<infer T extends SchemaTypes> ? T : never;

export const DEFAULT_PAGE = 20;

export const pageArgs = (arg: ArgBuilder<Types>) => ({
  first: arg.int({ defaultValue: DEFAULT_PAGE, description: 'How many rows, 1 to 100.' }),
  after: arg.string({ description: 'The `endCursor` of the previous page.' }),
});

/** A connection costs its `first` times what each row selects (the complexity limit). */
export const pageComplexity = (args: { first?: number | null }) => ({ field: 1, multiplier: Math.max(1, args.first ?? DEFAULT_PAGE) });

/** The page arguments as core takes them. */
export const pageOf = (args: { first?: number | null; after?: string | null }) => ({ first: args.first ?? DEFAULT_PAGE, after: args.after ?? undefined });

export function connection<T extends { id: string }>(page: { data: T[]; has_more: boolean }) {
  const edges = page.data.map((node) => ({ cursor: node.id, node }));
  return {
    edges,
    pageInfo: { hasNextPage: page.has_more, hasPreviousPage: false, startCursor: edges[0]?.cursor ?? null, endCursor: edges.at(-1)?.cursor ?? null },
  };
}

/** GraphQL's null (an argument left out or sent as null) is core's absent value. */
export function present<T extends Record<string, unknown>>(values: T): { [K in keyof T]: Exclude<T[K], null> } {
  return Object.fromEntries(Object.entries(values).filter(([, v]) => v !== null && v !== undefined)) as { [K in keyof T]: Exclude<T[K], null> };
}

/** A creation-time range, in every filter. */
export const timeRangeFields = (t: PothosSchemaTypes.InputFieldBuilder<Types, 'InputObject'>) => ({
  since: t.field({ type: 'DateTime', description: 'Created at or after this time.' }),
  until: t.field({ type: 'DateTime', description: 'Created before this time.' }),
});
