import { createReadStream } from 'node:fs';
import fs from 'node:fs/promises';
import { PassThrough, pipeline, type Readable } from 'node:stream';
import { createRequire } from 'node:module';
import type { S3Client } from '@aws-sdk/client-s3';
import type { ByteRange, ResultStorage } from '../../core/ports.ts';

/**
 * Results and uploads in an S3-compatible bucket (AWS S3, MinIO, R2…), through the AWS SDK.
 * Credentials come from S3_ACCESS_KEY_ID / S3_SECRET_ACCESS_KEY when set, else the SDK's usual
 * chain (environment, profile, instance role).
 */
export interface S3StorageConfig {
  bucket: string;
  region: string;
  endpoint?: string | undefined;
  forcePathStyle: boolean;
  accessKeyId?: string | undefined;
  secretAccessKey?: string | undefined;
  prefix?: string;
}

export function s3Storage(config: S3StorageConfig): ResultStorage & { client: S3Client } {
  // The SDK (CommonJS; about 6 MiB of heap, 16 of RSS) is loaded only by a process that uses S3 storage.
  const { DeleteObjectCommand, GetObjectCommand, HeadObjectCommand, NoSuchKey, PutObjectCommand, S3Client } = createRequire(import.meta.url)(
    '@aws-sdk/client-s3',
  ) as typeof import('@aws-sdk/client-s3');
  const client = new S3Client({
    region: config.region,
    ...(config.endpoint ? { endpoint: config.endpoint } : {}),
    forcePathStyle: config.forcePathStyle,
    // Checksums only where S3 requires them: many S3-compatible servers do not read the SDK's
    // default aws-chunked bodies with trailing checksums.
    requestChecksumCalculation: 'WHEN_REQUIRED',
    responseChecksumValidation: 'WHEN_REQUIRED',
    ...(config.accessKeyId && config.secretAccessKey
      ? { credentials: { accessKeyId: config.accessKeyId, secretAccessKey: config.secretAccessKey } }
      : {}),
  });
  const key = (k: string) => `${config.prefix ?? ''}${k}`;
  /**
   * One GET (of a range, when given) streamed through a PassThrough that the caller owns:
   * a failed request or a body that breaks off destroys it with the error (never an
   * unhandled 'error' on the SDK's body), and destroying it (a client gone) aborts the
   * request and destroys the body, which frees the connection. `If-Match` ties the bytes to
   * the ETag `open` answered with.
   */
  const streamObject = (fullKey: string, etag: string, range?: ByteRange): Readable => {
    const out = new PassThrough();
    const abort = new AbortController();
    out.once('close', () => abort.abort());
    client
      .send(
        new GetObjectCommand({ Bucket: config.bucket, Key: fullKey, ...(etag ? { IfMatch: etag } : {}), ...(range ? { Range: `bytes=${range.start}-${range.end}` } : {}) }),
        { abortSignal: abort.signal },
      )
      .then(
        (res) => {
          const body = res.Body as Readable | undefined;
          if (!body) return out.destroy(new Error(`s3: no body for ${fullKey}`));
          pipeline(body, out, (err) => {
            if (err) out.destroy(err);
          });
        },
        (err: Error) => out.destroy(err),
      );
    return out;
  };
  return {
    client,
    async put(k, bytes) {
      await client.send(new PutObjectCommand({ Bucket: config.bucket, Key: key(k), Body: bytes, ContentLength: bytes.length }));
    },
    async putFile(k, sourcePath) {
      const { size } = await fs.stat(sourcePath);
      // The SDK pipes the stream without listening for its errors: a read error must abort the
      // send (and fail this call), never reach the process as an unhandled 'error' event.
      const abort = new AbortController();
      const body = createReadStream(sourcePath).on('error', (err) => abort.abort(err));
      try {
        await client.send(new PutObjectCommand({ Bucket: config.bucket, Key: key(k), Body: body, ContentLength: size }), { abortSignal: abort.signal });
      } finally {
        body.destroy();
      }
      await fs.rm(sourcePath, { force: true });
    },
    async get(k) {
      try {
        const res = await client.send(new GetObjectCommand({ Bucket: config.bucket, Key: key(k) }));
        return res.Body ? await res.Body.transformToByteArray() : undefined;
      } catch (err) {
        if (err instanceof NoSuchKey || (err as { name?: string }).name === 'NoSuchKey') return undefined;
        throw err;
      }
    },
    async open(k) {
      let head;
      try {
        head = await client.send(new HeadObjectCommand({ Bucket: config.bucket, Key: key(k) }));
      } catch (err) {
        // A HEAD has no body, so no NoSuchKey: the SDK names a 404 NotFound.
        if ((err as { name?: string }).name === 'NotFound' || (err as { $metadata?: { httpStatusCode?: number } }).$metadata?.httpStatusCode === 404) return undefined;
        throw err;
      }
      const etag = head.ETag ?? '';
      return {
        size: head.ContentLength ?? 0,
        // S3's ETag is strong (an MD5, or the multipart form "…-N"); quoted as HTTP wants it.
        etag: etag.startsWith('"') ? etag : `"${etag}"`,
        lastModified: head.LastModified ?? new Date(0),
        stream: (range) => streamObject(key(k), etag, range),
      };
    },
    async delete(k) {
      await client.send(new DeleteObjectCommand({ Bucket: config.bucket, Key: key(k) }));
    },
  };
}
