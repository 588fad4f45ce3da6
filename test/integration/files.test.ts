import fs from 'node:fs/promises';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type { MikroORM } from '@mikro-orm/postgresql';
import { png, seededRandom, wav } from '../../adapters/providers/media/formats.ts';
import { makeAccount, makeKey } from '../support/db.ts';
import { bearer, getJson } from '../support/http.ts';
import { startJobHarness, type JobHarness } from '../support/jobs.ts';
import { expectSettledWallet } from '../support/ledger.ts';

/** Uploads: POST /files, then the file as a generation input. */
let h: JobHarness;
let orm: MikroORM;
let base: string;
let storageDir: string;

beforeAll(async () => {
  h = await startJobHarness();
  ({ orm, base, storageDir } = h);
});
afterAll(() => h.close());

async function customer() {
  const account = await makeAccount(orm, { coins: '100' });
  return { account, key: (await makeKey(orm, account.id)).key };
}

function upload(key: string, bytes: Uint8Array, filename: string, headers: Record<string, string> = {}) {
  const form = new FormData();
  form.append('file', new Blob([bytes]), filename);
  return getJson(`${base}/api/v1/files`, { method: 'POST', headers: { ...bearer(key), ...headers }, body: form });
}

const local = (url: string) => `${base}${new URL(url).pathname}${new URL(url).search}`;

async function storedFiles(): Promise<number> {
  const dir = path.join(storageDir, 'files');
  const accounts = await fs.readdir(dir).catch(() => []);
  let n = 0;
  for (const a of accounts) n += (await fs.readdir(path.join(dir, a))).length;
  return n;
}

describe('files', () => {
  it('upload, use as a generation input, succeed, download', async () => {
    const { account, key } = await customer();
    const image = png(32, 32, seededRandom(new Uint8Array([1, 2, 3])));
    const res = await upload(key, image, 'holiday.jpg');
    expect(res.status).toBe(200);
    // The kind comes from the bytes (a PNG), not from the name.
    expect(res.body).toMatchObject({ id: expect.stringMatching(/^file_/), object: 'file', type: 'image', mime_type: 'image/png', bytes: image.length, filename: 'holiday.jpg' });
    const content = await fetch(local(res.body.url));
    expect(Buffer.from(await content.arrayBuffer()).equals(Buffer.from(image))).toBe(true);

    const job = await getJson(`${base}/api/v1/generations`, {
      method: 'POST',
      headers: { ...bearer(key), 'content-type': 'application/json', prefer: 'wait=20' },
      body: JSON.stringify({ model: 'mas/image-demo', prompt: 'from my photo', settings: { size: 128 }, inputs: { reference_image: res.body.id } }),
    });
    expect(job.status).toBe(200);
    expect(job.body).toMatchObject({ status: 'succeeded', inputs: { reference_image: res.body.id } });
    expect((await fetch(local(job.body.output.url))).status).toBe(200);
    await expectSettledWallet(orm, account.id);
  });

  it('50 MB + 1 byte: 413 in the error shape, nothing left behind', async () => {
    const { account, key } = await customer();
    const before = await storedFiles();
    const spool = await fs.readdir(os.tmpdir());
    const big = new Uint8Array(50 * 1024 * 1024 + 1);
    const status = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const boundary = 'x-mas-boundary';
      const head = Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="big.bin"\r\nContent-Type: application/octet-stream\r\n\r\n`);
      const tail = Buffer.from(`\r\n--${boundary}--\r\n`);
      const req = http.request(`${base}/api/v1/files`, {
        method: 'POST',
        headers: { ...bearer(key), 'content-type': `multipart/form-data; boundary=${boundary}`, 'content-length': head.length + big.length + tail.length },
      }, (res) => {
        let body = '';
        res.on('data', (c: Buffer) => (body += c.toString()));
        res.on('end', () => resolve({ status: res.statusCode!, body }));
      });
      req.on('error', reject);
      req.write(head);
      req.write(big);
      req.end(tail);
    });
    expect(status.status).toBe(413);
    expect(JSON.parse(status.body).error).toMatchObject({ type: 'invalid_request_error', code: 'request_too_large' });
    expect(await storedFiles()).toBe(before);
    await vi.waitFor(async () => {
      const left = (await fs.readdir(os.tmpdir())).filter((f) => f.startsWith('upload-') && !spool.includes(f));
      expect(left).toEqual([]);
    });
    const [rows] = await orm.em.fork().execute<{ n: number }[]>('select count(*)::int as n from files where account_id = ?', [account.id]);
    expect(rows!.n).toBe(0);
  });

  it("another account's file id is 400, as an unknown one; a file of the wrong kind is 400", async () => {
    const a = await customer();
    const b = await customer();
    const image = (await upload(a.key, png(8, 8, seededRandom(new Uint8Array([9]))), 'a.png')).body.id as string;
    const sound = (await upload(b.key, wav(0.1, seededRandom(new Uint8Array([4]))), 'b.wav')).body;
    expect(sound.type).toBe('audio');
    const submit = (key: string, inputs: Record<string, unknown>) =>
      getJson(`${base}/api/v1/generations`, { method: 'POST', headers: { ...bearer(key), 'content-type': 'application/json' }, body: JSON.stringify({ model: 'mas/image-demo', prompt: 'x', inputs }) });
    const foreign = await submit(b.key, { reference_image: image });
    const unknown = await submit(b.key, { reference_image: 'file_doesnotexist' });
    expect(foreign.status).toBe(400);
    expect(unknown.status).toBe(400);
    expect(foreign.body.error.code).toBe(unknown.body.error.code);
    const wrongKind = await submit(b.key, { reference_image: sound.id });
    expect(wrongKind.status).toBe(400);
    expect(wrongKind.body.error).toMatchObject({ code: 'wrong_file_type' });
    expect(wrongKind.body.error.message).toMatch(/inputs\.reference_image.*audio/);
    await expectSettledWallet(orm, b.account.id);
  });

  it('refuses a request without the file field, and answers an Idempotency-Key with the first file', async () => {
    const { key } = await customer();
    const form = new FormData();
    form.append('other', 'x');
    const missing = await getJson(`${base}/api/v1/files`, { method: 'POST', headers: bearer(key), body: form });
    expect(missing.status).toBe(400);
    expect(missing.body.error.message).toMatch(/'file'/);
    const notMultipart = await getJson(`${base}/api/v1/files`, { method: 'POST', headers: { ...bearer(key), 'content-type': 'application/json' }, body: '{}' });
    expect(notMultipart.status).toBe(400);

    const bytes = png(8, 8, seededRandom(new Uint8Array([7])));
    const first = await upload(key, bytes, 'x.png', { 'idempotency-key': 'upload-1' });
    const again = await upload(key, bytes, 'x.png', { 'idempotency-key': 'upload-1' });
    expect(again.body.id).toBe(first.body.id);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect((await upload(key, png(9, 9, seededRandom(new Uint8Array([7]))), 'x.png', { 'idempotency-key': 'upload-1' })).status).toBe(422);
    expect((await getJson(`${base}/api/v1/files`, { method: 'POST', body: new FormData() })).status).toBe(401);
  });
});
