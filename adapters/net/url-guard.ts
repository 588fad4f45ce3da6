import dns from 'node:dns';
import http from 'node:http';
import https from 'node:https';
import net, { BlockList } from 'node:net';
import type { UrlGuard } from '../../core/ports.ts';

/**
 * Keeps input URLs (and later webhook URLs) off this machine's network: loopback, private,
 * link-local (cloud metadata), carrier-grade NAT, unspecified and unique-local addresses are
 * refused, both when the URL is accepted and again when it is fetched (the connection uses a
 * DNS lookup that applies the same check, so a name that changes its answer cannot pass).
 * Hosts in the allowlist (`INPUT_URL_ALLOWLIST`, off by default) skip the check: for tests.
 */
const BLOCKED = new BlockList();
for (const [prefix, bits] of [['0.0.0.0', 8], ['10.0.0.0', 8], ['100.64.0.0', 10], ['127.0.0.0', 8], ['169.254.0.0', 16], ['172.16.0.0', 12], ['192.168.0.0', 16], ['198.18.0.0', 15], ['224.0.0.0', 4], ['240.0.0.0', 4]] as const) {
  BLOCKED.addSubnet(prefix, bits, 'ipv4');
}
for (const [prefix, bits] of [['::', 128], ['::1', 128], ['fc00::', 7], ['fe80::', 10], ['ff00::', 8]] as const) {
  BLOCKED.addSubnet(prefix, bits, 'ipv6');
}

export function isPrivateAddress(address: string): boolean {
  const family = net.isIP(address);
  if (family === 4) return BLOCKED.check(address, 'ipv4');
  if (family === 6) {
    const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
    if (mapped) return BLOCKED.check(mapped[1]!, 'ipv4');
    return BLOCKED.check(address, 'ipv6');
  }
  return true;
}

export interface GuardedHttp extends UrlGuard {
  /** GET a public URL's bytes. */
  fetch(url: string, init?: { maxBytes?: number; timeoutMs?: number }): Promise<Uint8Array>;
  /** POST to a public URL; returns the status. */
  post(url: string, body: string, headers: Record<string, string>, timeoutMs?: number): Promise<number>;
}

export function createUrlGuard(opts: { allowlist?: string[] } = {}): GuardedHttp {
  const allowed = new Set((opts.allowlist ?? []).map((h) => h.toLowerCase()));
  const isAllowed = (host: string) => allowed.has(host.toLowerCase().replace(/^\[|\]$/g, ''));

  const parse = (raw: string): URL => {
    let url: URL;
    try {
      url = new URL(raw);
    } catch {
      throw new Error('not a valid URL');
    }
    if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new Error('only http and https URLs are accepted');
    if (url.username || url.password) throw new Error('URLs with credentials are not accepted');
    return url;
  };

  /** A DNS lookup that fails for private answers: what the connection itself uses. */
  const guardedLookup: net.LookupFunction = (hostname, options, callback) => {
    dns.lookup(hostname, { ...options, all: true }, (err, addresses) => {
      if (err) return callback(err, '', 0);
      const list = addresses as dns.LookupAddress[];
      const bad = list.find((a) => isPrivateAddress(a.address));
      if (bad && !isAllowed(hostname)) return callback(Object.assign(new Error(`${hostname} resolves to a private address`), { code: 'EPRIVATE' }), '', 0);
      if ((options as { all?: boolean }).all) return (callback as unknown as (e: null, a: dns.LookupAddress[]) => void)(null, list);
      return callback(null, list[0]!.address, list[0]!.family);
    });
  };

  /** One HTTP request whose connection only reaches public addresses (or allowlisted hosts). */
  const send = (raw: string, init: { method: 'GET' | 'POST'; body?: string; headers?: Record<string, string>; maxBytes?: number | undefined; timeoutMs?: number | undefined }) => {
    const url = parse(raw);
    const host = url.hostname.replace(/^\[|\]$/g, '');
    if (net.isIP(host) && isPrivateAddress(host) && !isAllowed(host)) return Promise.reject(new Error('the address is private, loopback or link-local'));
    const maxBytes = init.maxBytes ?? 50 * 1024 * 1024;
    const client = url.protocol === 'https:' ? https : http;
    return new Promise<{ status: number; body: Uint8Array }>((resolve, reject) => {
      const req = client.request(url, { method: init.method, headers: init.headers, lookup: guardedLookup, timeout: init.timeoutMs ?? 30_000 }, (res) => {
        const chunks: Buffer[] = [];
        let size = 0;
        res.on('data', (c: Buffer) => {
          size += c.length;
          if (size > maxBytes) req.destroy(new Error(`the answer is larger than ${maxBytes} bytes`));
          else chunks.push(c);
        });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: new Uint8Array(Buffer.concat(chunks)) }));
        res.on('error', reject);
      });
      req.on('timeout', () => req.destroy(new Error('the URL did not answer in time')));
      req.on('error', reject);
      req.end(init.body);
    });
  };

  return {
    async check(raw) {
      const url = parse(raw);
      const host = url.hostname.replace(/^\[|\]$/g, '');
      if (isAllowed(host)) return;
      if (net.isIP(host)) {
        if (isPrivateAddress(host)) throw new Error('the address is private, loopback or link-local');
        return;
      }
      let addresses: dns.LookupAddress[];
      try {
        addresses = await dns.promises.lookup(host, { all: true });
      } catch {
        throw new Error(`the host ${host} cannot be resolved`);
      }
      if (addresses.some((a) => isPrivateAddress(a.address))) throw new Error(`the host ${host} resolves to a private, loopback or link-local address`);
    },

    async fetch(raw, init = {}) {
      const res = await send(raw, { method: 'GET', maxBytes: init.maxBytes, timeoutMs: init.timeoutMs });
      if (res.status >= 400) throw new Error(`the URL answered HTTP ${res.status}`);
      return res.body;
    },

    async post(raw, body, headers, timeoutMs = 10_000) {
      const res = await send(raw, { method: 'POST', body, headers, timeoutMs, maxBytes: 64 * 1024 });
      return res.status;
    },
  };
}
