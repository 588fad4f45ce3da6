import { describe, expect, it } from 'vitest';
import { OPTIONS, USAGES } from '../../adapters/cli/mas.ts';

/** `mas` refuses a flag its parser does not know before any command runs: every flag a usage line (and so `--help` and the docs) names must be one it knows. */
describe('the CLI’s flags', () => {
  it('accepts every flag that a command’s usage names, key create’s limits among them', () => {
    const named = new Set(USAGES.flatMap((usage) => [...usage.matchAll(/--([a-z][a-z-]*)/g)].map((m) => m[1]!)));
    for (const flag of ['spend-limit-coins', 'spend-limit-period', 'expires-at', 'allowed-models']) expect(named).toContain(flag);
    const unknown = [...named].filter((flag) => !(flag in OPTIONS));
    expect(unknown).toEqual([]);
  });
});
