import type { Writable } from 'node:stream';

/**
 * Resolves when a response that refused a write can take more, or is gone (a client that went
 * away never drains); leaves no listener behind. The event streams (REST) and the MCP binding's
 * web responses both wait on it between chunks.
 */
export function drained(res: Writable): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      res.off('drain', done);
      res.off('close', done);
      resolve();
    };
    res.once('drain', done);
    res.once('close', done);
  });
}
