import fs from 'node:fs/promises';
import type { FileKind } from './file-row.ts';

const MODEL_EXTENSIONS = new Set(['glb', 'gltf', 'obj', 'stl', 'ply', 'fbx', '3mf', 'usdz']);

/** The kind of a file from its bytes (never its name): file-type's magic numbers, plus JSON glTF, which has none. */
export async function detectKind(path: string): Promise<{ mimeType: string; type: FileKind }> {
  const found = await (await import('file-type')).fileTypeFromFile(path);
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
