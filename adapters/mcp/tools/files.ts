import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { z } from 'zod';
import { invalid } from '../../../core/errors.ts';
import { fileSchema } from '../../../core/files/file-row.ts';
import { defineTool } from '../tool.ts';

const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;

export const uploadFile = defineTool({
  name: 'upload_file',
  title: 'Upload a file',
  description:
    'Uploads a file to use as a generation input (its id goes in generate\'s `inputs`). Give either `url`, a public http(s) URL ' +
    'the service fetches (up to 50 MB; private and local addresses are refused), or `content`, the file base64-encoded, with a ' +
    '`filename` (bounded by the request size limit: about 12 MB of file; bigger files go by url). The kind (image, video, audio, model) is read from the bytes. Free.',
  input: z
    .object({
      url: z.string().min(1).max(2000).optional().describe('A public http(s) URL of the file, e.g. "https://example.com/photo.png".'),
      content: z.string().min(1).optional().describe('The file itself, base64-encoded (standard alphabet, padding optional).'),
      filename: z.string().min(1).max(255).optional().describe('The file name, e.g. "photo.png"; required with content.'),
      idempotency_key: z.string().min(1).max(255).optional().describe('Retrying with the same key and file returns the same file.'),
    })
    .refine((a) => (a.url === undefined) !== (a.content === undefined), { path: ['url'], message: 'give url or content, not both and not neither' })
    .refine((a) => a.content === undefined || a.filename !== undefined, { path: ['filename'], message: 'is required with content' }),
  output: fileSchema,
  annotations: { readOnlyHint: false, destructiveHint: false, idempotentHint: false, openWorldHint: true },
  async run(args, { core }) {
    const file =
      args.url !== undefined
        ? (await core.files.import({ url: args.url, filename: args.filename, idempotency_key: args.idempotency_key })).file
        : await fromBase64(args.content!, args.filename!, (upload) => core.files.create({ upload, idempotency_key: args.idempotency_key }));
    return { structured: file, text: `Uploaded ${file.id}: ${file.filename} (${file.type}, ${file.mime_type}, ${file.bytes} bytes). Use "${file.id}" as a generation input.` };
  },
});

/** Decodes the base64 content into a temporary file (like REST's multipart spooling), and removes it after. */
async function fromBase64<T>(content: string, filename: string, create: (upload: { path: string; filename: string; bytes: number; sha256: string }) => Promise<{ file: T }>): Promise<T> {
  const text = /\s/.test(content) ? content.replace(/\s+/g, '') : content;
  if (!BASE64.test(text) || text.length % 4 === 1) throw invalid('content', "Invalid value for 'content': not base64.", 'invalid_base64');
  const bytes = Buffer.from(text, 'base64');
  const target = path.join(os.tmpdir(), `mcp-upload-${randomBytes(8).toString('hex')}`);
  await fs.writeFile(target, bytes, { mode: 0o600 });
  try {
    return (await create({ path: target, filename, bytes: bytes.length, sha256: createHash('sha256').update(bytes).digest('hex') })).file;
  } finally {
    await fs.rm(target, { force: true });
  }
}
