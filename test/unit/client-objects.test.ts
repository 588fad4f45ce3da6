import { describe, expect, it } from 'vitest';
import { toolArguments } from '../../adapters/mcp/dispatch.ts';
import { generate } from '../../adapters/mcp/tools/generations.ts';
import { validateCatalog } from '../../core/catalog/catalog.ts';
import type { MediaModel } from '../../core/catalog/schema.ts';
import { chatRequestSchema } from '../../core/chat/schema.ts';
import { responsesRequestSchema } from '../../core/chat/responses.ts';
import { createGenerationInput } from '../../core/generations/schema.ts';
import { validateInputs, validateSettings } from '../../core/generations/validate.ts';
import { toCoreError } from '../../core/trpc.ts';

/**
 * Objects whose keys a client chooses (a job's settings and inputs, a tool's JSON Schema, a
 * response's metadata) become JavaScript objects without losing a key: "__proto__", which zod's
 * record would skip silently, is refused naming it; "constructor" and the other names every
 * object inherits are keys like any other (an unknown setting, here), never found by `in`.
 * The bodies are parsed from JSON text, as the HTTP adapters and the MCP SDK hand them over.
 */
const refusal = (result: { success: boolean; error?: unknown }) => (result.success ? undefined : toCoreError(result.error));

const imageDemo = validateCatalog(
  {
    providers: { local: { kind: 'local' } },
    models: [
      {
        id: 'mas/image-demo', name: 'Image', description: 'demo', type: 'image', generation_types: ['text-to-image'], provider: { name: 'local', model: 'image' },
        settings: { size: { type: 'enum', options: [128, 256, 512], default: 256 } },
        inputs: { reference_image: { accepts: ['image'] } },
        pricing: { base: 20 },
      },
    ],
  },
  100n,
).parsed.models[0] as MediaModel;

describe('a job’s settings and inputs', () => {
  it.each(['settings', 'inputs'])('%s with the key "__proto__": 400 naming the field, not dropped', (field) => {
    const body = JSON.parse(`{"model":"mas/image-demo","${field}":{"__proto__":{"size":512}}}`);
    expect(refusal(createGenerationInput.safeParse(body))).toMatchObject({ code: 'invalid_request', param: `${field}.__proto__`, message: expect.stringContaining('"__proto__"') });
  });

  it('settings with the key "constructor" (or "toString"): an unknown setting, naming it', () => {
    for (const name of ['constructor', 'toString', 'hasOwnProperty']) {
      const { settings } = createGenerationInput.parse(JSON.parse(`{"model":"mas/image-demo","settings":{"${name}":1}}`));
      expect(settings).toEqual({ [name]: 1 });
      let err: unknown;
      try {
        validateSettings(imageDemo, settings);
      } catch (e) {
        err = e;
      }
      expect(err).toMatchObject({ code: 'invalid_request', reason: 'unknown_setting', param: `settings.${name}` });
    }
    // A setting left out takes its default, even one named like an inherited property.
    expect(validateSettings(imageDemo, {})).toEqual({ size: 256 });
  });

  it('inputs with the key "constructor": an unknown input, naming it', async () => {
    await expect(validateInputs(imageDemo, { constructor: 'https://example.com/a.png' }, { check: async () => undefined } as never, async () => undefined)).rejects.toMatchObject({
      reason: 'unknown_input',
      param: 'inputs.constructor',
    });
  });

  it('the MCP generate tool refuses the same, naming the field', () => {
    const args = JSON.parse('{"model":"mas/image-demo","settings":{"__proto__":{"size":512}}}');
    let err: unknown;
    try {
      toolArguments(generate, args);
    } catch (e) {
      err = toCoreError(e);
    }
    expect(err).toMatchObject({ param: 'settings.__proto__' });
  });
});

describe('JSON Schemas and metadata in chat requests', () => {
  const chat = (extra: string) => JSON.parse(`{"model":"m","messages":[{"role":"user","content":"hi"}],${extra}}`);
  it('a tool schema or a response format schema with a top-level "__proto__": 400 naming it', () => {
    expect(refusal(chatRequestSchema.safeParse(chat('"tools":[{"type":"function","function":{"name":"f","parameters":{"__proto__":{"type":"object"}}}}]')))).toMatchObject({
      param: 'tools.0.function.parameters.__proto__',
    });
    expect(refusal(chatRequestSchema.safeParse(chat('"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"__proto__":{}}}}')))).toMatchObject({
      param: 'response_format.json_schema.schema.__proto__',
    });
  });

  it('a property named "__proto__" inside a schema is kept as it was sent', () => {
    const parsed = chatRequestSchema.parse(chat('"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"__proto__":{"type":"string"}}}}}]'));
    expect(Object.keys(parsed.tools[0]!.parameters!.properties as object)).toEqual(['__proto__']);
  });

  it('Responses metadata with the key "__proto__": 400 naming it', () => {
    const body = JSON.parse('{"model":"m","input":"hi","metadata":{"__proto__":"x"}}');
    expect(refusal(responsesRequestSchema.safeParse(body))).toMatchObject({ param: 'metadata.__proto__' });
  });
});
