import fs from 'node:fs/promises';
import path from 'node:path';

/**
 * Each reliability test file reports what it measured as one section of
 * test/reliability/RESULTS.md: markdown built from this run's counts, never constants. The
 * sections land in test/reliability/.results/ (git-ignored); scripts/reliability.ts puts them
 * together, with the machine and the date, once the whole suite has run.
 */
export const RESULTS_DIR = path.resolve(import.meta.dirname, '..', '.results');

/** True for `npm run test:reliability -- --full`: the long runs (more jobs, more kills, more cases). */
export const FULL = process.env.RELIABILITY_FULL === '1';

/** Picks the CI figure or the full one. */
export const scale = (ci: number, full: number): number => (FULL ? full : ci);

/**
 * Writes this file's section. `order` places it in RESULTS.md (1 fuzzing … 8 signals, as in the
 * issue); `markdown` starts with its own `## ` heading.
 */
export async function reportSection(name: string, order: number, markdown: string): Promise<void> {
  await fs.mkdir(RESULTS_DIR, { recursive: true });
  await fs.writeFile(path.join(RESULTS_DIR, `${String(order).padStart(2, '0')}-${name}.md`), `${markdown.trim()}\n`);
}

/** A markdown table from a header row and rows of cells. */
export function table(header: string[], rows: (string | number | bigint)[][]): string {
  const line = (cells: (string | number | bigint)[]) => `| ${cells.map((c) => String(c).replace(/\|/g, '\\|')).join(' | ')} |`;
  return [line(header), line(header.map(() => '---')), ...rows.map(line)].join('\n');
}
