import nodeFs from 'node:fs';
import fs from 'node:fs/promises';
import { syncBuiltinESMExports } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import S3rver from 's3rver';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { localDiskStorage } from '../../adapters/storage/local-disk.ts';
import { s3Storage } from '../../adapters/storage/s3.ts';
import type { ResultStorage } from '../../core/ports.ts';

/**
 * The storage port's contract, run against each driver: local disk, and the S3 driver (AWS
 * SDK) against s3rver, an S3-compatible server on this machine.
 */
let root: string;
let s3: S3rver;
const drivers: Record<string, () => ResultStorage> = {};

beforeAll(async () => {
  root = await fs.mkdtemp(path.join(os.tmpdir(), 'mas-storage-contract-'));
  s3 = new S3rver({ port: 0, address: '127.0.0.1', silent: true, directory: path.join(root, 's3'), configureBuckets: [{ name: 'mas-test' }] });
  const { port } = await s3.run();
  drivers.local = () => localDiskStorage(path.join(root, 'disk'));
  drivers.s3 = () =>
    s3Storage({ bucket: 'mas-test', region: 'us-east-1', endpoint: `http://127.0.0.1:${port}`, forcePathStyle: true, accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER' });
});
afterAll(async () => {
  await s3.close();
  await fs.rm(root, { recursive: true, force: true });
});

describe.each(['local', 's3'])('storage driver: %s', (name) => {
  it('stores, reads back, moves a spooled file in, and deletes', async () => {
    const storage = drivers[name]!();
    const bytes = new Uint8Array([1, 2, 3, 250]);
    await storage.put('generations/a.bin', bytes);
    expect(Buffer.from((await storage.get('generations/a.bin'))!).equals(Buffer.from(bytes))).toBe(true);

    const spooled = path.join(root, `spooled-${name}`);
    await fs.writeFile(spooled, 'uploaded bytes');
    await storage.putFile('files/acct/file_1', spooled);
    expect(Buffer.from((await storage.get('files/acct/file_1'))!).toString()).toBe('uploaded bytes');
    await expect(fs.access(spooled)).rejects.toThrow();

    await storage.delete('generations/a.bin');
    expect(await storage.get('generations/a.bin')).toBeUndefined();
    expect(await storage.get('never/there')).toBeUndefined();
  });
});

describe('storage driver: s3, a source that fails while it is read', () => {
  it('fails the call; the read error never reaches the process as an unhandled error', async () => {
    const uncaught: unknown[] = [];
    let caught!: () => void;
    const uncaughtSeen = new Promise<void>((resolve) => (caught = resolve));
    const onUncaught = (err: unknown) => {
      uncaught.push(err);
      caught();
    };
    process.on('uncaughtException', onUncaught);
    // The driver's read stream of the source, to hear its last event ('close', which comes after
    // any 'error'): from then on it can emit nothing more, so an unhandled error would be in.
    // (An unhandled 'error' throws before 'close' is emitted: that ends the wait too.)
    const folder = await fs.mkdtemp(path.join(root, 'not-a-file-'));
    let closed!: () => void;
    const sourceClosed = new Promise<void>((resolve) => (closed = resolve));
    const realCreateReadStream = nodeFs.createReadStream;
    nodeFs.createReadStream = ((file: nodeFs.PathLike, opts?: Parameters<typeof nodeFs.createReadStream>[1]) => {
      const stream = realCreateReadStream(file, opts);
      if (file === folder) stream.once('close', () => closed());
      return stream;
    }) as typeof nodeFs.createReadStream;
    syncBuiltinESMExports();
    try {
      // A folder: stat succeeds, reading it fails (EISDIR) once the SDK pipes it.
      await expect(drivers.s3!().putFile('files/acct/broken', folder)).rejects.toThrow();
      await Promise.race([sourceClosed, uncaughtSeen]);
      expect(uncaught).toEqual([]);
    } finally {
      nodeFs.createReadStream = realCreateReadStream;
      syncBuiltinESMExports();
      process.off('uncaughtException', onUncaught);
    }
  });
});
