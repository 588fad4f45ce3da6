import { z } from 'zod';

/**
 * An object whose keys a client chooses (a job's settings and inputs, a JSON Schema, metadata),
 * parsed as zod's record. zod's record skips a key "__proto__" without a word (writing it would
 * set the result's prototype), so such a key would vanish from the request: it is refused here,
 * naming it (`settings.__proto__`), and the document says so (`propertyNames`). The keys of such
 * an object are looked up with `Object.hasOwn`, never `in`, which also finds what every object
 * inherits ("constructor", "toString", …).
 */
export function jsonRecord<V extends z.ZodType>(value: V, key: z.ZodType<string, string> = z.string()) {
  return z
    .preprocess((raw, ctx) => {
      if (raw !== null && typeof raw === 'object' && Object.hasOwn(raw, '__proto__')) {
        ctx.addIssue({ code: 'custom', path: ['__proto__'], message: 'the key "__proto__" is not allowed', input: raw });
      }
      return raw;
    }, z.record(key, value))
    .meta({ propertyNames: { not: { const: '__proto__' } } });
}
