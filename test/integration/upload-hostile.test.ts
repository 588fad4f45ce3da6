import nodeFs from 'node:fs';
import fs from 'node:fs/promises';
import { syncBuiltinESMExports } from 'node:module';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import type { Server } from 'node:http';
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import type { MikroORM } from '@mikro-orm/postgresql';
import { createTestApp } from '../support/http.ts';
import { png, seededRandom } from '../../adapters/providers/media/formats.ts';
import { makeAccount, makeKey, openTestOrm, silentLogger, testDeps } from '../support/db.ts';
import { bearer, getJson } from '../support/http.ts';

/**
 * Hostile multipart bodies on POST /files: whatever the body, the answer is in the error
 * shape, the process keeps serving, and no temporary file is left in the spool folder.
 * A crash here would take the whole worker (and this test file) down.
 */
let orm: MikroORM;
let storageDir: string;
let spoolDir: string;
const servers: Server[] = [];
let base: string;
let key: string;
let account: string;

async function listen(spool: string): Promise<string> {
  const app = createTestApp({ deps: testDeps(orm, { storageDir }), logger: silentLogger, publicBaseUrl: 'http://localhost', uploadSpoolDir: spool });
  const server = await new Promise<Server>((resolve) => {
    const s = app.listen(0, '127.0.0.1', () => resolve(s));
  });
  servers.push(server);
  return `http://127.0.0.1:${(server.address() as { port: number }).port}`;
}

beforeAll(async () => {
  orm = await openTestOrm();
  storageDir = await fs.mkdtemp(path.join(os.tmpdir(), 'mas-hostile-storage-'));
  spoolDir = await fs.mkdtemp(path.join(os.tmpdir(), 'mas-hostile-spool-'));
  base = await listen(spoolDir);
  // An unpaid account with no coins at all: uploading needs only a valid key.
  account = (await makeAccount(orm)).id;
  key = (await makeKey(orm, account)).key;
});
afterAll(async () => {
  for (const s of servers) {
    s.closeAllConnections();
    await new Promise((r) => s.close(r));
  }
  await orm.close();
  await fs.rm(storageDir, { recursive: true, force: true });
  await fs.rm(spoolDir, { recursive: true, force: true });
});
beforeEach(async () => {
  expect(await fs.readdir(spoolDir)).toEqual([]);
});

const BOUNDARY = 'mas-hostile-boundary';
const part = (disposition: string, body: string | Buffer, type?: string) =>
  Buffer.concat([
    Buffer.from(`--${BOUNDARY}\r\nContent-Disposition: ${disposition}\r\n${type ? `Content-Type: ${type}\r\n` : ''}\r\n`, 'latin1'),
    Buffer.isBuffer(body) ? body : Buffer.from(body, 'latin1'),
    Buffer.from('\r\n', 'latin1'),
  ]);
const end = Buffer.from(`--${BOUNDARY}--\r\n`, 'latin1');
const multipart = { 'content-type': `multipart/form-data; boundary=${BOUNDARY}` };

function post(body: Buffer, url = base) {
  return getJson(`${url}/api/v1/files`, { method: 'POST', headers: { ...bearer(key), ...multipart }, body: new Uint8Array(body) });
}

function expectError(res: { status: number; body: any }, status: number, code: string) {
  expect(res.status, JSON.stringify(res.body)).toBe(status);
  expect(Object.keys(res.body)).toEqual(['error']);
  expect(Object.keys(res.body.error).sort()).toEqual(['code', 'message', 'param', 'type']);
  expect(res.body.error).toMatchObject({ type: status >= 500 ? 'server_error' : 'invalid_request_error', code });
}

/** The server still answers, and the spool folder is empty again. */
async function expectAliveAndClean(url = base, spool = spoolDir) {
  expect((await getJson(`${url}/api/v1/balance`, { headers: bearer(key) })).status).toBe(200);
  await vi.waitFor(async () => expect(await fs.readdir(spool)).toEqual([]), { timeout: 5000 });
}

const image = Buffer.from(png(8, 8, seededRandom(new Uint8Array([5]))));

describe('hostile uploads', () => {
  it('two malformed part headers (busboy errors twice): 400 invalid_multipart, and the server keeps serving', async () => {
    const body = Buffer.concat([part('form-data; name="a\x01"', 'x'), part('form-data; name="b\x01"', 'y'), end]);
    expectError(await post(body), 400, 'invalid_multipart');
    expectError(await post(body), 400, 'invalid_multipart');
    await expectAliveAndClean();
  });

  it('a malformed header after the file part: 400, and the spooled file is removed', async () => {
    const body = Buffer.concat([part('form-data; name="file"; filename="a.png"', image, 'image/png'), part('form-data; name="x\x01"', 'x'), part('form-data; name="y\x01"', 'y'), end]);
    expectError(await post(body), 400, 'invalid_multipart');
    await expectAliveAndClean();
  });

  it('an error while the temporary file is still being opened: the file is removed once it exists', async () => {
    // busboy reports the bad header in the same write that ends the file part, so the write
    // fails at once, while the temporary file may still be opening. Opening is made slow here
    // (a WriteStream takes its fs functions as an option) to make that order certain; the test
    // hears when the file has really been opened (created), whenever that is.
    let created!: () => void;
    const opened = new Promise<void>((resolve) => (created = resolve));
    const realCreateWriteStream = nodeFs.createWriteStream;
    nodeFs.createWriteStream = ((file: string, opts: Record<string, unknown>) =>
      realCreateWriteStream(file, {
        ...opts,
        fs: {
          ...nodeFs,
          open: (path: string, flags: string, mode: number, callback: (err: NodeJS.ErrnoException | null, fd: number) => void) =>
            setTimeout(() => nodeFs.open(path, flags, mode, (err, fd) => (callback(err, fd), created())), 200),
        },
      })) as typeof nodeFs.createWriteStream;
    syncBuiltinESMExports();
    try {
      const body = Buffer.concat([part('form-data; name="file"; filename="a.png"', image, 'image/png'), part('form-data; name="x\x01"', 'x'), end]);
      expectError(await post(body), 400, 'invalid_multipart');
      // The file existed once it was opened; from then on, it must go.
      await opened;
      await vi.waitFor(async () => expect(await fs.readdir(spoolDir)).toEqual([]), { timeout: 10_000 });
    } finally {
      nodeFs.createWriteStream = realCreateWriteStream;
      syncBuiltinESMExports();
    }
    await expectAliveAndClean();
  });

  it('a malformed header before the file part: 400, and no file is spooled after it', async () => {
    const body = Buffer.concat([part('form-data; name="x\x01"', 'x'), part('form-data; name="file"; filename="a.png"', image, 'image/png'), end]);
    expectError(await post(body), 400, 'invalid_multipart');
    await expectAliveAndClean();
  });

  it('a body cut in the middle of the file part (no closing boundary): 400', async () => {
    const body = Buffer.concat([Buffer.from(`--${BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="a.png"\r\n\r\n`), image]);
    expectError(await post(body), 400, 'invalid_multipart');
    // The same with a second, skipped file part whose stream busboy destroys with an error.
    const two = Buffer.concat([part('form-data; name="other"; filename="o.bin"', 'zz'), Buffer.from(`--${BOUNDARY}\r\nContent-Disposition: form-data; name="other2"; filename="b"\r\n\r\nabc`)]);
    expectError(await post(two), 400, 'invalid_multipart');
    await expectAliveAndClean();
  });

  it('garbage, an empty body, a boundary-less type: 400 in the error shape', async () => {
    expectError(await post(Buffer.from('\x00\x01\x02 not multipart at all')), 400, 'invalid_multipart');
    expectError(await post(Buffer.alloc(0)), 400, 'invalid_multipart');
    const noBoundary = await getJson(`${base}/api/v1/files`, { method: 'POST', headers: { ...bearer(key), 'content-type': 'multipart/form-data' }, body: 'x' });
    expectError(noBoundary, 400, 'invalid_multipart');
    await expectAliveAndClean();
  });

  it('a client that goes away in the middle of the upload leaves nothing behind', async () => {
    await new Promise<void>((resolve) => {
      const req = http.request(`${base}/api/v1/files`, {
        method: 'POST',
        headers: { ...bearer(key), ...multipart, 'content-length': 10 * 1024 * 1024 },
      });
      req.on('error', () => resolve());
      req.write(Buffer.from(`--${BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="big.bin"\r\n\r\n`));
      req.write(Buffer.alloc(256 * 1024, 1), () => setTimeout(() => {
        req.destroy();
        resolve();
      }, 200));
    });
    await expectAliveAndClean();
  });

  it('a file part without a filename is a file named "upload"; over 1 MB it is 413', async () => {
    const res = await post(Buffer.concat([part('form-data; name="file"', image), end]));
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body).toMatchObject({ object: 'file', type: 'image', filename: 'upload', bytes: image.length, mime_type: 'image/png' });
    const text = await post(Buffer.concat([part('form-data; name="file"', 'plain text'), end]));
    expect(text.status).toBe(200);
    expect(text.body).toMatchObject({ filename: 'upload', bytes: 10 });
    const big = await post(Buffer.concat([part('form-data; name="file"', Buffer.alloc(1024 * 1024 + 1, 0x61)), end]));
    expectError(big, 413, 'request_too_large');
    expect(big.body.error.message).toMatch(/filename/);
    await expectAliveAndClean();
  });

  it("two parts named 'file': 400 naming 'file', nothing stored, no file row, no temporary file left", async () => {
    const files = async () => (await orm.em.fork().execute<{ n: number }[]>('select count(*)::int as n from files where account_id = ?', [account]))[0]!.n;
    const before = await files();
    const other = Buffer.from(png(8, 8, seededRandom(new Uint8Array([6]))));
    const bodies = [
      // Two file parts.
      Buffer.concat([part('form-data; name="file"; filename="a.png"', image, 'image/png'), part('form-data; name="file"; filename="b.png"', other, 'image/png'), end]),
      // A file part, then a `file` part without a filename (a form field to the parser).
      Buffer.concat([part('form-data; name="file"; filename="a.png"', image, 'image/png'), part('form-data; name="file"', 'second'), end]),
      // The other way round.
      Buffer.concat([part('form-data; name="file"', 'first'), part('form-data; name="file"; filename="b.png"', other, 'image/png'), end]),
      // A part of another name between them changes nothing.
      Buffer.concat([part('form-data; name="file"; filename="a.png"', image, 'image/png'), part('form-data; name="note"; filename="n.txt"', 'n'), part('form-data; name="file"; filename="b.png"', other), end]),
    ];
    for (const body of bodies) {
      const res = await post(body);
      expectError(res, 400, 'invalid_value');
      expect(res.body.error.message).toMatch(/'file'/);
      expect(res.body.error.message).toMatch(/one file/);
      await expectAliveAndClean();
    }
    expect(await files()).toBe(before);
    // One `file` part beside parts of other names is still a good upload.
    const one = await post(Buffer.concat([part('form-data; name="note"; filename="n.txt"', 'n'), part('form-data; name="file"; filename="a.png"', image, 'image/png'), end]));
    expect(one.status, JSON.stringify(one.body)).toBe(200);
    expect(one.body).toMatchObject({ object: 'file', type: 'image', filename: 'a.png', bytes: image.length });
    expect(await files()).toBe(before + 1);
    await expectAliveAndClean();
  });

  it('a spool folder that cannot be written: 500 internal_error, and the server keeps serving', async () => {
    const gone = path.join(spoolDir, 'missing');
    const url = await listen(gone);
    expectError(await post(Buffer.concat([part('form-data; name="file"; filename="a.png"', image), end]), url), 500, 'internal_error');
    await expectAliveAndClean(url);
  });
});
