import { describe, expect, it } from 'vitest';
import { baseUrlFor } from '../../adapters/mcp/resource.ts';
import { loadEnv } from '../../config/env.ts';
import { resourceFor } from '../../core/oauth/authorize.ts';

/** Loopback OAuth (docs/oauth.md): with the default PUBLIC_BASE_URL, localhost, 127.0.0.1 and [::1] are one resource. */
describe('resourceFor', () => {
  const loopback = { resource: 'http://localhost:8080/api/v1/mcp', loopbackAliases: true };
  const explicit = { resource: 'http://localhost:8080/api/v1/mcp', loopbackAliases: false };
  const EXPECTED = 'http://localhost:8080/api/v1/mcp';

  it('names the configured resource as given, or in another canonical form (fragment, trailing slash, case of the host)', () => {
    for (const config of [loopback, explicit]) {
      expect(resourceFor(config, EXPECTED)).toBe(EXPECTED);
      expect(resourceFor(config, 'http://localhost:8080/api/v1/mcp/')).toBe(EXPECTED);
      expect(resourceFor(config, 'http://LOCALHOST:8080/api/v1/mcp#x')).toBe(EXPECTED);
    }
  });

  it('with the default base URL, takes the same URL at 127.0.0.1 and [::1] as the configured one', () => {
    expect(resourceFor(loopback, 'http://127.0.0.1:8080/api/v1/mcp')).toBe(EXPECTED);
    expect(resourceFor(loopback, 'http://[::1]:8080/api/v1/mcp')).toBe(EXPECTED);
    expect(resourceFor(loopback, 'http://[::1]:8080/api/v1/mcp/')).toBe(EXPECTED);
    expect(resourceFor({ resource: 'http://127.0.0.1:9000/api/v1/mcp', loopbackAliases: true }, 'http://localhost:9000/api/v1/mcp')).toBe('http://127.0.0.1:9000/api/v1/mcp');
  });

  it('with an explicit base URL, refuses the loopback variants', () => {
    expect(resourceFor(explicit, 'http://127.0.0.1:8080/api/v1/mcp')).toBeUndefined();
    expect(resourceFor(explicit, 'http://[::1]:8080/api/v1/mcp')).toBeUndefined();
  });

  it('refuses another host, port, path or scheme, and what is not a URL, even at loopback', () => {
    for (const other of [
      'http://example.com:8080/api/v1/mcp',
      'http://127.0.0.2:8080/api/v1/mcp',
      'http://127.0.0.1:8081/api/v1/mcp',
      'http://127.0.0.1/api/v1/mcp',
      'http://127.0.0.1:8080/api/v1/mcpx',
      'http://127.0.0.1:8080/api/v1',
      'https://127.0.0.1:8080/api/v1/mcp',
      'not a url',
      '',
    ]) {
      expect(resourceFor(loopback, other), other).toBeUndefined();
    }
  });
});

describe('baseUrlFor', () => {
  const BASE = 'http://localhost:8080';

  it('with the default base URL, answers at the loopback host the client used', () => {
    expect(baseUrlFor(BASE, true, '127.0.0.1:8080')).toBe('http://127.0.0.1:8080');
    expect(baseUrlFor(BASE, true, '[::1]:8080')).toBe('http://[::1]:8080');
    expect(baseUrlFor(BASE, true, 'localhost:8080')).toBe(BASE);
    expect(baseUrlFor(`${BASE}/`, true, 'LOCALHOST:8080')).toBe(BASE);
  });

  it('keeps PUBLIC_BASE_URL for any other host, a missing or broken Host, and an explicit base URL', () => {
    expect(baseUrlFor(BASE, true, 'evil.example:8080')).toBe(BASE);
    expect(baseUrlFor(BASE, true, undefined)).toBe(BASE);
    expect(baseUrlFor(BASE, true, 'a b')).toBe(BASE);
    expect(baseUrlFor(BASE, false, '127.0.0.1:8080')).toBe(BASE);
    expect(baseUrlFor('https://mas.example.com/', false, '127.0.0.1')).toBe('https://mas.example.com');
  });
});

describe('PUBLIC_BASE_URL_IS_DEFAULT', () => {
  it('is true only when PUBLIC_BASE_URL is not set', () => {
    expect(loadEnv({}).PUBLIC_BASE_URL_IS_DEFAULT).toBe(true);
    expect(loadEnv({ PORT: '9000' }).PUBLIC_BASE_URL_IS_DEFAULT).toBe(true);
    expect(loadEnv({ PUBLIC_BASE_URL: 'http://localhost:8080' }).PUBLIC_BASE_URL_IS_DEFAULT).toBe(false);
    expect(loadEnv({ PUBLIC_BASE_URL: 'https://mas.example.com' }).PUBLIC_BASE_URL_IS_DEFAULT).toBe(false);
  });
});
