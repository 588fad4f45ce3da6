import { createHash } from 'node:crypto';
import dns from 'node:dns';
import { createWriteStream, type WriteStream } from 'node:fs';
import fs from 'node:fs/promises';
import http from 'node:http';
import https from 'node:https';
import net, { BlockList } from 'node:net';
import { Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
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
// 64:ff9b:1::/48: local-use NAT64 (RFC 8215), whose IPv4 hosts are this network's own.
for (const [prefix, bits] of [['::', 128], ['::1', 128], ['64:ff9b:1::', 48], ['fc00::', 7], ['fe80::', 10], ['ff00::', 8]] as const) {
  BLOCKED.addSubnet(prefix, bits, 'ipv6');
}

/** An IPv6 address's 16 bytes (the caller has checked it is one). */
function ipv6Bytes(address: string): number[] {
  let text = address.replace(/%.*$/, '');
  const dotted = /(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(text);
  if (dotted) {
    const [a, b, c, d] = dotted.slice(1).map(Number) as [number, number, number, number];
    text = `${text.slice(0, dotted.index)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const [head, tail] = text.includes('::') ? text.split('::') as [string, string] : [text, undefined];
  const groups = (part: string | undefined) => (part ? part.split(':').map((g) => parseInt(g, 16)) : []);
  const front = groups(head);
  const back = groups(tail);
  const words = tail === undefined ? front : [...front, ...Array<number>(8 - front.length - back.length).fill(0), ...back];
  return words.flatMap((w) => [w >> 8, w & 0xff]);
}

/**
 * The IPv4 address an IPv6 address carries to an IPv4 host, where it does: IPv4-mapped
 * (::ffff:0:0/96), IPv4-compatible (::/96, deprecated), NAT64 (64:ff9b::/96) and 6to4
 * (2002::/16). Each reaches that IPv4 host, so it is judged as that host.
 */
function embeddedIpv4(address: string): string | undefined {
  const b = ipv6Bytes(address);
  const zero = (from: number, to: number) => b.slice(from, to).every((x) => x === 0);
  const v4 = (at: number) => b.slice(at, at + 4).join('.');
  if (zero(0, 10) && b[10] === 0xff && b[11] === 0xff) return v4(12);
  if (zero(0, 12)) return v4(12);
  if (b[0] === 0x00 && b[1] === 0x64 && b[2] === 0xff && b[3] === 0x9b && zero(4, 12)) return v4(12);
  if (b[0] === 0x20 && b[1] === 0x02) return v4(2);
  return undefined;
}

export function isPrivateAddress(address: string): boolean {
  const family = net.isIP(address);
  if (family === 4) return BLOCKED.check(address, 'ipv4');
  if (family === 6) {
    if (BLOCKED.check(address, 'ipv6')) return true;
    const v4 = embeddedIpv4(address);
    return v4 !== undefined && BLOCKED.check(v4, 'ipv4');
  }
  return true;
}

export interface GuardedHttp extends UrlGuard {
  /** GET a public URL's bytes. */
  fetch(url: string, init?: { maxBytes?: number; timeoutMs?: number }): Promise<Uint8Array>;
  /** POST to a public URL; returns the status. */
  post(url: string, body: string, headers: Record<string, string>, timeoutMs?: number): Promise<number>;
}

/** Every address a name resolves to: dns.lookup by default; tests pass their own resolver. */
export type Resolve = (hostname: string) => Promise<dns.LookupAddress[]>;

const systemResolve: Resolve = (hostname) => dns.promises.lookup(hostname, { all: true });

/** Over the size limit: `code` ETOOLARGE, so a caller can tell it from a network fault (it will not pass on a retry). */
function tooLarge(maxBytes: number): Error {
  return Object.assign(new Error(`the answer is larger than ${maxBytes} bytes`), { code: 'ETOOLARGE' });
}

export function createUrlGuard(opts: { allowlist?: string[]; lookup?: Resolve } = {}): GuardedHttp {
  const resolve = opts.lookup ?? systemResolve;
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
    const family = (options as { family?: number | string }).family;
    resolve(hostname).then(
      (answer) => {
        const list = family === 4 || family === 6 ? answer.filter((a) => a.family === family) : answer;
        if (list.length === 0) return callback(Object.assign(new Error(`${hostname} has no address`), { code: 'ENOTFOUND' }), '', 0);
        const bad = list.find((a) => isPrivateAddress(a.address));
        if (bad && !isAllowed(hostname)) return callback(Object.assign(new Error(`${hostname} resolves to a private address`), { code: 'EPRIVATE' }), '', 0);
        if ((options as { all?: boolean }).all) return (callback as unknown as (e: null, a: dns.LookupAddress[]) => void)(null, list);
        return callback(null, list[0]!.address, list[0]!.family);
      },
      (err: NodeJS.ErrnoException) => callback(err, '', 0),
    );
  };

  /**
   * A URL to request: parsed (http or https, no credentials), its literal address checked (a
   * name is checked at connect time by guardedLookup), with the client module for its scheme.
   */
  const target = (raw: string) => {
    const url = parse(raw);
    const host = url.hostname.replace(/^\[|\]$/g, '');
    if (net.isIP(host) && isPrivateAddress(host) && !isAllowed(host)) throw new Error('the address is private, loopback or link-local');
    return { url, client: url.protocol === 'https:' ? https : http };
  };

  /** One HTTP request whose connection only reaches public addresses (or allowlisted hosts). */
  const send = async (raw: string, init: { method: 'GET' | 'POST'; body?: string; headers?: Record<string, string>; maxBytes?: number | undefined; timeoutMs?: number | undefined }) => {
    const { url, client } = target(raw);
    const maxBytes = init.maxBytes ?? 50 * 1024 * 1024;
    return new Promise<{ status: number; body: Uint8Array }>((resolve, reject) => {
      const req = client.request(url, { method: init.method, headers: init.headers, lookup: guardedLookup, timeout: init.timeoutMs ?? 30_000 }, (res) => {
        // A declared length over the limit is refused before a byte of it is read.
        if (Number(res.headers['content-length'] ?? 0) > maxBytes) return req.destroy(tooLarge(maxBytes));
        const chunks: Buffer[] = [];
        let size = 0;
        res.on('data', (c: Buffer) => {
          size += c.length;
          if (size > maxBytes) req.destroy(tooLarge(maxBytes));
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

  /**
   * One guarded GET streamed into `file`, counted and hashed on the way; nothing of it is
   * held in memory. Any failure (the request, the limit, a redirect, an HTTP error, the disk)
   * destroys the request and removes the partial file before rejecting.
   */
  const download = async (raw: string, file: string, init: { maxBytes?: number | undefined; timeoutMs?: number | undefined }) => {
    // Async: a URL refused here (credentials, another scheme) rejects like any other failure.
    const { url, client } = target(raw);
    const maxBytes = init.maxBytes ?? 50 * 1024 * 1024;
    return new Promise<{ bytes: number; sha256: string }>((resolve, reject) => {
      let settled = false;
      let sink: WriteStream | undefined;
      const fail = (err: Error) => {
        if (settled) return;
        settled = true;
        req.destroy();
        // The file may still be opening: remove it once it is closed (so it exists, if it ever will).
        const closed = !sink || sink.closed ? Promise.resolve() : new Promise<void>((r) => sink!.once('close', () => r()));
        void closed
          .then(() => fs.rm(file, { force: true }))
          .catch(() => undefined)
          .finally(() => reject(err));
      };
      const req = client.request(url, { method: 'GET', lookup: guardedLookup, timeout: init.timeoutMs ?? 30_000 }, (res) => {
        const status = res.statusCode ?? 0;
        // Redirects are not followed (their target would escape this check), nor taken as content.
        if (status >= 300 && status < 400) return fail(new Error(`the URL answered HTTP ${status} (a redirect: redirects are not followed)`));
        if (status >= 400) return fail(new Error(`the URL answered HTTP ${status}`));
        const hash = createHash('sha256');
        let bytes = 0;
        const count = new Transform({
          transform(chunk: Buffer, _enc, done) {
            bytes += chunk.length;
            if (bytes > maxBytes) return done(tooLarge(maxBytes));
            hash.update(chunk);
            done(null, chunk);
          },
        });
        sink = createWriteStream(file, { mode: 0o600 });
        pipeline(res, count, sink).then(
          () => {
            if (settled) return;
            settled = true;
            resolve({ bytes, sha256: hash.digest('hex') });
          },
          (err: Error) => fail(err),
        );
      });
      req.on('timeout', () => req.destroy(new Error('the URL did not answer in time')));
      req.on('error', fail);
      req.end();
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
        addresses = await resolve(host);
      } catch {
        throw new Error(`the host ${host} cannot be resolved`);
      }
      if (addresses.some((a) => isPrivateAddress(a.address))) throw new Error(`the host ${host} resolves to a private, loopback or link-local address`);
    },

    async fetch(raw, init = {}) {
      const res = await send(raw, { method: 'GET', maxBytes: init.maxBytes, timeoutMs: init.timeoutMs });
      // Redirects are not followed (their target would escape this check), nor taken as content.
      if (res.status >= 300 && res.status < 400) throw new Error(`the URL answered HTTP ${res.status} (a redirect: redirects are not followed)`);
      if (res.status >= 400) throw new Error(`the URL answered HTTP ${res.status}`);
      return res.body;
    },

    download(raw, file, init = {}) {
      return download(raw, file, { maxBytes: init.maxBytes, timeoutMs: init.timeoutMs });
    },

    async post(raw, body, headers, timeoutMs = 10_000) {
      const res = await send(raw, { method: 'POST', body, headers, timeoutMs, maxBytes: 64 * 1024 });
      return res.status;
    },
  };
}
