import { realpathSync, readFileSync, existsSync } from 'node:fs';
import path from 'node:path';
import semver from 'semver';
import { describe, expect, it } from 'vitest';
import { REQUIRED_NODE, unsupportedNode } from '../../config/node-version.ts';

/**
 * The project runs on the Node.js pinned in the lockfile (issue 29): npm ci installs the
 * platform's node-<os>-<cpu> package, whose bin is node_modules/.bin/node, and npm scripts run
 * with that first on PATH. These tests run under `npm test`, so they see what every script sees.
 */
const root = path.resolve(import.meta.dirname, '../..');
const pkg = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8')) as {
  engines: { node: string };
  optionalDependencies: Record<string, string>;
};
const platformPackage = `node-${process.platform}-${process.arch}`;
const pinned = pkg.optionalDependencies[platformPackage];

describe('the pinned Node.js', () => {
  it('is pinned for this platform, exactly, and satisfies engines', () => {
    expect(pinned, `package.json optionalDependencies has no ${platformPackage}`).toMatch(/^\d+\.\d+\.\d+$/);
    expect(semver.satisfies(pinned!, pkg.engines.node)).toBe(true);
    expect(pkg.engines.node).toBe(`>=${REQUIRED_NODE.major}.${REQUIRED_NODE.minor}`);
  });

  it('runs this test: the test runner is node_modules/.bin/node at the pinned version', () => {
    const bin = path.join(root, 'node_modules', '.bin', 'node');
    expect(existsSync(bin)).toBe(true);
    expect(realpathSync(process.execPath)).toBe(realpathSync(bin));
    expect(process.version).toBe(`v${pinned}`);
  });

  it('is the `node` that npm scripts find on PATH', () => {
    const first = (process.env.PATH ?? '')
      .split(path.delimiter)
      .map((dir) => path.join(dir, 'node'))
      .find((file) => existsSync(file));
    expect(first && realpathSync(first)).toBe(realpathSync(path.join(root, 'node_modules', '.bin', 'node')));
  });

  it('satisfies the engines of every installed package', () => {
    const lock = JSON.parse(readFileSync(path.join(root, 'package-lock.json'), 'utf8')) as { packages: Record<string, { optional?: boolean }> };
    const refused: string[] = [];
    let checked = 0;
    for (const where of Object.keys(lock.packages)) {
      if (!where) continue;
      const file = path.join(root, where, 'package.json');
      if (!existsSync(file)) continue; // an optional package for another platform
      const { name, version, engines } = JSON.parse(readFileSync(file, 'utf8')) as { name: string; version: string; engines?: { node?: string } };
      checked++;
      if (engines?.node && !semver.satisfies(process.version, engines.node, { includePrerelease: true })) refused.push(`${name}@${version} (${engines.node})`);
    }
    expect(checked).toBeGreaterThan(500);
    expect(refused).toEqual([]);
  });
});

describe('an unsupported Node.js', () => {
  it('is refused with what to do, from 24.11 on accepted', () => {
    expect(unsupportedNode('20.20.2')).toMatch(/needs Node\.js 24\.11 or later, and this is Node\.js 20\.20\.2.*npm start/);
    expect(unsupportedNode('22.21.0')).toBeDefined();
    expect(unsupportedNode('24.10.0')).toBeDefined();
    expect(unsupportedNode('24.11.0')).toBeUndefined();
    expect(unsupportedNode('24.21.0')).toBeUndefined();
    expect(unsupportedNode('26.0.0')).toBeUndefined();
  });
});
