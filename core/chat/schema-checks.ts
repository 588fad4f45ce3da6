/**
 * What can be seen wrong in a JSON Schema from its keywords alone, before (and beyond) compiling
 * it: a `$ref` loop that no value can end (Ajv overflows its stack on it), and a schema that no
 * value can satisfy. Both walks are bounded by the schema's size and depth, which json-schema.ts
 * checks first.
 */

/** Keywords whose subschemas apply to the same value as the schema holding them (in place). */
const IN_PLACE_ONE = ['not', 'if', 'then', 'else'];
const IN_PLACE_LIST = ['allOf', 'anyOf', 'oneOf'];
const IN_PLACE_MAP = ['dependentSchemas', 'dependencies'];
/** Keywords whose subschemas apply to a part of the value (a property, an item): a loop through them ends with the value. */
const CHILD_ONE = ['items', 'additionalItems', 'contains', 'additionalProperties', 'propertyNames', 'unevaluatedItems', 'unevaluatedProperties', 'contentSchema'];
const CHILD_LIST = ['items', 'prefixItems'];
const CHILD_MAP = ['properties', 'patternProperties'];
const REFS = ['$ref', '$dynamicRef', '$recursiveRef'];

/**
 * A loop of `$ref`s that never goes into a part of the value: `{"$ref": "#"}`, a property whose
 * `$ref` names itself, two definitions that name each other, `{"anyOf": [{"$ref": "#"}]}`. No
 * value can be checked against such a schema (Ajv overflows its stack compiling it). Recursion
 * through a property or an item (`{"properties": {"next": {"$ref": "#"}}}`, a tree) is fine: it
 * ends with the value. Found by an iterative walk over the subschemas the root reaches, following
 * local JSON-pointer `$ref`s (from the nearest `$id`); bounded, as the schema's size already is.
 */
export function refLoop(schema: unknown): string | undefined {
  interface Node {
    path: string;
    inPlace: object[];
  }
  const nodes = new Map<object, Node>();
  if (schema === null || typeof schema !== 'object') return undefined;
  const stack: { node: unknown; path: string; base: object }[] = [{ node: schema, path: '#', base: schema }];
  const objectAt = (value: unknown) => (value !== null && typeof value === 'object' && !Array.isArray(value) ? value : undefined);
  while (stack.length > 0) {
    const { node, path, base: outer } = stack.pop()!;
    const s = objectAt(node) as Record<string, unknown> | undefined;
    if (!s || nodes.has(s)) continue;
    const base = typeof s.$id === 'string' && !s.$id.startsWith('#') ? s : outer;
    const here: Node = { path, inPlace: [] };
    nodes.set(s, here);
    const visit = (child: unknown, childPath: string, inPlace: boolean, childBase = base) => {
      const target = objectAt(child);
      if (!target) return;
      if (inPlace) here.inPlace.push(target);
      stack.push({ node: target, path: childPath, base: childBase });
    };
    for (const k of IN_PLACE_ONE) visit(s[k], `${path}/${k}`, true);
    for (const k of IN_PLACE_LIST) if (Array.isArray(s[k])) (s[k] as unknown[]).forEach((sub, i) => visit(sub, `${path}/${k}/${i}`, true));
    for (const k of IN_PLACE_MAP) for (const [name, sub] of Object.entries(objectAt(s[k]) ?? {})) visit(sub, `${path}/${k}/${pointerToken(name)}`, true);
    for (const k of CHILD_ONE) visit(s[k], `${path}/${k}`, false);
    for (const k of CHILD_LIST) if (Array.isArray(s[k])) (s[k] as unknown[]).forEach((sub, i) => visit(sub, `${path}/${k}/${i}`, false));
    for (const k of CHILD_MAP) for (const [name, sub] of Object.entries(objectAt(s[k]) ?? {})) visit(sub, `${path}/${k}/${pointerToken(name)}`, false);
    for (const k of REFS) {
      const ref = s[k];
      if (typeof ref !== 'string' || !ref.startsWith('#') || (ref.length > 1 && ref[1] !== '/')) continue;
      const resolved = resolvePointer(base, ref);
      if (resolved) visit(resolved.target, ref, true, resolved.base);
    }
  }
  // A cycle among the in-place edges, by an iterative depth-first search.
  const state = new Map<object, 'open' | 'done'>();
  for (const start of nodes.keys()) {
    if (state.has(start)) continue;
    const path: object[] = [start];
    const next: number[] = [0];
    state.set(start, 'open');
    while (path.length > 0) {
      const node = path.at(-1)!;
      const successors = nodes.get(node)!.inPlace;
      const i = next[next.length - 1]!;
      if (i >= successors.length) {
        state.set(node, 'done');
        path.pop();
        next.pop();
        continue;
      }
      next[next.length - 1] = i + 1;
      const to = successors[i]!;
      if (state.get(to) === 'open') {
        const loop = [...path.slice(path.indexOf(to)), to].map((n) => nodes.get(n)!.path);
        return `refers back to itself through $ref without going into a part of the value, so no value can be checked against it: ${loop.slice(0, 8).join(' → ')}${loop.length > 8 ? ' → …' : ''}`;
      }
      if (!state.has(to)) {
        state.set(to, 'open');
        path.push(to);
        next.push(0);
      }
    }
  }
  return undefined;
}

function pointerToken(name: string): string {
  return name.replaceAll('~', '~0').replaceAll('/', '~1');
}

/** The subschema a local JSON pointer (`#/definitions/a`) names from `base`, and the base that applies there; undefined when it names nothing. */
function resolvePointer(base: object, ref: string): { target: unknown; base: object } | undefined {
  let node: unknown = base;
  let scope = base;
  if (ref.length <= 2) return { target: node, base: scope };
  for (const raw of ref.slice(2).split('/')) {
    let token: string;
    try {
      token = decodeURIComponent(raw).replaceAll('~1', '/').replaceAll('~0', '~');
    } catch {
      return undefined;
    }
    if (node === null || typeof node !== 'object' || !Object.hasOwn(node, token)) return undefined;
    node = (node as Record<string, unknown>)[token];
    const id = (node as { $id?: unknown } | null)?.$id;
    if (node !== null && typeof node === 'object' && typeof id === 'string' && !id.startsWith('#')) scope = node;
  }
  return { target: node, base: scope };
}

/** Keywords that only annotate: a schema of these alone accepts every value. */
const ANNOTATIONS = new Set(['$schema', '$id', '$anchor', '$comment', 'title', 'description', 'default', 'examples', 'deprecated', 'readOnly', 'writeOnly', 'definitions', '$defs']);
const TYPES = ['null', 'boolean', 'object', 'array', 'number', 'string'] as const;
type JsonType = (typeof TYPES)[number] | 'integer';

/**
 * Why no value can satisfy the schema, when its keywords say so: `false`, `{"not": {}}`, an empty
 * `enum`, `type`s that `allOf` excludes, `minimum` above `maximum`, `minLength` above
 * `maxLength`, a required property whose schema admits nothing, every `anyOf` alternative
 * impossible… Sound and partial: what it reports is impossible; a schema it passes may still be
 * (a `pattern` nothing matches), and then the model fails as before. A node with a `$ref` is
 * taken as satisfiable. Recursive, within the depth json-schema.ts bounds.
 */
export function unsatisfiable(schema: unknown): string | undefined {
  return emptyBecause(schema, '#', 0);
}

function emptyBecause(node: unknown, path: string, depth: number): string | undefined {
  if (node === false) return `${path} is false`;
  if (node === null || typeof node !== 'object' || Array.isArray(node) || depth > 64) return undefined;
  const s = node as Record<string, unknown>;
  if ('$ref' in s || '$dynamicRef' in s || '$recursiveRef' in s) return undefined;
  if ('not' in s && acceptsAll(s.not)) return `${path}/not excludes every value`;
  for (const [i, sub] of (Array.isArray(s.allOf) ? s.allOf : []).entries()) {
    const why = emptyBecause(sub, `${path}/allOf/${i}`, depth + 1);
    if (why) return why;
  }
  for (const k of ['anyOf', 'oneOf']) {
    const alternatives = Array.isArray(s[k]) ? (s[k] as unknown[]) : undefined;
    if (!alternatives || alternatives.length === 0) continue;
    const whys = alternatives.map((sub, i) => emptyBecause(sub, `${path}/${k}/${i}`, depth + 1));
    if (whys.every(Boolean)) return `no alternative of ${path}/${k} can be satisfied (${whys[0]})`;
  }
  // The types this node allows: its own `type`, narrowed by each allOf member's.
  let types = typesOf(s.type);
  for (const sub of Array.isArray(s.allOf) ? s.allOf : []) types = bothAllow(types, typesOf((sub as { type?: unknown } | null)?.type));
  if (types.size === 0) return `${path}: no type is allowed by its "type" and its allOf together`;
  const fixed = Array.isArray(s.enum) ? s.enum : undefined;
  const candidates = 'const' in s ? (fixed ? fixed.filter((v) => JSON.stringify(v) === JSON.stringify(s.const)) : [s.const]) : fixed;
  if (candidates) {
    if (candidates.length === 0) return `${path}: its "enum"${'const' in s ? ' and "const" leave' : ' leaves'} no value`;
    if (!candidates.some((v) => fits(v, s, types))) return `${path}: none of its "enum" or "const" values fits its other keywords`;
    return undefined;
  }
  const whys = [...types].map((t) => typeEmptyBecause(t, s, path, depth));
  return whys.every(Boolean) ? whys[0] : undefined;
}

function acceptsAll(node: unknown): boolean {
  if (node === true) return true;
  if (node === null || typeof node !== 'object' || Array.isArray(node)) return false;
  return Object.keys(node).every((k) => ANNOTATIONS.has(k));
}

/** The types both sets allow (an integer is a number). */
function bothAllow(a: Set<JsonType>, b: Set<JsonType>): Set<JsonType> {
  const out = new Set<JsonType>();
  for (const t of a) {
    if (b.has(t)) out.add(t);
    else if ((t === 'number' && b.has('integer')) || (t === 'integer' && b.has('number'))) out.add('integer');
  }
  return out;
}

function typesOf(type: unknown): Set<JsonType> {
  const named = typeof type === 'string' ? [type] : Array.isArray(type) ? type : undefined;
  if (!named) return new Set(TYPES);
  return new Set(named.filter((t): t is JsonType => t === 'integer' || (TYPES as readonly string[]).includes(t as string)));
}

const num = (v: unknown) => (typeof v === 'number' && Number.isFinite(v) ? v : undefined);

/** The numbers a node allows: [low, high], whether each end is excluded. */
function numberRange(s: Record<string, unknown>) {
  let low = -Infinity;
  let high = Infinity;
  let lowOpen = false;
  let highOpen = false;
  if (num(s.minimum) !== undefined) low = num(s.minimum)!;
  if (num(s.exclusiveMinimum) !== undefined && num(s.exclusiveMinimum)! >= low) [low, lowOpen] = [num(s.exclusiveMinimum)!, true];
  if (num(s.maximum) !== undefined) high = num(s.maximum)!;
  if (num(s.exclusiveMaximum) !== undefined && num(s.exclusiveMaximum)! <= high) [high, highOpen] = [num(s.exclusiveMaximum)!, true];
  return { low, high, lowOpen, highOpen };
}

function typeEmptyBecause(type: JsonType, s: Record<string, unknown>, path: string, depth: number): string | undefined {
  switch (type) {
    case 'number':
    case 'integer': {
      const { low, high, lowOpen, highOpen } = numberRange(s);
      const none = low > high || (low === high && (lowOpen || highOpen));
      const noInteger = type === 'integer' && (lowOpen ? Math.floor(low) + 1 : Math.ceil(low)) > (highOpen ? Math.ceil(high) - 1 : Math.floor(high));
      return none || noInteger ? `${path}: its minimum and maximum leave no ${type === 'integer' ? 'integer' : 'number'}` : undefined;
    }
    case 'string':
      return (num(s.minLength) ?? 0) > (num(s.maxLength) ?? Infinity) ? `${path}: its minLength is above its maxLength` : undefined;
    case 'array': {
      const min = num(s.minItems) ?? 0;
      if (min > (num(s.maxItems) ?? Infinity)) return `${path}: its minItems is above its maxItems`;
      if (min > 0 && !Array.isArray(s.items) && !('prefixItems' in s) && s.items !== undefined && emptyBecause(s.items, `${path}/items`, depth + 1)) {
        return `${path}: it needs ${min} item(s), and ${path}/items admits none`;
      }
      if ('contains' in s && (num(s.minContains) ?? 1) > 0 && emptyBecause(s.contains, `${path}/contains`, depth + 1)) return `${path}/contains admits no item`;
      return undefined;
    }
    case 'object': {
      const max = num(s.maxProperties) ?? Infinity;
      if ((num(s.minProperties) ?? 0) > max) return `${path}: its minProperties is above its maxProperties`;
      const required = [...new Set(Array.isArray(s.required) ? s.required.filter((r): r is string => typeof r === 'string') : [])];
      if (required.length > max) return `${path}: it requires ${required.length} properties and allows at most ${max}`;
      const properties = (s.properties !== null && typeof s.properties === 'object' ? s.properties : {}) as Record<string, unknown>;
      const patterned = s.patternProperties !== undefined;
      for (const name of required) {
        const own = Object.hasOwn(properties, name);
        if (!own && patterned) continue;
        const sub = own ? properties[name] : s.additionalProperties;
        if (sub === undefined) continue;
        const why = emptyBecause(sub, own ? `${path}/properties/${name}` : `${path}/additionalProperties`, depth + 1);
        if (why) return `${path}: its required property "${name}" can have no value (${why})`;
      }
      if ((required.length > 0 || (num(s.minProperties) ?? 0) > 0) && 'propertyNames' in s && emptyBecause(s.propertyNames, `${path}/propertyNames`, depth + 1)) {
        return `${path}: it needs a property, and its propertyNames admits no name`;
      }
      return undefined;
    }
    default:
      return undefined;
  }
}

/** Whether an `enum` or `const` value is of an allowed type and within the node's bounds. */
function fits(value: unknown, s: Record<string, unknown>, types: Set<JsonType>): boolean {
  const kind = value === null ? 'null' : Array.isArray(value) ? 'array' : typeof value;
  if (kind === 'number') {
    const n = value as number;
    if (!types.has('number') && !(types.has('integer') && Number.isInteger(n))) return false;
    const { low, high, lowOpen, highOpen } = numberRange(s);
    return (lowOpen ? n > low : n >= low) && (highOpen ? n < high : n <= high);
  }
  if (!types.has(kind as JsonType)) return false;
  if (kind === 'string') return (value as string).length >= (num(s.minLength) ?? 0) && (value as string).length <= (num(s.maxLength) ?? Infinity);
  if (kind === 'array') return (value as unknown[]).length >= (num(s.minItems) ?? 0) && (value as unknown[]).length <= (num(s.maxItems) ?? Infinity);
  if (kind === 'object') {
    const keys = Object.keys(value as object);
    const required = Array.isArray(s.required) ? s.required : [];
    return required.every((r) => typeof r !== 'string' || keys.includes(r)) && keys.length >= (num(s.minProperties) ?? 0) && keys.length <= (num(s.maxProperties) ?? Infinity);
  }
  return true;
}
