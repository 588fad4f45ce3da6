import fs from 'node:fs/promises';
import type { EntityManager } from '@mikro-orm/postgresql';
import { fileTypeFromFile } from 'file-type';
import type { CoreDeps } from '../context.ts';
import { notFound } from '../errors.ts';
import { newId } from '../ids.ts';
import { idempotent, requestHash } from '../idempotency.ts';
import type { Principal } from '../keys/authenticate.ts';

/**
 * POST /files: a file, spooled to disk by the transport, is identified from its bytes (not its
 * name), moved into storage and recorded. Usable as a generation input by the account that
 * uploaded it.
 */
export const MAX_UPLOAD_BYTES = 50 * 1024 * 1024;
export type FileKind = 'image' | 'video' | 'audio' | 'model' | 'other';

export interface SpooledUpload {
  path: string;
  filename: string;
  bytes: number;
  sha256: string;
}

interface FileRow {
  id: string;
  account_id: string;
  filename: string;
  bytes: string;
  mime_type: string;
  type: FileKind;
  storage_key: string;
  created_at: Date;
}

const MODEL_EXTENSIONS = new Set(['glb', 'gltf', 'obj', 'stl', 'ply', 'fbx', '3mf', 'usdz']);

/** The kind of a file from its bytes: file-type's magic numbers, plus JSON glTF, which has none. */
export async function detectKind(path: string): Promise<{ mimeType: string; type: FileKind }> {
  const found = await fileTypeFromFile(path);
  if (found) {
    const type: FileKind = found.mime.startsWith('image/')
      ? 'image'
      : found.mime.startsWith('video/')
        ? 'video'
        : found.mime.startsWith('audio/')
          ? 'audio'
          : found.mime.startsWith('model/') || MODEL_EXTENSIONS.has(found.ext)
            ? 'model'
            : 'other';
    return { mimeType: found.mime, type };
  }
  const handle = await fs.open(path);
  try {
    const head = Buffer.alloc(4096);
    const { bytesRead } = await handle.read(head, 0, head.length, 0);
    const text = head.subarray(0, bytesRead).toString('utf8');
    if (/^\s*\{/.test(text) && /"asset"\s*:\s*\{[^}]*"version"\s*:\s*"2\.\d"/.test(text)) return { mimeType: 'model/gltf+json', type: 'model' };
  } finally {
    await handle.close();
  }
  return { mimeType: 'application/octet-stream', type: 'other' };
}

export async function createFile(deps: CoreDeps, em: EntityManager, principal: Principal, upload: SpooledUpload, idempotencyKey?: string) {
  const work = async (tx: EntityManager) => {
    const { mimeType, type } = await detectKind(upload.path);
    const id = newId('file');
    const key = `files/${principal.accountId}/${id}`;
    await deps.storage.putFile(key, upload.path);
    await tx.execute(
      'insert into files (id, account_id, filename, bytes, mime_type, type, storage_key) values (?, ?, ?, ?, ?, ?, ?)',
      [id, principal.accountId, upload.filename, upload.bytes, mimeType, type, key],
    );
    return { status: 200, body: fileView(deps, await loadFile(tx, id)) };
  };
  if (!idempotencyKey) return { ...(await em.transactional(work)), replayed: false };
  const ref = { accountId: principal.accountId, scope: 'files.create', key: idempotencyKey, hash: requestHash({ sha256: upload.sha256, filename: upload.filename }) };
  return em.transactional((tx) => idempotent(tx, ref, () => work(tx)));
}

async function loadFile(em: EntityManager, id: string): Promise<FileRow | undefined> {
  const [row] = await em.execute<FileRow[]>('select *, bytes::text from files where id = ?', [id]);
  return row;
}

/** The account's own file, or undefined (another account's file is as unknown as a missing one). */
export async function findOwnFile(em: EntityManager, accountId: string, id: string): Promise<FileRow | undefined> {
  const row = await loadFile(em, id);
  return row && row.account_id === accountId ? row : undefined;
}

/** The file object; its `url` is a signed link valid for an hour from now. */
export function fileView(deps: CoreDeps, row: FileRow | undefined) {
  if (!row) throw notFound('file_not_found', 'No such file.');
  return {
    id: row.id,
    object: 'file' as const,
    type: row.type,
    url: deps.signer.sign(row.id, new Date(deps.clock().getTime() + 3_600_000), 'file'),
    bytes: Number(row.bytes),
    mime_type: row.mime_type,
    filename: row.filename,
    created_at: new Date(row.created_at).toISOString(),
  };
}

export async function getFile(deps: CoreDeps, em: EntityManager, principal: Principal, id: string) {
  const row = await findOwnFile(em, principal.accountId, id);
  if (!row) throw notFound('file_not_found', `No file ${id}.`);
  return fileView(deps, row);
}

/** The bytes behind a signed file link. */
export async function readFileContent(deps: CoreDeps, em: EntityManager, id: string, expires: unknown, signature: unknown) {
  deps.signer.verify(id, expires, signature, deps.clock(), 'file');
  const row = await loadFile(em, id);
  const bytes = row ? await deps.storage.get(row.storage_key) : undefined;
  if (!row || !bytes) throw notFound('file_not_found', 'This file is no longer stored.');
  return { bytes, mimeType: row.mime_type, filename: row.filename };
}

/** Reads a file's bytes for a job (the local provider feeds them into its seed). */
export async function readFileBytes(deps: CoreDeps, em: EntityManager, id: string): Promise<Uint8Array> {
  const row = await loadFile(em, id);
  const bytes = row ? await deps.storage.get(row.storage_key) : undefined;
  if (!bytes) throw new Error(`input file ${id} is no longer stored`);
  return bytes;
}
