import { DriverException } from '@mikro-orm/core';
import { describe, expect, it } from 'vitest';
import { generationRequestSchema } from '../../core/generations/schema.ts';
import { toCoreError } from '../../core/trpc.ts';

/**
 * Text holding U+0000 reaches PostgreSQL, which refuses it inside the use case's transaction:
 * core answers the client's error as a 400 (core/trpc.ts), never a 500. Found by schemathesis
 * (a job's prompt with a NUL: "invalid message format").
 */
const driverError = (code: string, message: string) => Object.assign(new DriverException(new Error(message)), { code });

describe('text the database cannot store', () => {
  it('is a 400 invalid_request, whichever way PostgreSQL refuses the NUL', () => {
    for (const [code, message] of [
      ['08P01', 'insert into generations (…) values (…) - invalid message format'],
      ['22021', 'invalid byte sequence for encoding "UTF8": 0x00'],
      ['22P05', 'unsupported Unicode escape sequence'],
    ] as const) {
      const err = toCoreError(driverError(code, message));
      expect(err?.code, code).toBe('invalid_request');
      expect(err?.reason).toBe('invalid_value');
      expect(err?.message).toContain('NUL');
    }
  });

  it('leaves another protocol violation a server error', () => {
    expect(toCoreError(driverError('08P01', 'unexpected message type'))).toBeUndefined();
  });
});

describe("a job's own text", () => {
  it('refuses U+0000 in the prompt and the webhook URL before the database, naming the field', () => {
    for (const field of ['prompt', 'webhook_url'] as const) {
      const parsed = generationRequestSchema.safeParse({ model: 'mas/image-demo', [field]: 'https://a.example/\u0000' });
      expect(parsed.success, field).toBe(false);
      const err = toCoreError(parsed.error);
      expect(err).toMatchObject({ code: 'invalid_request', param: field });
      expect(err?.message).toContain('NUL character');
    }
    expect(generationRequestSchema.safeParse({ model: 'mas/image-demo', prompt: 'a lighthouse', webhook_url: 'https://a.example/hook' }).success).toBe(true);
  });
});
