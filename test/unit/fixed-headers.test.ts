import type { IncomingMessage, ServerResponse } from 'node:http';
import helmet from 'helmet';
import { describe, expect, it } from 'vitest';
import { fixedHeaders } from '../../adapters/http/app.ts';

/** A response that records what a middleware does to its headers. */
function recording() {
  const headers = new Map<string, unknown>([['x-powered-by', 'Express']]);
  const res = {
    setHeader: (name: string, value: unknown) => void headers.set(name.toLowerCase(), value),
    removeHeader: (name: string) => void headers.delete(name.toLowerCase()),
    getHeader: (name: string) => headers.get(name.toLowerCase()),
  };
  return { headers, res: res as unknown as ServerResponse };
}

const req = { headers: {}, method: 'POST', url: '/api/v1/chat/completions' } as IncomingMessage;

describe('fixedHeaders', () => {
  it('sets exactly the headers helmet sets, on every answer, from one run at start-up', () => {
    const options = {
      contentSecurityPolicy: { directives: { 'frame-ancestors': ["'none'"], 'style-src': ["'self'"], 'upgrade-insecure-requests': null } },
      xFrameOptions: { action: 'deny' as const },
      strictTransportSecurity: false,
      referrerPolicy: { policy: 'same-origin' as const },
    };
    const direct = recording();
    helmet(options)(req, direct.res, () => undefined);
    const fixed = fixedHeaders(helmet(options));
    for (let i = 0; i < 2; i++) {
      const replayed = recording();
      let nexts = 0;
      fixed(req as never, replayed.res as never, () => void nexts++);
      expect(nexts).toBe(1);
      expect(Object.fromEntries(replayed.headers)).toEqual(Object.fromEntries(direct.headers));
    }
    expect(direct.headers.get('content-security-policy')).toContain("frame-ancestors 'none'");
    expect(direct.headers.has('x-powered-by')).toBe(false);
  });

  it('refuses a middleware that does not call next at once: its headers could depend on the request', () => {
    expect(() => fixedHeaders(() => undefined)).toThrow(/did not call next/);
    expect(() => fixedHeaders((_req, _res, next) => next(new Error('no')))).toThrow('no');
  });
});
