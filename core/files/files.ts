import type { EntityManager } from '@mikro-orm/postgresql';
import type { SpendingPrincipal } from '../auth/principals.ts';
import { CoreError } from '../errors.ts';
import { newId } from '../ids.ts';
import { idempotent, requestHash } from '../idempotency.ts';
import type { Clock, ResultStorage, UrlSigner } from '../ports.ts';
import { detectKind } from './detect-kind.ts';
import { fileView, loadFile } from './file-row.ts';

/** SPEC part 8: the upload limit. */
export const MAX_UPLOAD_BYTES = 50 * 1024 * 1024;

/** An upload the transport has already written to a temporary file, counted and hashed. */
export interface SpooledUpload {
  path: string;
  filename: string;
  bytes: number;
  sha256: string;
}

/**
 * Uploads a file: its kind is identified from its bytes (not its name), it is moved into
 * storage and recorded, usable as a generation input by the account that uploaded it. With an
 * idempotency key, a repeat of the same upload returns the first file.
 */
export async function createFile(
  deps: { storage: ResultStorage; signer: UrlSigner; clock: Clock },
  em: EntityManager,
  principal: SpendingPrincipal,
  upload: SpooledUpload,
  idempotencyKey?: string,
) {
  // The transports stop reading at the limit; the rule itself is core's.
  if (upload.bytes > MAX_UPLOAD_BYTES) {
    throw new CoreError('invalid_request', `The file is larger than the ${MAX_UPLOAD_BYTES / 1024 / 1024} MB upload limit.`, { param: 'file', reason: 'file_too_large' });
  }
  const work = async (tx: EntityManager) => {
    const { mimeType, type } = await detectKind(upload.path);
    const id = newId('file');
    const key = `files/${principal.accountId}/${id}`;
    await deps.storage.putFile(key, upload.path);
    await tx.execute('insert into files (id, account_id, filename, bytes, mime_type, type, storage_key) values (?, ?, ?, ?, ?, ?, ?)', [
      id,
      principal.accountId,
      upload.filename,
      upload.bytes,
      mimeType,
      type,
      key,
    ]);
    return fileView(deps, (await loadFile(tx, id))!);
  };
  if (!idempotencyKey) return { file: await em.transactional(work), replayed: false };
  const ref = { accountId: principal.accountId, scope: 'files.create', key: idempotencyKey, hash: requestHash({ sha256: upload.sha256, filename: upload.filename }) };
  const { result, replayed } = await em.transactional((tx) => idempotent(tx, ref, () => work(tx)));
  return { file: result, replayed };
}
