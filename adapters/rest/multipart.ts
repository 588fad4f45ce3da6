import { createHash, randomBytes } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';
import { Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import busboy from 'busboy';
import type { Request } from 'express';
import { MAX_UPLOAD_BYTES, type SpooledUpload } from '../../core/files/files.ts';

/** A client mistake in an upload, answered with `status` and `code` (docs/errors.md). */
export class UploadError extends Error {
  readonly status: number;
  readonly code: string;
  constructor(status: number, code: string, message: string) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

/** A `file` part sent without a filename arrives as a plain form field, held in memory: this much at most. */
export const MAX_FIELD_FILE_BYTES = 1024 * 1024;
const DEFAULT_FILENAME = 'upload';

const unreadable = () => new UploadError(400, 'invalid_multipart', 'The multipart body could not be read.');
const secondFile = () =>
  new UploadError(400, 'invalid_value', "Invalid value for 'file': send one file per upload; this body has more than one part named 'file'. Nothing was stored.");
const tooLarge = (limit: number, hint = '') => new UploadError(413, 'request_too_large', `The file is larger than the ${limit / 1024 / 1024} MB limit.${hint}`);

/**
 * Streams the multipart part `file` to a temporary file in `dir` through busboy, never holding
 * it in memory, counting and hashing it on the way. A `file` part without a filename (a plain
 * form field to busboy) is accepted too, up to 1 MB, and named "upload". A second `file` part
 * (with a filename or without) is a 400 naming 'file': nothing is kept of the first.
 *
 * Hostile bodies: every error of every stream on the way (the request, busboy, which may emit
 * 'error' many times, the part's stream, the hashing Transform, the temporary file) is
 * listened to with `on`, so none can reach the process as an uncaught exception; the first one
 * settles the promise, the later ones are ignored. On any failure the request is no longer
 * read, the parser and the part are destroyed, and the partial temporary file is removed
 * before the promise rejects. Over 50 MB: 413. The promise resolves only once the whole body
 * has been parsed, so a body broken after its file part is still a 400.
 */
export function spoolUpload(req: Request, dir: string, limits: { fileBytes?: number; fieldFileBytes?: number } = {}): Promise<SpooledUpload> {
  const fileBytes = limits.fileBytes ?? MAX_UPLOAD_BYTES;
  const fieldFileBytes = Math.min(limits.fieldFileBytes ?? MAX_FIELD_FILE_BYTES, fileBytes);
  return new Promise((resolve, reject) => {
    let parser: busboy.Busboy;
    try {
      parser = busboy({
        headers: req.headers,
        // latin1 turns a field's bytes into a string and back unchanged (a `file` part without filename).
        defCharset: 'latin1',
        // Fields are held in memory until they end (busboy buffers every field it reports), so few
        // of them: at most 5 × 1 MB for a request, whatever its other parts.
        // busboy reports 'limit' when a file *reaches* fileSize: one byte more, so that a file of
        // exactly the limit (50 MB, which the limit allows) is accepted and one byte over is not.
        // Every file part is reported (up to the parts limit), so that a second `file` part is
        // refused rather than skipped unseen; parts of other names are read past and dropped.
        limits: { fileSize: fileBytes + 1, fieldSize: fieldFileBytes, files: 20, fields: 5, parts: 20, headerPairs: 20 },
      });
    } catch {
      reject(new UploadError(400, 'invalid_multipart', "Send the file as multipart/form-data in a part named 'file'."));
      return;
    }

    let settled = false;
    let parsed = false;
    /** The part being written, and the temporary file it goes to (removed on failure). */
    let writing: Promise<SpooledUpload> | undefined;
    let written: SpooledUpload | undefined;
    let part: Readable | undefined;

    const stopReading = () => {
      req.unpipe(parser);
      parser.removeAllListeners('file').removeAllListeners('field');
      parser.destroy();
    };

    const fail = (err: Error) => {
      if (settled) return;
      settled = true;
      stopReading();
      part?.destroy(err);
      // Wait for the write to stop, then remove whatever it left; reject only after that.
      void (writing ?? Promise.resolve(undefined))
        .then(
          (done) => (done ? fs.rm(done.path, { force: true }) : undefined),
          () => undefined,
        )
        .catch(() => undefined)
        .finally(() => reject(err));
    };

    const succeedIfDone = () => {
      if (settled || !parsed || !written) return;
      settled = true;
      resolve(written);
    };

    const spool = (source: Readable, filename: string | undefined) => {
      const target = path.join(dir, `upload-${randomBytes(8).toString('hex')}`);
      const hash = createHash('sha256');
      let bytes = 0;
      let diskError: Error | undefined;
      const count = new Transform({
        transform(chunk: Buffer, _enc, done) {
          bytes += chunk.length;
          hash.update(chunk);
          done(null, chunk);
        },
      });
      const sink = createWriteStream(target, { mode: 0o600 });
      sink.on('error', (err) => (diskError ??= err));
      count.on('error', () => undefined);
      writing = (async () => {
        try {
          await pipeline(source, count, sink);
        } catch (err) {
          // pipeline() rejects at the first error, possibly while the file is still being opened:
          // wait until it is closed (so it exists, if it ever will), then remove it.
          if (!sink.closed) await new Promise<void>((resolve) => sink.once('close', () => resolve()));
          await fs.rm(target, { force: true }).catch(() => undefined);
          // The disk failing is ours (500); the part ending badly or over the limit is the client's.
          throw err instanceof UploadError ? err : (diskError ?? unreadable());
        }
        return { path: target, filename: (filename || DEFAULT_FILENAME).slice(0, 255), bytes, sha256: hash.digest('hex') };
      })();
      writing.then(
        (done) => {
          written = done;
          succeedIfDone();
        },
        fail,
      );
    };

    parser.on('file', (field, stream, info) => {
      // Every part's stream gets an error listener: busboy destroys it with an error when the body ends early.
      stream.on('error', () => undefined);
      if (field !== 'file' || settled) {
        stream.resume();
        return;
      }
      if (writing) {
        // A second `file` part: one upload is one file. The first one's temporary file is removed.
        stream.resume();
        fail(secondFile());
        return;
      }
      part = stream;
      // Over the limit: stop reading the request at once; the write fails and the partial file is removed.
      stream.once('limit', () => {
        req.unpipe(parser);
        stream.destroy(tooLarge(fileBytes));
      });
      spool(stream, info.filename);
    });
    parser.on('field', (field, value, info) => {
      if (field !== 'file' || settled) return;
      if (writing) {
        fail(secondFile());
        return;
      }
      if (info.valueTruncated) {
        fail(tooLarge(fieldFileBytes, " A 'file' part without a filename is limited to this size; send larger files with a filename."));
        return;
      }
      part = Readable.from([Buffer.from(value, 'latin1')], { objectMode: false });
      spool(part, undefined);
    });
    parser.on('error', () => fail(unreadable()));
    parser.on('close', () => {
      parsed = true;
      if (!writing) fail(new UploadError(400, 'missing_field', "Missing required parameter: 'file' (a multipart form field)."));
      else succeedIfDone();
    });
    req.on('error', () => fail(unreadable()));
    req.on('close', () => {
      // The client went away before sending the whole body: nothing more will come.
      if (!req.complete) fail(unreadable());
    });
    req.pipe(parser);
  });
}
