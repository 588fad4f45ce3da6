import type { EntityManager } from '@mikro-orm/postgresql';
import type { Clock, UrlSigner } from '../ports.ts';

export type FileKind = 'image' | 'video' | 'audio' | 'model' | 'other';

export interface FileRow {
  id: string;
  account_id: string;
  filename: string;
  bytes: string;
  mime_type: string;
  type: FileKind;
  storage_key: string;
  created_at: Date;
}

export async function loadFile(em: EntityManager, id: string): Promise<FileRow | undefined> {
  const [row] = await em.execute<FileRow[]>('select *, bytes::text from files where id = ?', [id]);
  return row;
}

/** The account's own file, or undefined (another account's file is as unknown as a missing one). */
export async function findOwnFile(em: EntityManager, accountId: string, id: string): Promise<FileRow | undefined> {
  const row = await loadFile(em, id);
  return row && row.account_id === accountId ? row : undefined;
}

/** The file object; its `url` is a signed link valid for an hour from now. */
export function fileView(deps: { signer: UrlSigner; clock: Clock }, row: FileRow) {
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
