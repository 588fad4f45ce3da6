import type { EntityManager } from '@mikro-orm/postgresql';
import { z } from 'zod';
import { fileView, type FileRow } from '../../files/file-row.ts';
import type { Clock, UrlSigner } from '../../ports.ts';
import { accountId } from './accounts.ts';
import { checkCursor, Conditions, pageInput, pageOf, prefixedId, timeRangeInput } from './paging.ts';

export const fileListInput = pageInput.merge(timeRangeInput).extend({
  account: accountId.optional(),
  type: z.enum(['image', 'video', 'audio', 'model', 'other']).optional(),
  after: prefixedId('file').optional(),
});

/** Uploaded files of every account (or one), newest first: the file object (a fresh signed link) and its account. */
export async function listAdminFiles(deps: { signer: UrlSigner; clock: Clock }, em: EntityManager, input: z.output<typeof fileListInput>) {
  const where = new Conditions().range('f.created_at', input).after('f', 'files', input.after);
  where.addIf(input.account, 'f.account_id = ?').addIf(input.type, 'f.type = ?');
  const rows = await em.execute<FileRow[]>(
    `select f.*, f.bytes::text from files f ${where.sql()} order by f.created_at desc, f.id desc limit ?`,
    [...where.params, input.first + 1],
  );
  await checkCursor(em, 'files', input.after, rows);
  return pageOf(
    rows.map((row) => ({ ...fileView(deps, row), account: row.account_id })),
    input.first,
  );
}
