import { builder } from '../builder.ts';
import { Account } from './account.ts';
import { connection, pageArgs, pageComplexity, pageOf, present, timeRangeFields } from './paging.ts';

const FileType = builder.enumType('FileType', { values: ['image', 'video', 'audio', 'model', 'other'] as const });

interface FileShape {
  id: string;
  account: string;
  type: 'image' | 'video' | 'audio' | 'model' | 'other';
  url: string;
  bytes: number;
  mime_type: string;
  filename: string;
  created_at: string;
}

const File = builder.objectRef<FileShape>('File').implement({
  description: 'An uploaded file.',
  fields: (t) => ({
    id: t.exposeID('id', { description: '`file_…`' }),
    account: t.field({ type: Account, resolve: (f) => f.account }),
    type: t.field({ type: FileType, resolve: (f) => f.type, description: 'The kind, from the bytes.' }),
    url: t.exposeString('url', { description: 'A signed link, valid for an hour.' }),
    bytes: t.exposeInt('bytes'),
    mimeType: t.exposeString('mime_type'),
    filename: t.exposeString('filename'),
    createdAt: t.expose('created_at', { type: 'DateTime' }),
  }),
});

const FileConnection = builder.connectionObject({ type: File, name: 'FileConnection' });

const FileFilter = builder.inputType('FileFilter', { fields: (t) => ({ type: t.field({ type: FileType }), ...timeRangeFields(t) }) });

type FileArgs = { first?: number | null; after?: string | null; filter?: { type?: FileShape['type'] | null; since?: string | null; until?: string | null } | null };

const fileInput = (account: string | null | undefined, args: FileArgs) => {
  const f = args.filter ?? {};
  return { ...pageOf(args), ...present({ account, type: f.type, since: f.since, until: f.until }) };
};

builder.queryField('files', (t) =>
  t.field({
    type: FileConnection,
    description: 'Uploaded files of every account, newest first.',
    args: { ...pageArgs(t.arg), account: t.arg.id(), filter: t.arg({ type: FileFilter }) },
    complexity: pageComplexity,
    resolve: async (_root, args, ctx) => connection(await ctx.core.admin.read.files.list(fileInput(args.account, args))),
  }),
);

builder.objectField(Account, 'files', (t) =>
  t.field({
    type: FileConnection,
    args: { ...pageArgs(t.arg), filter: t.arg({ type: FileFilter }) },
    complexity: pageComplexity,
    resolve: async (a, args, ctx) => connection(await ctx.core.admin.read.files.list(fileInput(a.id, args))),
  }),
);
