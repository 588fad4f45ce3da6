import { Ajv2020 } from 'ajv/dist/2020.js';
import { describe, expect, it } from 'vitest';
import { buildOpenApiDocument } from '../../adapters/rest/openapi.ts';

/**
 * The OpenAPI document states the rules that come from the operator's configuration and catalog,
 * as core checks them: the top-up bounds (TOPUP_MIN_USD, TOPUP_MAX_USD), the plans, and each
 * media model's settings and inputs. (test/integration/openapi.test.ts holds the served document
 * to the server's answers.)
 */
const ajv = new Ajv2020({ strict: false });
const bodyOf = (doc: any, path: string) => doc.paths[path].post.requestBody.content['application/json'].schema;
const imageModel = {
  id: 'acme/image',
  settings: {
    size: { type: 'enum' as const, options: [256, 512], default: 256 },
    steps: { type: 'integer' as const, min: 1, max: 50, default: 20 },
    delay_ms: { type: 'integer' as const, min: 0, max: 240_000, default: 0, job_time: 'ms' as const },
  },
  inputs: { mask: { accepts: ['image'], multiple: false, required: true } },
  deadline_seconds: 60,
};

describe('the OpenAPI document and the configuration', () => {
  const doc = buildOpenApiDocument('https://mas.example', { topUpMinCents: 500, topUpMaxCents: 20_000, plans: ['Starter', 'Pro'] }, [imageModel]) as any;

  it('a top-up amount within TOPUP_MIN_USD and TOPUP_MAX_USD', () => {
    const valid = ajv.compile(bodyOf(doc, '/credits/checkout'));
    expect([5, 200, 12.5, 20.07, '12.50'].map((amount_usd) => valid({ amount_usd }))).toEqual([true, true, true, true, true]);
    expect([4.99, 200.01, 0, -5, '1.234'].map((amount_usd) => valid({ amount_usd }))).toEqual([false, false, false, false, false]);
    expect(JSON.stringify(bodyOf(doc, '/credits/checkout'))).toContain('at most 2 decimals');
  });

  it('a plan among the plans; none when the server has no plans', () => {
    expect(ajv.validate(bodyOf(doc, '/credits/subscription'), { plan: 'Pro' })).toBe(true);
    expect(ajv.validate(bodyOf(doc, '/credits/subscription'), { plan: 'Gold' })).toBe(false);
    const none = buildOpenApiDocument('https://mas.example', { topUpMinCents: 500, topUpMaxCents: 20_000, plans: [] }, []) as any;
    expect(ajv.validate(bodyOf(none, '/credits/subscription'), { plan: 'Starter' })).toBe(false);
  });

  it('a job’s model among the media models, with that model’s settings and inputs only', () => {
    const valid = ajv.compile(bodyOf(doc, '/generations'));
    const job = (body: Record<string, unknown>) => valid({ model: 'acme/image', inputs: { mask: 'file_abc' }, ...body });
    expect(job({ settings: { size: 512, steps: 50 } })).toBe(true);
    expect(job({ settings: { colour: 'red' } })).toBe(false);
    expect(job({ settings: { size: 300 } })).toBe(false);
    expect(job({ settings: { steps: 51 } })).toBe(false);
    // The deadline (60 s) can never be met by 60,000 ms of job time: below it only.
    expect(job({ settings: { delay_ms: 59_999 } })).toBe(true);
    expect(job({ settings: { delay_ms: 60_000 } })).toBe(false);
    expect(valid({ model: 'acme/image' })).toBe(false);
    expect(job({ inputs: { mask: 'file_abc', other: 'x' } })).toBe(false);
    expect(valid({ model: 'mas/echo', inputs: { mask: 'file_abc' } })).toBe(false);
  });
});
