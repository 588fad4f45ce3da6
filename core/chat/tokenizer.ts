import { createRequire } from 'node:module';

type O200k = typeof import('gpt-tokenizer/encoding/o200k_base');

const require = createRequire(import.meta.url);
let loaded: O200k | undefined;

/**
 * The o200k_base tokenizer, loaded on first use (its CommonJS build, so that loading stays
 * synchronous): its merge ranks take about 20 MB of heap, which a process that never counts
 * tokens (a worker, an instance that serves no chat) does not pay.
 */
export function o200k(): O200k {
  return (loaded ??= require('gpt-tokenizer/encoding/o200k_base') as O200k);
}
