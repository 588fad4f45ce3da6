import type { EntityManager } from '@mikro-orm/postgresql';
import { z } from 'zod';
import { listHistory, type WalletEntryView } from '../money/history.ts';
import { receiptsOf } from '../payments/receipts.ts';
import { usageInput, usageRange } from './usage.ts';

/**
 * The wallet history as CSV (RFC 4180: comma-separated, CRLF line ends, fields quoted when
 * needed), for the account pages' download: a header, then the rows of `wallet.history`, newest
 * first. At most `MAX_CSV_ROWS` rows (the newest); `truncated` says when there were more.
 */
export const MAX_CSV_ROWS = 10_000;
const PAGE = 100;

/** The first nine columns are the download's columns before the readable ones were added after them (issue 34): readers by position keep working. */
const COLUMNS = ['id', 'created_at', 'type', 'description', 'amount_coins', 'balance_after_coins', 'reference', 'app_connection_id', 'receipt_url', 'details', 'model', 'input_tokens', 'output_tokens', 'generation_id', 'key_id', 'user_id'] as const;

/**
 * The download's filters: a range of whole UTC days (`from`, `to`: both, one or none; checked as
 * the usage page's range is when either is given), a model, an API key. Without any, the whole
 * history, as before.
 */
export const historyCsvInput = z
  .object({
    from: usageInput.shape.from,
    to: usageInput.shape.to,
    model: z.string().trim().min(1).max(200).optional(),
    key: z.string().regex(/^key_[0-9A-Za-z_-]{1,100}$/, 'must be a key id such as key_…').optional(),
  })
  .default({});
export type HistoryCsvFilters = z.output<typeof historyCsvInput>;

const DAY_MS = 86_400_000;

export async function historyCsv(em: EntityManager, accountId: string, opts: { maxRows?: number; filters?: HistoryCsvFilters; now?: Date } = {}) {
  const max = opts.maxRows ?? MAX_CSV_ROWS;
  const f = opts.filters ?? {};
  const ranged = f.from !== undefined || f.to !== undefined;
  // Any span: the download is bounded by its row count, not by days (a `to` alone is the history up to that day).
  const range = ranged ? usageRange({ from: f.from ?? '2000-01-01', to: f.to }, opts.now ?? new Date(), Number.POSITIVE_INFINITY) : undefined;
  const lines: string[] = [COLUMNS.join(',')];
  let rows = 0;
  let truncated = false;
  // Start at the range's end: the first entry after its last day, when there is one.
  let cursor: string | undefined = range ? await firstEntryAfter(em, accountId, new Date(range.to.getTime() + DAY_MS)) : undefined;
  const wanted = (e: WalletEntryView) =>
    (!range || (new Date(e.created_at) >= range.from && new Date(e.created_at).getTime() < range.to.getTime() + DAY_MS)) &&
    (f.model === undefined || e.model === f.model) &&
    (f.key === undefined || e.key_id === f.key);
  for (;;) {
    const page = await listHistory(em, accountId, { limit: PAGE, starting_after: cursor });
    const kept = page.data.filter(wanted);
    const taken = kept.slice(0, max - rows);
    const receipts = await receiptsOf(em, accountId, taken);
    for (const entry of taken) lines.push(csvLine(entry, receipts.get(entry.reference) ?? ''));
    rows += taken.length;
    const older = range && page.data.length > 0 && new Date(page.data.at(-1)!.created_at) < range.from;
    if (taken.length < kept.length || (rows === max && page.has_more && !older)) {
      truncated = true;
      break;
    }
    if (!page.has_more || older) break;
    cursor = page.data.at(-1)!.id;
  }
  return {
    object: 'wallet_history_csv' as const,
    filename: range ? `wallet-history-${range.from.toISOString().slice(0, 10)}-to-${range.to.toISOString().slice(0, 10)}.csv` : 'wallet-history.csv',
    content_type: 'text/csv; charset=utf-8',
    rows,
    truncated,
    csv: `${lines.join('\r\n')}\r\n`,
  };
}

/** A top-up's receipt is the payment provider's page (receipts.ts), the last column; empty for any other row. */
function csvLine(e: WalletEntryView, receipt: string): string {
  return [
    e.id,
    e.created_at,
    e.type,
    text(e.description),
    String(e.amount_coins),
    String(e.balance_after_coins),
    text(e.reference),
    e.app_connection_id ?? '',
    e.type === 'topup' ? text(receipt) : '',
    text(e.details),
    text(e.model ?? ''),
    e.input_tokens === null ? '' : String(e.input_tokens),
    e.output_tokens === null ? '' : String(e.output_tokens),
    e.generation_id ?? '',
    e.key_id ?? '',
    e.user_id ?? '',
  ]
    .map(quote)
    .join(',');
}

/** `le_<id>` of the account's first ledger entry at or after `at`, as a cursor: the rows before it. */
async function firstEntryAfter(em: EntityManager, accountId: string, at: Date): Promise<string | undefined> {
  const [row] = await em.execute<{ id: string | null }[]>('select min(id)::text as id from ledger_entries where account_id = ? and created_at >= ?', [accountId, at]);
  return row?.id ? `le_${row.id}` : undefined;
}

/**
 * Text a spreadsheet would read as a formula (`=…`, `+…`, `-…`, `@…`) starts with an apostrophe
 * (OWASP, CSV injection): a reference is free text an operator typed.
 */
function text(value: string): string {
  return /^[=+\-@\t\r]/.test(value) ? `'${value}` : value;
}

/** One free-text field of a CSV line: formula-safe (`text`) and quoted when needed; the organizations' usage CSV uses it too. */
export const csvField = (value: string) => quote(text(value));

function quote(field: string): string {
  return /[",\r\n]/.test(field) ? `"${field.replace(/"/g, '""')}"` : field;
}
