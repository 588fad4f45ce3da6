import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { EntityManager } from '@mikro-orm/postgresql';
import { z } from 'zod';
import type { SpendingPrincipal } from '../auth/principals.ts';
import { invalid } from '../errors.ts';
import { idempotencyKeySchema } from '../idempotency.ts';
import type { Clock, ResultStorage, UrlGuard, UrlSigner } from '../ports.ts';
import { createFile, MAX_UPLOAD_BYTES } from './files.ts';

export const importFileInput = z.object({
  url: z.string().min(1).max(2000),
  filename: z.string().trim().min(1).max(255).optional(),
  idempotency_key: idempotencyKeySchema.optional(),
});

/** How long a public URL may take to deliver its bytes. */
const FETCH_TIMEOUT_MS = 60_000;

/**
 * Uploads the file at a public URL, for callers that cannot send multipart (AI agents): the
 * bytes are fetched through the URL guard (no private, loopback or link-local address, checked
 * again at connect time; no redirects), up to the upload limit, streamed to a temporary file,
 * then stored as an upload.
 */
export async function importFile(
  deps: { urlGuard: UrlGuard; storage: ResultStorage; signer: UrlSigner; clock: Clock },
  em: EntityManager,
  principal: SpendingPrincipal,
  input: z.output<typeof importFileInput>,
) {
  // Streamed to a temporary file and hashed on the way, like a multipart upload: never held in memory.
  const file = path.join(os.tmpdir(), `import-${randomBytes(8).toString('hex')}`);
  try {
    const { bytes, sha256 } = await deps.urlGuard.download(input.url, file, { maxBytes: MAX_UPLOAD_BYTES, timeoutMs: FETCH_TIMEOUT_MS }).catch((err: unknown) => {
      throw invalid('url', `Invalid value for 'url': ${(err as Error).message}.`, 'invalid_url');
    });
    const filename = input.filename ?? (lastSegment(input.url) || 'upload').slice(0, 255);
    return await createFile(deps, em, principal, { path: file, filename, bytes, sha256 }, input.idempotency_key);
  } finally {
    await fs.rm(file, { force: true });
  }
}

/** The URL's last path segment, decoded; as written when its percent-escapes are not valid UTF-8 (`%E0`). */
function lastSegment(url: string): string {
  const segment = new URL(url).pathname.split('/').pop() ?? '';
  try {
    return decodeURIComponent(segment);
  } catch {
    return segment;
  }
}
