import type { EntityManager } from '@mikro-orm/postgresql';
import { listHistory, type WalletEntryView } from '../money/history.ts';
import { receiptsOf } from '../payments/receipts.ts';

/**
 * The wallet history as CSV (RFC 4180: comma-separated, CRLF line ends, fields quoted when
 * needed), for the account pages' download: a header, then the rows of `wallet.history`, newest
 * first. At most `MAX_CSV_ROWS` rows (the newest); `truncated` says when there were more.
 */
export const MAX_CSV_ROWS = 10_000;
const PAGE = 100;

const COLUMNS = ['id', 'created_at', 'type', 'description', 'amount_coins', 'balance_after_coins', 'reference', 'app_connection_id', 'receipt_url'] as const;

export async function historyCsv(em: EntityManager, accountId: string, opts: { maxRows?: number } = {}) {
  const max = opts.maxRows ?? MAX_CSV_ROWS;
  const lines: string[] = [COLUMNS.join(',')];
  let rows = 0;
  let truncated = false;
  let cursor: string | undefined;
  for (;;) {
    const page = await listHistory(em, accountId, { limit: PAGE, starting_after: cursor });
    const taken = page.data.slice(0, max - rows);
    const receipts = await receiptsOf(em, accountId, taken);
    for (const entry of taken) lines.push(csvLine(entry, receipts.get(entry.reference) ?? ''));
    rows += taken.length;
    if (taken.length < page.data.length || (rows === max && page.has_more)) {
      truncated = true;
      break;
    }
    if (!page.has_more) break;
    cursor = page.data.at(-1)!.id;
  }
  return {
    object: 'wallet_history_csv' as const,
    filename: 'wallet-history.csv',
    content_type: 'text/csv; charset=utf-8',
    rows,
    truncated,
    csv: `${lines.join('\r\n')}\r\n`,
  };
}

/** A top-up's receipt is the payment provider's page (receipts.ts), the last column; empty for any other row. */
function csvLine(e: WalletEntryView, receipt: string): string {
  return [e.id, e.created_at, e.type, text(e.description), String(e.amount_coins), String(e.balance_after_coins), text(e.reference), e.app_connection_id ?? '', e.type === 'topup' ? text(receipt) : '']
    .map(quote)
    .join(',');
}

/**
 * Text a spreadsheet would read as a formula (`=…`, `+…`, `-…`, `@…`) starts with an apostrophe
 * (OWASP, CSV injection): a reference is free text an operator typed.
 */
function text(value: string): string {
  return /^[=+\-@\t\r]/.test(value) ? `'${value}` : value;
}

function quote(field: string): string {
  return /[",\r\n]/.test(field) ? `"${field.replace(/"/g, '""')}"` : field;
}
