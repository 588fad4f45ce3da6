import type { EntityManager } from '@mikro-orm/postgresql';
import { notFound } from '../errors.ts';
import type { Clock, ResultStorage, UrlSigner } from '../ports.ts';
import { fileView, findOwnFile, loadFile } from './file-row.ts';

/** The account's file object, with a fresh signed link. */
export async function getFile(deps: { signer: UrlSigner; clock: Clock }, em: EntityManager, accountId: string, id: string) {
  const row = await findOwnFile(em, accountId, id);
  if (!row) throw notFound('file_not_found', `No file ${id}.`);
  return fileView(deps, row);
}

/**
 * What a signed file link opens (the signature is the credential): the stored object, to
 * stream whole or in part, with the type and name it is served under. Nothing is read yet.
 */
export async function readFileContent(
  deps: { signer: UrlSigner; clock: Clock; storage: ResultStorage },
  em: EntityManager,
  id: string,
  expires: unknown,
  signature: unknown,
) {
  deps.signer.verify(id, expires, signature, deps.clock(), 'file');
  const row = await loadFile(em, id);
  const object = row ? await deps.storage.open(row.storage_key) : undefined;
  if (!row || !object) throw notFound('file_not_found', 'This file is no longer stored.');
  return { object, mimeType: row.mime_type, filename: row.filename };
}

/** Reads a file's bytes for a job (the local provider feeds them into its seed). */
export async function readFileBytes(deps: { storage: ResultStorage }, em: EntityManager, id: string): Promise<Uint8Array> {
  const row = await loadFile(em, id);
  const bytes = row ? await deps.storage.get(row.storage_key) : undefined;
  if (!bytes) throw new Error(`input file ${id} is no longer stored`);
  return bytes;
}
