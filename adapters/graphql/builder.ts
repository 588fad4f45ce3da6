import SchemaBuilder from '@pothos/core';
import ComplexityPlugin, { ComplexityErrorKind } from '@pothos/plugin-complexity';
import DataloaderPlugin from '@pothos/plugin-dataloader';
import RelayPlugin from '@pothos/plugin-relay';
import { GraphQLError, Kind, valueFromASTUntyped } from './graphql-js.ts';
import type { GraphQLContext } from './context.ts';
import { LIMITS } from './limits.ts';

/**
 * The schema builder (code first, Pothos): one builder, one schema file per domain in
 * schema/, assembled by schema.ts. Authorization is not here: every resolver calls one core
 * procedure, and core decides who may (adminProcedure reads, operatorProcedure acts).
 */
export const builder = new SchemaBuilder<{
  Context: GraphQLContext;
  DefaultFieldNullability: false;
  DefaultEdgesNullability: false;
  DefaultNodeNullability: false;
  Scalars: {
    ID: { Input: string; Output: string };
    DateTime: { Input: string; Output: string };
    JSON: { Input: unknown; Output: unknown };
    Coins: { Input: string; Output: number };
  };
}>({
  plugins: [ComplexityPlugin, RelayPlugin, DataloaderPlugin],
  // A field is non-null unless it says otherwise: a dashboard can trust what it reads.
  defaultFieldNullability: false,
  relay: {
    clientMutationId: 'omit',
    cursorType: 'String',
    // Objects are named by the service's own ids (acct_…, gen_…), as on every other surface: no global ids, no node(id:).
    nodeQueryOptions: false,
    nodesQueryOptions: false,
    edgesFieldOptions: { nullable: false },
    nodeFieldOptions: { nullable: false },
  },
  complexity: {
    defaultComplexity: 1,
    // Lists multiply nothing by themselves: connections multiply by their `first` (schema/paging.ts).
    defaultListMultiplier: 1,
    limit: { depth: LIMITS.depth, complexity: LIMITS.complexity },
    complexityError: (kind, result) =>
      kind === ComplexityErrorKind.Depth
        ? new GraphQLError(`The query is ${result.depth} levels deep; at most ${result.maxDepth} are allowed.`, { extensions: { code: 'QUERY_TOO_DEEP' } })
        : new GraphQLError(`The query costs ${result.complexity}; at most ${result.maxComplexity} is allowed. Ask for smaller pages (first) or fewer nested lists.`, {
            extensions: { code: 'QUERY_TOO_COMPLEX' },
          }),
  },
});

builder.queryType({ description: 'Reads, for any admin role.' });
builder.mutationType({ description: 'Actions, for the operator role; each one is audited by core.' });

const invalidScalar = (message: string) => new GraphQLError(message, { extensions: { code: 'BAD_USER_INPUT' } });

builder.scalarType('DateTime', {
  description: 'An ISO 8601 time; answers are in UTC (`2026-11-26T03:00:00.000Z`), inputs need an offset or Z.',
  serialize: (v) => String(v),
  parseValue: (v) => {
    if (typeof v !== 'string' || !/^\d{4}-\d\d-\d\dT\d\d:\d\d(:\d\d(\.\d+)?)?(Z|[+-]\d\d:\d\d)$/.test(v) || Number.isNaN(Date.parse(v))) {
      throw invalidScalar('A DateTime is an ISO 8601 time with an offset, such as 2026-11-26T03:00:00Z.');
    }
    return v;
  },
});

builder.scalarType('JSON', {
  description: 'Any JSON value: settings, prices, the before and after of an audit entry.',
  serialize: (v) => v,
  parseValue: (v) => v,
  parseLiteral: (ast, variables) => valueFromASTUntyped(ast, variables),
});

builder.scalarType('Coins', {
  description: 'Coins (1 USD = 1000 coins), at most 6 decimals. Answers are numbers; inputs may be numbers or decimal strings ("12.5"), which keep every digit.',
  serialize: (v) => v,
  parseValue: (v) => {
    if (typeof v === 'number' && Number.isFinite(v)) return String(v);
    if (typeof v === 'string') return v;
    throw invalidScalar('Coins are a number or a decimal string such as "12.5".');
  },
  parseLiteral: (ast) => {
    if (ast.kind === Kind.INT || ast.kind === Kind.FLOAT || ast.kind === Kind.STRING) return ast.value;
    throw invalidScalar('Coins are a number or a decimal string such as "12.5".');
  },
});
