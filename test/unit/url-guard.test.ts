import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createUrlGuard, isPrivateAddress } from '../../adapters/net/url-guard.ts';

let server: http.Server;
let port: number;
beforeAll(async () => {
  server = http.createServer((_req, res) => res.end('secret'));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  port = (server.address() as AddressInfo).port;
});
afterAll(() => new Promise<void>((r) => server.close(() => r())));

describe('URL guard', () => {
  it('knows the private, loopback, link-local and metadata ranges', () => {
    for (const a of ['127.0.0.1', '10.0.0.8', '172.16.5.4', '172.31.255.255', '192.168.1.1', '169.254.169.254', '100.64.0.1', '0.0.0.0', '::1', 'fc00::1', 'fd12::1', 'fe80::1', '::ffff:127.0.0.1', '::ffff:10.0.0.1', '::ffff:7f00:1', '::7f00:1', '64:ff9b::7f00:1', '64:ff9b::a9fe:a9fe', '64:ff9b:1::1', '2002:7f00:1::', '2002:a9fe:a9fe::1', '2002:a00:1::']) {
      expect(isPrivateAddress(a), a).toBe(true);
    }
    for (const a of ['93.184.216.34', '172.32.0.1', '8.8.8.8', '2606:4700::1111', '64:ff9b::5db8:d822', '2002:5db8:d822::1', '::ffff:8.8.8.8']) expect(isPrivateAddress(a), a).toBe(false);
  });

  it('refuses private targets when a URL is accepted', async () => {
    const guard = createUrlGuard();
    for (const url of [`http://127.0.0.1:${port}/`, 'http://localhost/', 'http://[::1]/', 'http://169.254.169.254/latest', 'file:///etc/passwd', 'http://user:pw@example.com/', 'not a url']) {
      await expect(guard.check(url), url).rejects.toThrow();
    }
    await expect(guard.check('https://93.184.216.34/a.png')).resolves.toBeUndefined();
  });

  it('checks again at connect time: a name that resolves to a private address cannot be fetched', async () => {
    const guard = createUrlGuard();
    // Skips check() and goes straight to the fetch, as a DNS answer changed after acceptance would.
    await expect(guard.fetch(`http://localhost:${port}/`)).rejects.toThrow(/private/);
    const allowed = createUrlGuard({ allowlist: ['localhost'] });
    expect(Buffer.from(await allowed.fetch(`http://localhost:${port}/`)).toString()).toBe('secret');
  });
});
