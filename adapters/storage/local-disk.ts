import { randomBytes } from 'node:crypto';
import { createReadStream } from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';
import type { ResultStorage } from '../../core/ports.ts';

/** Results on local disk under DATA_DIR/storage. Writes land whole (temp file, then rename). */
export function localDiskStorage(root: string): ResultStorage {
  const resolve = (key: string) => {
    const full = path.resolve(root, key);
    if (!full.startsWith(path.resolve(root) + path.sep)) throw new Error(`storage key escapes the root: ${key}`);
    return full;
  };
  return {
    async put(key, bytes) {
      const file = resolve(key);
      await fs.mkdir(path.dirname(file), { recursive: true });
      const tmp = `${file}.${randomBytes(6).toString('hex')}.tmp`;
      await fs.writeFile(tmp, bytes);
      await fs.rename(tmp, file);
    },
    async putFile(key, sourcePath) {
      const file = resolve(key);
      await fs.mkdir(path.dirname(file), { recursive: true });
      try {
        await fs.rename(sourcePath, file);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'EXDEV') throw err;
        // Another file system: copy into a temp name beside the target, then rename.
        const tmp = `${file}.${randomBytes(6).toString('hex')}.tmp`;
        await fs.copyFile(sourcePath, tmp);
        await fs.rename(tmp, file);
        await fs.rm(sourcePath, { force: true });
      }
    },
    async get(key) {
      try {
        return new Uint8Array(await fs.readFile(resolve(key)));
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
        throw err;
      }
    },
    async open(key) {
      const file = resolve(key);
      let stat;
      try {
        stat = await fs.stat(file, { bigint: true });
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
        throw err;
      }
      if (!stat.isFile()) return undefined;
      return {
        size: Number(stat.size),
        // Objects are written whole under a new name and never rewritten in place: size and
        // modification time (to the nanosecond) name one content, a strong validator.
        etag: `"${stat.size.toString(16)}-${stat.mtimeNs.toString(16)}"`,
        lastModified: stat.mtime,
        // A read of its own per call, closed when it ends or is destroyed (autoClose).
        stream: (range) => createReadStream(file, range ? { start: range.start, end: range.end } : {}),
      };
    },
    async delete(key) {
      await fs.rm(resolve(key), { force: true });
    },
  };
}
