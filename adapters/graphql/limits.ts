import { GraphQLError, Kind, type FragmentDefinitionNode, type SelectionSetNode, type ValidationRule } from './graphql-js.ts';
import type { YogaPlugin } from './yoga.ts';

/**
 * What one request may ask of the admin API. Depth and cost are checked by Pothos's complexity
 * plugin before any resolver runs (builder.ts); aliases and the size of the selection, with
 * fragments expanded, here, while the query is validated; the body size by the adapter's
 * parser. Each refusal is a GraphQL error, never a 500.
 */
export const LIMITS = {
  /** Levels of selections: a connection's edges and node count as two. */
  depth: 8,
  /** Each field costs 1; a connection multiplies what it selects by its `first`. */
  complexity: 5000,
  /** Aliases per operation, fragments expanded: aliases are how one request asks for the same costly field many times. */
  aliases: 30,
  /** Field selections per operation, fragments expanded (each spread counts its fragment again). */
  selections: 1000,
  /** The request body; GraphQL documents here are a few kilobytes. */
  bodyBytes: 100 * 1024,
};

/**
 * Counts aliases and selections per operation, each fragment counted once per spread but
 * walked once (memoised), so a document whose fragments spread each other many times cannot
 * make the count itself costly.
 */
export function selectionLimitsRule(limits: { aliases: number; selections: number }): ValidationRule {
  return (context) => {
    const fragments = new Map<string, FragmentDefinitionNode>();
    for (const d of context.getDocument().definitions) if (d.kind === Kind.FRAGMENT_DEFINITION) fragments.set(d.name.value, d);
    const memo = new Map<string, { aliases: number; selections: number }>();
    const count = (set: SelectionSetNode): { aliases: number; selections: number } => {
      const total = { aliases: 0, selections: 0 };
      const add = (c: { aliases: number; selections: number }) => {
        total.aliases += c.aliases;
        total.selections += c.selections;
      };
      for (const s of set.selections) {
        if (s.kind === Kind.FIELD) {
          add({ aliases: s.alias ? 1 : 0, selections: 1 });
          if (s.selectionSet) add(count(s.selectionSet));
        } else if (s.kind === Kind.INLINE_FRAGMENT) add(count(s.selectionSet));
        else add(fragmentCount(s.name.value));
      }
      return total;
    };
    const fragmentCount = (name: string) => {
      const known = memo.get(name);
      if (known) return known;
      // A cycle (refused by NoFragmentCyclesRule) counts nothing while it is being counted.
      memo.set(name, { aliases: 0, selections: 0 });
      const fragment = fragments.get(name);
      const c = fragment ? count(fragment.selectionSet) : { aliases: 0, selections: 0 };
      memo.set(name, c);
      return c;
    };
    return {
      OperationDefinition(node) {
        const c = count(node.selectionSet);
        if (c.aliases > limits.aliases) {
          context.reportError(new GraphQLError(`The operation uses ${c.aliases} aliases; at most ${limits.aliases} are allowed.`, { nodes: [node], extensions: { code: 'TOO_MANY_ALIASES' } }));
        }
        if (c.selections > limits.selections) {
          context.reportError(
            new GraphQLError(`The operation selects ${c.selections} fields (fragments expanded); at most ${limits.selections} are allowed.`, { nodes: [node], extensions: { code: 'TOO_MANY_SELECTIONS' } }),
          );
        }
      },
    };
  };
}

/** Adds the rule to Yoga's validation. */
export function selectionLimits(limits: { aliases: number; selections: number }): YogaPlugin {
  const rule = selectionLimitsRule(limits);
  return { onValidate: ({ addValidationRule }) => addValidationRule(rule) };
}
