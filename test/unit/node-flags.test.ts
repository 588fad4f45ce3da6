import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { NODE_FLAGS } from '../../config/node-flags.ts';

const root = path.resolve(import.meta.dirname, '../..');
const scripts = (JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8')) as { scripts: Record<string, string> }).scripts;

describe('the V8 flags of the service processes (config/node-flags.ts)', () => {
  it.each([
    ['start', 'main'],
    ['start:api', 'api'],
    ['worker', 'worker'],
  ])('npm run %s starts dist/%s.js with them', (script, entry) => {
    expect(scripts[script]).toBe(`exec node ${NODE_FLAGS.join(' ')} dist/${entry}.js`);
  });
});
