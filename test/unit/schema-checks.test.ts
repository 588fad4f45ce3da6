import { describe, expect, it } from 'vitest';
import { refLoop, unsatisfiable } from '../../core/chat/schema-checks.ts';

/** What core/chat/schema-checks.ts sees in a JSON Schema from its keywords: $ref loops no value ends, and schemas no value satisfies. */
describe('refLoop: a $ref loop that never goes into a part of the value', () => {
  it.each<[string, unknown, string]>([
    ['the root naming itself', { $ref: '#' }, '# → #'],
    ['a property naming itself', { properties: { a: { $ref: '#/properties/a' } } }, '#/properties/a → #/properties/a'],
    ['two definitions naming each other', { $ref: '#/definitions/a', definitions: { a: { $ref: '#/definitions/b' }, b: { $ref: '#/definitions/a' } } }, '#/definitions/a → #/definitions/b → #/definitions/a'],
    ['an anyOf alternative naming the root', { anyOf: [{ $ref: '#' }, { type: 'string' }] }, '# → #/anyOf/0 → #'],
    ['a definition named by a property, naming itself', { definitions: { a: { $ref: '#/definitions/a' } }, properties: { x: { $ref: '#/definitions/a' } } }, '#/definitions/a → #/definitions/a'],
    ['a $ref under an $id naming its own root', { $defs: { a: { $id: 'https://example.com/a', $ref: '#' } }, $ref: '#/$defs/a' }, '#'],
  ])('finds %s', (_name, schema, loop) => {
    expect(refLoop(schema)).toContain(loop);
  });

  it.each<[string, unknown]>([
    ['a tree: recursion through a property', { type: 'object', properties: { children: { type: 'array', items: { $ref: '#' } } } }],
    ['a linked list through a definition', { $defs: { node: { type: 'object', properties: { next: { $ref: '#/$defs/node' } } } }, $ref: '#/$defs/node' }],
    ['a loop in a definition nothing names', { $defs: { a: { $ref: '#/$defs/a' } } }],
    ['a $ref to nothing (Ajv refuses it on its own)', { $ref: '#/nowhere' }],
    ['a $ref to another document', { $ref: 'https://example.com/schema.json' }],
  ])('passes %s', (_name, schema) => {
    expect(refLoop(schema)).toBeUndefined();
  });

  it('walks a long chain of $refs without recursion', () => {
    const definitions = Object.fromEntries(Array.from({ length: 5000 }, (_, i) => [`d${i}`, { $ref: `#/definitions/d${(i + 1) % 5000}` }]));
    expect(refLoop({ $ref: '#/definitions/d0', definitions })).toMatch(/#\/definitions\/d0 → #\/definitions\/d1 → .* → …$/);
  });
});

describe('unsatisfiable: a schema no value satisfies, by its keywords', () => {
  it.each<[unknown, RegExp]>([
    [{ not: {} }, /#\/not excludes every value/],
    [{ enum: [] }, /"enum" leaves no value/],
    [{ type: 'string', minLength: 5, maxLength: 2 }, /minLength is above its maxLength/],
    [{ type: 'integer', minimum: 5, maximum: 1 }, /leave no integer/],
    [{ type: 'integer', exclusiveMinimum: 1, exclusiveMaximum: 2 }, /leave no integer/],
    [{ allOf: [{ type: 'string' }, { type: 'number' }] }, /no type is allowed/],
    [{ allOf: [{ type: 'number' }, { type: 'integer' }], minimum: 1.2, maximum: 1.8 }, /leave no integer/],
    [{ type: 'object', properties: { a: false }, required: ['a'] }, /required property "a"/],
    [{ type: 'object', properties: {}, additionalProperties: false, required: ['x'] }, /required property "x".*additionalProperties is false/],
    [{ type: 'object', required: ['a', 'b'], maxProperties: 1 }, /requires 2 properties and allows at most 1/],
    [{ anyOf: [{ not: {} }, { enum: [] }] }, /no alternative of #\/anyOf/],
    [{ type: 'string', enum: [1, 2] }, /none of its "enum" or "const" values fits/],
    [{ const: 5, type: 'integer', maximum: 4 }, /none of its "enum" or "const" values fits/],
    [{ type: 'array', minItems: 1, items: false }, /needs 1 item/],
    [{ type: 'object', properties: { a: { type: 'object', properties: { b: { enum: [] } }, required: ['b'] } }, required: ['a'] }, /"a" can have no value .*"b" can have no value/],
  ])('refuses %j', (schema, why) => {
    expect(unsatisfiable(schema)).toMatch(why);
  });

  it.each<unknown>([
    {},
    { minimum: 5, maximum: 1 },
    { type: 'number', exclusiveMinimum: 1, exclusiveMaximum: 2 },
    { type: ['string', 'null'], minLength: 3, maxLength: 1 },
    { anyOf: [{ not: {} }, { type: 'string' }] },
    { type: 'string', enum: ['a', 1] },
    { type: 'array', items: false },
    { type: 'object', properties: { a: { type: 'string' } }, required: ['a'], additionalProperties: false },
    { $ref: '#/definitions/x', not: {} },
    { type: 'string', pattern: '^(?!)$' },
  ])('passes %j (satisfiable, or not provably impossible)', (schema) => {
    expect(unsatisfiable(schema)).toBeUndefined();
  });
});
