import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import type { Readable } from 'node:stream';
import S3rver from 's3rver';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { s3Storage } from '../../adapters/storage/s3.ts';
import { createContext } from '../../core/context.ts';
import { createCaller } from '../../core/router.ts';
import type { ResultStorage, StoredObject } from '../../core/ports.ts';
import { makeAccount, makeKey } from '../support/db.ts';
import { bearer, createTestApp, getJson, serve } from '../support/http.ts';
import { startJobHarness, type JobHarness } from '../support/jobs.ts';

/**
 * Signed downloads (files and job results) stream from storage (adapters/rest/download.ts):
 * Content-Length, ETag, Last-Modified, one byte range, 304, 416, HEAD; a client that goes
 * away closes the storage read; a storage error mid-stream ends the response. Both storage
 * drivers: local disk, and S3 (the AWS SDK against s3rver).
 */
const MB = 1024 * 1024;
let h: JobHarness;
let s3: S3rver;
let s3Root: string;
let s3Api: { base: string; close: () => Promise<void> };
let s3Driver: ResultStorage;
let key: string;
/** Every stream a download opened, per driver: the tests check they end destroyed. */
const opened: Readable[] = [];

/** Wraps a storage so that each stream it opens is recorded (and, with `breakAfter`, fails after that many bytes). */
function recording(storage: ResultStorage, opts: { breakAfter?: () => number | undefined } = {}): ResultStorage {
  const open = storage.open.bind(storage);
  storage.open = async (k) => {
    const object = await open(k);
    if (!object) return undefined;
    return {
      ...object,
      stream: (range) => {
        const s = object.stream(range);
        opened.push(s);
        const limit = opts.breakAfter?.();
        if (limit !== undefined) {
          let seen = 0;
          s.on('data', (c: Buffer) => {
            seen += c.length;
            if (seen > limit) s.destroy(new Error('disk gone'));
          });
        }
        return s;
      },
    } satisfies StoredObject;
  };
  return storage;
}
let breakAfter: number | undefined;

/**
 * Records uncaught exceptions until `stop()`. `settled(stream)` resolves once the stream can
 * emit nothing more: its 'close', which follows any 'error' (an 'error' nobody listens to
 * throws before 'close' is emitted, and that ends the wait too). A positive signal, where a
 * fixed sleep only hoped the error had come by then.
 */
function watchUncaught() {
  const uncaught: unknown[] = [];
  let seen!: () => void;
  const first = new Promise<void>((resolve) => (seen = resolve));
  const onUncaught = (err: unknown) => {
    uncaught.push(err);
    seen();
  };
  process.on('uncaughtException', onUncaught);
  return {
    uncaught,
    settled: (stream: Readable) => Promise.race([stream.closed ? Promise.resolve() : new Promise<void>((resolve) => stream.once('close', () => resolve())), first]),
    stop: () => process.off('uncaughtException', onUncaught),
  };
}

beforeAll(async () => {
  h = await startJobHarness();
  recording(h.deps.storage, { breakAfter: () => breakAfter });
  s3Root = await fs.mkdtemp(path.join(os.tmpdir(), 'mas-dl-s3-'));
  s3 = new S3rver({ port: 0, address: '127.0.0.1', silent: true, directory: s3Root, configureBuckets: [{ name: 'mas-dl' }] });
  const { port } = await s3.run();
  s3Driver = recording(s3Storage({ bucket: 'mas-dl', region: 'us-east-1', endpoint: `http://127.0.0.1:${port}`, forcePathStyle: true, accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER' }));
  s3Api = await serve(createTestApp({ deps: { ...h.deps, storage: s3Driver } }));
  const account = await makeAccount(h.orm, { coins: '100' });
  key = (await makeKey(h.orm, account.id)).key;
});
afterAll(async () => {
  await s3Api?.close();
  await s3?.close();
  await h?.close();
  if (s3Root) await fs.rm(s3Root, { recursive: true, force: true });
});

async function upload(base: string, bytes: Uint8Array, filename: string): Promise<string> {
  const form = new FormData();
  form.append('file', new Blob([bytes]), filename);
  const res = await getJson(`${base}/api/v1/files`, { method: 'POST', headers: bearer(key), body: form });
  expect(res.status).toBe(200);
  return `${base}${new URL(res.body.url).pathname}${new URL(res.body.url).search}`;
}

interface Answer {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: Buffer;
}
/** One request with node:http (fetch would add its own conditional and range handling nowhere, but hides HEAD bodies). */
function request(url: string, headers: Record<string, string> = {}, method = 'GET'): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method, headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(chunks) }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end();
  });
}

/** Downloads with a hash on the way: the 50 MB body is never held by the test either. */
function hashDownload(url: string): Promise<{ status: number; headers: http.IncomingHttpHeaders; sha256: string; bytes: number }> {
  return new Promise((resolve, reject) => {
    http
      .get(url, (res) => {
        const hash = createHash('sha256');
        let bytes = 0;
        res.on('data', (c: Buffer) => {
          bytes += c.length;
          hash.update(c);
        });
        res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, sha256: hash.digest('hex'), bytes }));
        res.on('error', reject);
      })
      .on('error', reject);
  });
}

/** The file descriptors of this process open on files under `dir` (the server runs in this process). */
async function openFilesUnder(dir: string): Promise<number> {
  let n = 0;
  for (const fd of await fs.readdir('/proc/self/fd')) {
    const target = await fs.readlink(`/proc/self/fd/${fd}`).catch(() => '');
    if (target.startsWith(dir)) n++;
  }
  return n;
}

const sha = (b: Uint8Array) => createHash('sha256').update(b).digest('hex');

describe.each([
  ['local disk', () => h.base],
  ['s3', () => s3Api.base],
])('signed downloads, %s storage', (driver, baseOf) => {
  // Text first, so that no magic number of file-type can match: served as application/octet-stream.
  const small = Buffer.concat([Buffer.from('plain bytes\n'), randomBytes(10_000 - 12)]);
  let url: string;
  beforeAll(async () => {
    url = await upload(baseOf(), small, 'small.bin');
  });

  it('streams the whole object with Content-Length, a strong ETag, Last-Modified, Accept-Ranges; Content-Type and Content-Disposition as before', async () => {
    const res = await request(url);
    expect(res.status).toBe(200);
    expect(res.body.equals(small)).toBe(true);
    expect(res.headers['content-length']).toBe(String(small.length));
    expect(res.headers.etag).toMatch(/^"[^"]+"$/);
    expect(new Date(res.headers['last-modified']!).getTime()).not.toBeNaN();
    expect(res.headers['accept-ranges']).toBe('bytes');
    expect(res.headers['content-type']).toBe('application/octet-stream');
    expect(res.headers['content-disposition']).toBe('inline; filename="small.bin"');
  });

  it('answers one range with 206: first bytes, a suffix, open-ended, a suffix longer than the object', async () => {
    const first = await request(url, { range: 'bytes=0-99' });
    expect(first.status).toBe(206);
    expect(first.headers['content-range']).toBe(`bytes 0-99/${small.length}`);
    expect(first.headers['content-length']).toBe('100');
    expect(first.body.equals(small.subarray(0, 100))).toBe(true);

    const suffix = await request(url, { range: 'bytes=-100' });
    expect(suffix.status).toBe(206);
    expect(suffix.headers['content-range']).toBe(`bytes ${small.length - 100}-${small.length - 1}/${small.length}`);
    expect(suffix.body.equals(small.subarray(small.length - 100))).toBe(true);

    const open = await request(url, { range: 'bytes=9990-' });
    expect(open.status).toBe(206);
    expect(open.body.equals(small.subarray(9990))).toBe(true);

    // Overlapping ranges merge into one.
    const merged = await request(url, { range: 'bytes=0-9, 5-19' });
    expect(merged.status).toBe(206);
    expect(merged.body.equals(small.subarray(0, 20))).toBe(true);

    const longer = await request(url, { range: 'bytes=-999999' });
    expect(longer.status).toBe(206);
    expect(longer.body.equals(small)).toBe(true);
  });

  it('answers 416 with Content-Range: bytes */size to a range outside the object', async () => {
    const res = await request(url, { range: `bytes=${small.length}-` });
    expect(res.status).toBe(416);
    expect(res.headers['content-range']).toBe(`bytes */${small.length}`);
    expect(JSON.parse(res.body.toString()).error).toMatchObject({ type: 'invalid_request_error', code: 'range_not_satisfiable' });
  });

  it('never answers a bad Range header with a 500: malformed, another unit or several ranges give the whole object (200) or 416', async () => {
    const cases = ['bytes=abc', 'bytes=5-1', 'bytes=-', 'bytes=', 'items=0-1', 'bytes=0-1,5-6', 'bytes 0-1', '0-1', 'bytes=--1', 'bytes=1-2-3', 'bytes=99999999999999999999-', 'bytes=-0', 'bytes=0-0x10'];
    for (const range of cases) {
      const res = await request(url, { range });
      expect([200, 416], `${range} → ${res.status}`).toContain(res.status);
      if (res.status === 200) expect(res.body.equals(small), range).toBe(true);
      if (res.status === 416) expect(res.headers['content-range']).toBe(`bytes */${small.length}`);
    }
    // A last position past the end is the end (RFC 9110): the whole object, as one range.
    const huge = await request(url, { range: `bytes=0-${'9'.repeat(400)}` });
    expect(huge.status).toBe(206);
    expect(huge.body.equals(small)).toBe(true);
  });

  it('random Range, If-Range and If-None-Match headers: always 200, 206, 304 or 416, with the bytes they promise', async () => {
    // A tiny fuzzer: printable ASCII built from the pieces these headers are made of.
    const pieces = ['bytes', '=', '-', ',', ' ', '0', '1', '9', '99', '10000', '9999', '"', 'W/', '*', 'x', 'items', ';', 'GMT', 'Thu, 01 Jan 1970 00:00:00'];
    let seed = 7;
    const next = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31), seed);
    const junk = () => Array.from({ length: 1 + (next() % 8) }, () => pieces[next() % pieces.length]).join('').trim() || 'x';
    for (let i = 0; i < 150; i++) {
      const headers: Record<string, string> = { range: junk() };
      if (i % 3 === 1) headers['if-range'] = junk();
      if (i % 5 === 2) headers['if-none-match'] = junk();
      const res = await request(url, headers);
      const what = JSON.stringify(headers);
      expect([200, 206, 304, 416], `${what} → ${res.status}`).toContain(res.status);
      if (res.status === 200) expect(res.body.equals(small), what).toBe(true);
      if (res.status === 206) {
        const [, a, b] = /^bytes (\d+)-(\d+)\/10000$/.exec(res.headers['content-range']!)!;
        expect(res.body.equals(small.subarray(Number(a), Number(b) + 1)), what).toBe(true);
      }
    }
  });

  it('If-None-Match with the ETag: 304 without a body; If-Range applies the range only while it names the object', async () => {
    const { headers } = await request(url, {}, 'HEAD');
    const etag = headers.etag!;
    const notModified = await request(url, { 'if-none-match': etag });
    expect(notModified.status).toBe(304);
    expect(notModified.body.length).toBe(0);
    expect(notModified.headers.etag).toBe(etag);
    expect((await request(url, { 'if-none-match': '"other"' })).status).toBe(200);

    const stillSame = await request(url, { range: 'bytes=0-9', 'if-range': etag });
    expect(stillSame.status).toBe(206);
    const changed = await request(url, { range: 'bytes=0-9', 'if-range': '"older"' });
    expect(changed.status).toBe(200);
    expect(changed.body.equals(small)).toBe(true);
    const byDate = await request(url, { range: 'bytes=0-9', 'if-range': headers['last-modified']! });
    expect(byDate.status).toBe(206);
    const before = await request(url, { range: 'bytes=0-9', 'if-range': new Date(0).toUTCString() });
    expect(before.status).toBe(200);
  });

  it('HEAD: the same headers, no bytes, no read of the storage', async () => {
    const streamsBefore = opened.length;
    const head = await request(url, {}, 'HEAD');
    expect(head.status).toBe(200);
    expect(head.headers['content-length']).toBe(String(small.length));
    expect(head.headers['accept-ranges']).toBe('bytes');
    expect(head.body.length).toBe(0);
    const ranged = await request(url, { range: 'bytes=10-19' }, 'HEAD');
    expect(ranged.status).toBe(206);
    expect(ranged.headers['content-range']).toBe(`bytes 10-19/${small.length}`);
    expect(opened.length).toBe(streamsBefore);
  });

  it('a signed link that was tampered with is still refused before anything is opened', async () => {
    const bad = url.replace(/signature=[^&]+/, 'signature=00');
    expect((await request(bad)).status).toBe(403);
    expect((await request(bad, { range: 'bytes=0-1' })).status).toBe(403);
  });

  it(`a client that goes away mid-download destroys the storage stream (${driver})`, async () => {
    const big = randomBytes(8 * MB);
    const bigUrl = await upload(baseOf(), big, 'big.bin');
    const before = opened.length;
    await new Promise<void>((resolve, reject) => {
      const req = http.get(bigUrl, (res) => {
        res.once('data', () => {
          req.destroy();
          resolve();
        });
      });
      req.on('error', (err) => ((err as NodeJS.ErrnoException).code === 'ECONNRESET' ? undefined : reject(err)));
    });
    // Waits on the events (the timeouts only say how long a stream never destroyed takes to fail: vi.waitFor's own is 1 s).
    await vi.waitFor(
      () => {
        expect(opened.length).toBe(before + 1);
        expect(opened.at(-1)!.destroyed).toBe(true);
      },
      { timeout: 10_000 },
    );
    if (driver === 'local disk') await vi.waitFor(async () => expect(await openFilesUnder(h.storageDir)).toBe(0), { timeout: 10_000 });
  });
});

describe('signed downloads of 50 MB', () => {
  // Exactly the upload limit (50 MiB), which an upload may be.
  it('downloads intact (sha256), with Content-Length and ETag, and ranges at its end; the file is closed after', async () => {
    const big = randomBytes(50 * MB);
    const url = await upload(h.base, big, 'fifty.bin');
    const res = await hashDownload(url);
    expect(res.status).toBe(200);
    expect(res.headers['content-length']).toBe(String(50 * MB));
    expect(res.headers.etag).toMatch(/^"[^"]+"$/);
    expect(res.bytes).toBe(50 * MB);
    expect(res.sha256).toBe(sha(big));
    const tail = await request(url, { range: 'bytes=-100' });
    expect(tail.status).toBe(206);
    expect(tail.body.equals(big.subarray(50 * MB - 100))).toBe(true);
    await vi.waitFor(async () => expect(await openFilesUnder(h.storageDir)).toBe(0), { timeout: 10_000 });
  });

  it('over S3 too', async () => {
    const big = randomBytes(50 * MB);
    const url = await upload(s3Api.base, big, 'fifty.bin');
    const res = await hashDownload(url);
    expect(res.status).toBe(200);
    expect(res.headers['content-length']).toBe(String(50 * MB));
    expect(res.sha256).toBe(sha(big));
    const mid = await request(url, { range: `bytes=${25 * MB}-${25 * MB + 999}` });
    expect(mid.status).toBe(206);
    expect(mid.body.equals(big.subarray(25 * MB, 25 * MB + 1000))).toBe(true);
  });
});

describe('a storage error in the middle of a download', () => {
  it('ends the response short of its Content-Length, never with a 500 after the headers, never as an unhandled error', async () => {
    const watch = watchUncaught();
    try {
      const bytes = randomBytes(4 * MB);
      const url = await upload(h.base, bytes, 'breaks.bin');
      breakAfter = MB;
      const outcome = await new Promise<{ status: number; received: number; error?: string }>((resolve) => {
        http.get(url, (res) => {
          let received = 0;
          res.on('data', (c: Buffer) => (received += c.length));
          res.on('end', () => resolve({ status: res.statusCode!, received }));
          res.on('error', (err) => resolve({ status: res.statusCode!, received, error: err.message }));
        });
      });
      expect(outcome.status).toBe(200);
      expect(outcome.received).toBeLessThan(bytes.length);
      expect(outcome.error).toBeDefined();
      expect(opened.at(-1)!.destroyed).toBe(true);
      await watch.settled(opened.at(-1)!);
      expect(watch.uncaught).toEqual([]);
      // The server goes on serving.
      breakAfter = undefined;
      expect((await hashDownload(url)).sha256).toBe(sha(bytes));
    } finally {
      breakAfter = undefined;
      watch.stop();
    }
  });
});

describe('S3 driver: open and stream', () => {
  it('opens with the object’s ETag, size and date; streams ranges; a missing object is undefined', async () => {
    const bytes = randomBytes(100_000);
    await s3Driver.put('direct/a.bin', bytes);
    const object = (await s3Driver.open('direct/a.bin'))!;
    expect(object.size).toBe(bytes.length);
    expect(object.etag).toBe(`"${createHash('md5').update(bytes).digest('hex')}"`);
    expect(object.lastModified.getTime()).toBeGreaterThan(Date.now() - 60_000);
    const read = async (s: Readable) => {
      const chunks: Buffer[] = [];
      for await (const c of s) chunks.push(c as Buffer);
      return Buffer.concat(chunks);
    };
    expect((await read(object.stream({ start: 10, end: 19 }))).equals(bytes.subarray(10, 20))).toBe(true);
    expect((await read(object.stream())).equals(bytes)).toBe(true);
    expect(await s3Driver.open('direct/never')).toBeUndefined();
  });

  it('a GET that fails (the object deleted after open) destroys the stream with the error, never an unhandled one', async () => {
    const watch = watchUncaught();
    try {
      await s3Driver.put('direct/gone.bin', randomBytes(1000));
      const object = (await s3Driver.open('direct/gone.bin'))!;
      await s3Driver.delete('direct/gone.bin');
      const s = object.stream();
      const err = await new Promise<Error>((resolve) => s.on('error', resolve).resume());
      expect(err).toBeInstanceOf(Error);
      expect(s.destroyed).toBe(true);
      await watch.settled(s);
      expect(watch.uncaught).toEqual([]);
    } finally {
      watch.stop();
    }
  });

  it('local disk: a missing object is undefined', async () => {
    expect(await h.deps.storage.open('files/nobody/nothing')).toBeUndefined();
  });
});

describe('a job result link', () => {
  it('streams with ETag, Range, 304 and HEAD, and keeps its Cache-Control', async () => {
    const job = await getJson(`${h.base}/api/v1/generations`, {
      method: 'POST',
      headers: { ...bearer(key), 'content-type': 'application/json', prefer: 'wait=20' },
      body: JSON.stringify({ model: 'mas/image-demo', prompt: 'a lighthouse', settings: { size: 128 } }),
    });
    expect(job.body.status).toBe('succeeded');
    const url = `${h.base}${new URL(job.body.output.url).pathname}${new URL(job.body.output.url).search}`;
    const whole = await request(url);
    expect(whole.status).toBe(200);
    expect(whole.headers['content-type']).toBe('image/png');
    expect(whole.headers['cache-control']).toBe('private, max-age=300');
    expect(whole.headers['content-length']).toBe(String(job.body.output.bytes));
    const magic = await request(url, { range: 'bytes=0-7' });
    expect(magic.status).toBe(206);
    expect(magic.body.equals(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]))).toBe(true);
    expect((await request(url, { 'if-none-match': whole.headers.etag! })).status).toBe(304);
    const head = await request(url, {}, 'HEAD');
    expect(head.status).toBe(200);
    expect(head.body.length).toBe(0);
    expect((await request(url, { range: 'bytes=999999999-' })).status).toBe(416);
  });
});

describe('an upload by URL (MCP upload_file with url: files.import)', () => {
  it('streams the fetched file to disk while hashing it: 50 MB arrive intact; over the limit, a redirect or an error leave no temporary file', async () => {
    const big = randomBytes(50 * MB);
    const source = http.createServer((req, res) => {
      if (req.url === '/big.bin') return void res.end(big);
      if (req.url === '/too-big.bin') {
        res.write(big);
        return void res.end(randomBytes(10));
      }
      if (req.url === '/moved') return void res.writeHead(302, { location: 'http://127.0.0.1:1/' }).end();
      if (req.url?.startsWith('/bad-escape')) return void res.end(randomBytes(100));
      res.writeHead(500).end('broken');
    });
    await new Promise<void>((r) => source.listen(0, '127.0.0.1', () => r()));
    const at = (p: string) => `http://127.0.0.1:${(source.address() as { port: number }).port}${p}`;
    const core = createCaller(createContext(h.deps, { kind: 'bearer', token: key }));
    const leftovers = async () => (await fs.readdir(os.tmpdir())).filter((f) => f.startsWith('import-'));
    const before = await leftovers();
    try {
      const { file } = await core.files.import({ url: at('/big.bin') });
      expect(file.bytes).toBe(50 * MB);
      const res = await hashDownload(`${h.base}${new URL(file.url).pathname}${new URL(file.url).search}`);
      expect(res.sha256).toBe(sha(big));
      for (const [p, message] of [['/too-big.bin', /larger than/], ['/moved', /redirect/], ['/error', /HTTP 500/]] as const) {
        await expect(core.files.import({ url: at(p) }), p).rejects.toThrow(message);
      }
      // Hostile URLs: refused as a bad 'url' (a clear 4xx), never a crash or a 500. A URL with
      // credentials is refused before any request; a last segment whose escapes are not UTF-8
      // is kept as written for the file's name.
      const port = (source.address() as { port: number }).port;
      await expect(core.files.import({ url: `http://user:secret@127.0.0.1:${port}/big.bin` })).rejects.toThrow(/^Invalid value for 'url': URLs with credentials/);
      await expect(core.files.import({ url: 'ftp://127.0.0.1/x' })).rejects.toThrow(/^Invalid value for 'url'/);
      const odd = await core.files.import({ url: at('/bad-escape%E0%A4') });
      expect(odd.file.filename).toBe('bad-escape%E0%A4');
      await vi.waitFor(async () => expect(await leftovers()).toEqual(before), { timeout: 10_000 });
    } finally {
      source.closeAllConnections();
      await new Promise((r) => source.close(r));
    }
  });
});

