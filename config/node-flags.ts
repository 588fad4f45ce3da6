/**
 * The V8 flags the service's long-running processes run with: package.json's `start`,
 * `start:api` and `worker` scripts carry the same (test/unit/node-flags.test.ts keeps them
 * equal), `npm start` passes them to its worker process (config/worker-process.ts), and the
 * benchmarks start the service with them.
 *
 * `--max-semi-space-size=16`: V8 13 (Node 24) lets the young generation grow to 2 × 64 MiB on
 * a machine with this much memory (Node 20's V8: 2 × 16), and an API process that has started
 * (migrations, seeding, the first requests) keeps it committed while idle: 128 MiB of new
 * space, about 30 MiB of it resident (bench/RESULTS.md, "Round 3", "Memory"). 16 is Node 20's
 * size; a larger young generation measured no faster on the chat path (round 1, `=64`).
 */
export const NODE_FLAGS: readonly string[] = ['--max-semi-space-size=16'];
