import { unsupportedNode } from './node-version.ts';

// Imported first by every entry point (ES modules run their imports in order), so that an old
// Node.js stops with one line saying what to do before anything else loads.
const problem = unsupportedNode(process.versions.node);
if (problem) {
  process.stderr.write(`${problem}\n`);
  process.exit(1);
}
