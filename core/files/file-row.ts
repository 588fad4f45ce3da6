import type { EntityManager } from '@mikro-orm/postgresql';
import { z } from 'zod';
import type { Clock, UrlSigner } from '../ports.ts';
import { isoTimeSchema } from '../views.ts';

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

export const fileSchema = z
  .object({
    id: z.string(),
    object: z.literal('file'),
    type: z.enum(['image', 'video', 'audio', 'model', 'other']).describe('the kind, from the bytes'),
    url: z.string().describe('signed link, valid for one hour'),
    bytes: z.number().int(),
    mime_type: z.string(),
    filename: z.string(),
    created_at: isoTimeSchema,
  })
  .strict();

/** The file object; its `url` is a signed link valid for an hour from now. */
export function fileView(deps: { signer: UrlSigner; clock: Clock }, row: FileRow): z.infer<typeof fileSchema> {
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
