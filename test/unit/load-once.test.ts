import { describe, expect, it } from 'vitest';
import { loadOnce } from '../../adapters/load-once.ts';

describe('loadOnce', () => {
  it('loads on the first use only, then every caller shares it; a failed load is tried again next time', async () => {
    let calls = 0;
    const load = loadOnce(async () => {
      calls++;
      if (calls === 1) throw new Error('not yet');
      return { n: calls };
    });
    expect(calls).toBe(0);
    await expect(load()).rejects.toThrow('not yet');
    const [a, b] = await Promise.all([load(), load()]);
    expect(a).toBe(b);
    expect(await load()).toBe(a);
    expect(calls).toBe(2);
  });
});
