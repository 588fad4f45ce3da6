import { Ajv2020 } from 'ajv/dist/2020.js';
import { describe, expect, it } from 'vitest';
import { DEFINITIONS } from '../../adapters/mcp/dispatch.ts';
import { acceptsAnything, portableSchema } from '../../adapters/mcp/portable-schema.ts';

/**
 * The tool schemas that tools/list sends have none of what strict clients warn about (the MCP
 * Inspector's `--strict` lint): no schema without a validation keyword (a bare `{}`), no
 * boolean schema outside the keywords that take one, no array `type`. The walk follows the
 * same subschema keywords as that lint.
 */
const BOOLEAN_VALUED = new Set(['additionalProperties', 'unevaluatedProperties', 'additionalItems', 'unevaluatedItems']);
const ONE = ['items', 'contains', 'not', 'propertyNames', 'if', 'then', 'else', 'contentSchema', ...BOOLEAN_VALUED];
const MAP = ['properties', 'patternProperties', 'dependentSchemas', 'dependencies', '$defs', 'definitions'];
const LIST = ['allOf', 'anyOf', 'oneOf', 'prefixItems'];

function findings(node: unknown, path: string, keyword: string | undefined, out: string[]): string[] {
  if (typeof node === 'boolean') {
    if (keyword === undefined || !BOOLEAN_VALUED.has(keyword)) out.push(`${path}: boolean schema`);
    return out;
  }
  if (typeof node !== 'object' || node === null || Array.isArray(node)) return out;
  const s = node as Record<string, unknown>;
  if (Array.isArray(s.type)) out.push(`${path}: type ${JSON.stringify(s.type)}`);
  if (acceptsAnything(s) && keyword !== 'not') out.push(`${path}: no validation keyword ${JSON.stringify(s)}`);
  for (const k of ONE) if (k in s) findings(s[k], `${path}.${k}`, k, out);
  for (const k of MAP) for (const [name, sub] of Object.entries((s[k] as Record<string, unknown> | undefined) ?? {})) findings(sub, `${path}.${k}.${name}`, k, out);
  for (const k of LIST) ((s[k] as unknown[] | undefined) ?? []).forEach((sub, i) => findings(sub, `${path}.${k}[${i}]`, k, out));
  return out;
}

describe('MCP tool schemas are strict-client clean', () => {
  it.each(DEFINITIONS.map((d) => [d.name, d] as const))('%s: no bare {}, no boolean schema, no type array', (_name, d) => {
    expect(findings(d.inputSchema, 'inputSchema', undefined, [])).toEqual([]);
    expect(findings(d.outputSchema, 'outputSchema', undefined, [])).toEqual([]);
  });

  it('the walk finds what the lint finds (so that the test above can fail)', () => {
    const raw = { type: 'object', properties: { a: { type: ['string', 'null'] }, b: {}, c: { description: 'x' }, d: { items: true } }, additionalProperties: {} };
    expect(findings(raw, 's', undefined, [])).toEqual([
      's.additionalProperties: no validation keyword {}',
      's.properties.a: type ["string","null"]',
      's.properties.b: no validation keyword {}',
      's.properties.c: no validation keyword {"description":"x"}',
      's.properties.d.items: boolean schema',
    ]);
  });
});

describe('MCP tool arguments are described', () => {
  // Agents choose arguments from their descriptions: an argument without one is guessed at.
  it.each(DEFINITIONS.map((d) => [d.name, d] as const))('%s: every argument has a description', (_name, d) => {
    const properties = (d.inputSchema.properties ?? {}) as Record<string, { description?: unknown }>;
    const undescribed = Object.entries(properties).filter(([, p]) => typeof p.description !== 'string' || p.description.trim().length < 10).map(([name]) => name);
    expect(undescribed).toEqual([]);
  });
});

describe('portableSchema', () => {
  it('writes an open additionalProperties as true, and only when it accepts anything', () => {
    expect(portableSchema({ type: 'object', additionalProperties: {} })).toEqual({ type: 'object', additionalProperties: true });
    expect(portableSchema({ type: 'object', additionalProperties: { description: 'any' } })).toEqual({ type: 'object', additionalProperties: true });
    expect(portableSchema({ type: 'object', additionalProperties: { type: 'string' } })).toEqual({ type: 'object', additionalProperties: { type: 'string' } });
    expect(portableSchema({ type: 'object', additionalProperties: false })).toEqual({ type: 'object', additionalProperties: false });
    expect(portableSchema({ type: 'object', additionalProperties: { type: 'object', additionalProperties: {} } })).toEqual({
      type: 'object',
      additionalProperties: { type: 'object', additionalProperties: true },
    });
  });

  it('splits a type array into anyOf branches, keeping the other keywords beside them', () => {
    expect(portableSchema({ type: ['string', 'null'], maxLength: 3, description: 'd' })).toEqual({ maxLength: 3, description: 'd', anyOf: [{ type: 'string' }, { type: 'null' }] });
    // An anyOf already there: both must hold.
    expect(portableSchema({ type: ['string', 'null'], anyOf: [{ minLength: 1 }, { type: 'null' }] })).toEqual({
      anyOf: [{ minLength: 1 }, { type: 'null' }],
      allOf: [{ anyOf: [{ type: 'string' }, { type: 'null' }] }],
    });
    expect(portableSchema({ type: 'string' })).toEqual({ type: 'string' });
  });

  it('rewrites inside properties, items, anyOf/oneOf/allOf, $defs and not', () => {
    const n = { type: ['integer', 'null'] };
    const split = { anyOf: [{ type: 'integer' }, { type: 'null' }] };
    expect(
      portableSchema({
        properties: { a: n },
        items: n,
        anyOf: [n],
        oneOf: [n],
        allOf: [n],
        prefixItems: [n],
        $defs: { d: n },
        not: n,
        patternProperties: { '^x': n },
      }),
    ).toEqual({ properties: { a: split }, items: split, anyOf: [split], oneOf: [split], allOf: [split], prefixItems: [split], $defs: { d: split }, not: split, patternProperties: { '^x': split } });
  });

  it('accepts and refuses exactly what the original schema does', () => {
    const ajv = new Ajv2020({ strict: false });
    const original = {
      type: 'object',
      properties: { s: { type: ['string', 'null'], maxLength: 3 }, r: { type: 'object', additionalProperties: {} } },
      required: ['s'],
      additionalProperties: false,
    };
    const a = ajv.compile(original);
    const b = ajv.compile(portableSchema(original));
    const values = [{ s: 'abc' }, { s: null }, { s: 'abcd' }, { s: 1 }, {}, { s: 'a', r: { x: [1, { y: null }] } }, { s: 'a', r: 1 }, { s: 'a', extra: 1 }];
    expect(values.map((v) => b(v))).toEqual(values.map((v) => a(v)));
    expect(values.map((v) => a(v))).toEqual([true, true, false, false, false, true, false, false]);
  });
});
