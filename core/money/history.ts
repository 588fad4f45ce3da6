import type { EntityManager } from '@mikro-orm/postgresql';
import { z } from 'zod';
import { coinsSchema, isoTimeSchema } from '../views.ts';
import { coinsToJson, type Micro } from './coins.ts';
import { describeRows } from './history-details.ts';

/**
 * The wallet history a customer reads (GET /wallet/history, `wallet.history`): one row per
 * event that matters to them, not one per ledger entry. docs/api.md ("Wallet history") is the
 * contract; the raw ledger stays available to operators through `listLedgerEntries`.
 *
 * Ledger entries are grouped into events:
 * - a credit entry (top-up, subscription grant) is an event of its own;
 * - the entries of a hold form two events at most: its reservation (the entries mas_reserve
 *   wrote) and its end (the capture and releases one settle or release wrote).
 * An event is shown as at most one row:
 * - credits: `topup` / `subscription_grant`, with the amount credited;
 * - a media job (hold metadata kind `generation`): its reservation is an `api_usage` row of
 *   minus the price (the 202 told the customer the price was taken); its end is a `refund` row
 *   of what came back to the spendable pockets, when anything did;
 * - any other hold (chat requests): the reservation shows nothing; the end is one `api_usage`
 *   row of minus what was captured, or nothing when nothing was.
 * A row's id is `le_<id>` of its event's last ledger entry (the anchor); rows come newest first
 * by anchor, and `starting_after=le_N` returns the rows whose anchor is below N. Its
 * `balance_after_coins` is subscription + purchased right after the anchor entry.
 */

export const historyInput = z.object({
  // Digits only: a query string is text, and '1e1' or '0x10' are not page sizes.
  limit: z
    .preprocess((v) => (typeof v === 'string' && !/^[0-9]{1,3}$/.test(v) ? Number.NaN : v), z.coerce.number({ error: 'must be a whole number from 1 to 100' }).int().min(1).max(100))
    .default(20),
  /** The id of the last row of the previous page; rows come newest first. */
  starting_after: z.string().regex(/^le_\d{1,19}$/, 'must be an entry id such as le_123').optional(),
});
export type HistoryInput = z.input<typeof historyInput>;

/** One row of the customer's history (docs/api.md, "Wallet history"). */
export const walletEntrySchema = z
  .object({
    id: z.string().describe("`le_…`: the id of the event's last ledger entry; pass it as `starting_after` for the rows after it"),
    object: z.literal('wallet_entry'),
    type: z.enum(['topup', 'subscription_grant', 'api_usage', 'refund', 'adjustment']),
    description: z.string().describe('`Top-up`, `Subscription coins`, `API usage`, `Refund` (`Refund: generation failed`, …) `Balance adjustment` (an operator\'s correction), or a payment taken back or given back: `Refund (Stripe)`, `Dispute`, `Dispute won` (type adjustment)'),
    amount_coins: z.number().describe('signed: what the event added to (+) or took from (−) the spendable coins'),
    balance_after_coins: coinsSchema.describe('spendable coins (subscription + purchased) right after the event'),
    reference: z.string().describe('the chat completion id or job id (`api_usage`, `refund`), or the payment reference (credits)'),
    app_connection_id: z.string().nullable().describe('`app_…`: the connected app (OAuth) that made this request, or null for an API key or a credit'),
    created_at: isoTimeSchema,
    details: z
      .string()
      .describe(
        'what the row is about, in words: `Chat on mas/echo: 12 input + 40 output tokens`, `Image job gen_… on mas/image-demo — failed, refunded 5 coins`, `Refund of image job gen_… (the job failed)`, `Card payment of 10.00 USD`, `Balance correction by the operator (up)`',
      ),
    model: z.string().nullable().describe('the model of a chat or job row, else null'),
    input_tokens: z.number().int().nullable().describe('a chat row: its input (prompt) tokens, else null'),
    output_tokens: z.number().int().nullable().describe('a chat row: its output (completion) tokens, else null'),
    generation_id: z.string().nullable().describe('`gen_…`: the job a charge or refund row is about (its charge and its refund name the same job), else null'),
    key_id: z.string().nullable().describe('`key_…`: the API key that made the request (chat and job rows), else null'),
    user_id: z.string().nullable().describe('`acct_…`: in an organization’s wallet, the member whose key made the request; else null'),
  })
  .strict();
export type WalletEntryView = z.infer<typeof walletEntrySchema>;
export type WalletEntryType = WalletEntryView['type'];

/** A page of the history, newest first. */
export const walletHistorySchema = z.object({ object: z.literal('list'), data: z.array(walletEntrySchema), has_more: z.boolean() }).strict();

const MAX_BIGINT = 9_223_372_036_854_775_807n;

/**
 * `starting_after` as an entry id, or null for the first page. A well-formed id that names no
 * entry is a bound like any other (Stripe's lists do the same); one above the largest bigint is
 * above every entry, so it bounds nothing and gives the first page.
 */
export function parseCursor(startingAfter: string | undefined): bigint | null {
  if (!startingAfter) return null;
  const id = BigInt(startingAfter.slice(3));
  return id > MAX_BIGINT ? null : id;
}

/**
 * The entries that can make a row, word for word the predicate of the partial index
 * ledger_entries_history (migration wallet_history): the planner uses that index only for a
 * query whose conditions imply its predicate. Left out: the reservation and release entries of
 * chat requests. Every event that shows a row keeps at least one entry here (a chat's end has
 * its capture; a job's entries and credits are all kept); a hold that is not a chat keeps all.
 */
const MAY_SHOW = `(hold_id is null or kind = 'capture' or reference not like 'chatcmpl-%')`;

interface Entry {
  id: bigint;
  pocket: 'subscription' | 'purchased' | 'held';
  kind: 'topup' | 'subscription_grant' | 'reservation' | 'capture' | 'release' | 'adjustment' | 'refund' | 'payment_reversal';
  amount: Micro;
  reference: string;
  holdId: string | null;
  description: string;
  createdAt: Date;
}

interface EntryRow {
  entry_id: string;
  pocket: Entry['pocket'];
  kind: Entry['kind'];
  amount: string;
  reference: string;
  hold_id: string | null;
  description: string;
  created_at: Date | string;
  hold_kind: string | null;
  job_status: string | null;
  app_connection_id: string | null;
  /** How many entries of the index the batch read, and the lowest id among them. */
  batch_size: number;
  batch_end: string;
}

/** The entries of one event, with what its row needs of its hold (none for a credit). */
interface Group {
  entries: Entry[];
  hold: { kind: string | null; jobStatus: string | null; app: string | null } | null;
}

/** A row before its balance is known. */
interface PendingRow {
  anchor: bigint;
  entryKind: Entry['kind'];
  holdKind: string | null;
  type: WalletEntryType;
  description: string;
  amount: Micro;
  reference: string;
  app: string | null;
  createdAt: Date;
}

function toEntry(row: EntryRow): Entry {
  return {
    id: BigInt(row.entry_id),
    pocket: row.pocket,
    kind: row.kind,
    amount: BigInt(row.amount),
    reference: row.reference,
    holdId: row.hold_id,
    description: row.description,
    createdAt: new Date(row.created_at),
  };
}

/** A credit is an event of its own; a hold has two: its reservation and its end. */
const isReservation = (entry: Entry) => entry.kind === 'reservation';
/** A correction down may take from both pockets: its two entries (one reference) are one event. */
const groupKey = (entry: Entry) =>
  entry.holdId === null
    ? entry.kind === 'adjustment'
      ? `adjustment:${entry.reference}`
      : `entry:${entry.id}`
    : `${entry.holdId}:${isReservation(entry) ? 'reserve' : 'end'}`;
const spendable = (entry: Entry) => entry.pocket !== 'held';
const sum = (xs: Micro[]) => xs.reduce((a, b) => a + b, 0n);
const lastEntry = (entries: Entry[]) => entries.reduce((a, e) => (e.id > a.id ? e : a));
const byAnchorDesc = (x: { anchor: bigint }, y: { anchor: bigint }) => (x.anchor > y.anchor ? -1 : x.anchor < y.anchor ? 1 : 0);

const ENTRY_COLUMNS = `e.id::text as entry_id, e.pocket, e.kind, e.amount_micro::text as amount, e.reference, e.hold_id, e.description, e.created_at`;

/**
 * One batch, one statement: `c` reads up to `size` entries that may show, below `below`, from
 * the partial index (ordered by -id as the index is: no other index gives that order, so the
 * planner cannot take the primary key's backward scan instead; see migration wallet_history).
 * The answer is the events those entries belong to, whole: a credit's entry, and every entry of
 * each hold phase met (through the hold index, at most 4 entries), with the hold's kind and,
 * for a job, its status. Each row also carries the batch's size and lowest id.
 */
const BATCH = `
  with c as materialized (
    select e.id, e.hold_id, e.kind = 'reservation' as r from ledger_entries e
    where e.account_id = ? and -e.id > -?::bigint and ${MAY_SHOW}
    order by -e.id limit ?
  ),
  x as (
    select ${ENTRY_COLUMNS}, null::text as hold_kind, null::text as job_status, null::text as app_connection_id
    from c join ledger_entries e on e.id = c.id
    where c.hold_id is null
    union all
    select ${ENTRY_COLUMNS}, h.metadata->>'kind', g.status, h.metadata->>'app_connection_id'
    from (select distinct c.hold_id, c.r from c where c.hold_id is not null) k
    join holds h on h.id = k.hold_id
    join ledger_entries e on e.hold_id = k.hold_id and (e.kind = 'reservation') = k.r
    left join generations g on g.id = h.reference and g.hold_id = h.id
  )
  select x.*, (select count(*) from c)::int as batch_size, (select min(c.id) from c)::text as batch_end from x`;

/**
 * The customer's history, newest first, with Stripe-style cursor paging.
 *
 * Work per page is bounded by the page size. The entries that may show (MAY_SHOW) are read
 * from the cursor down, in batches sized from what the page still needs, with the events they
 * belong to read whole (BATCH), so an event cut by a batch or a page boundary is seen entire;
 * one whose anchor is at or above the cursor (shown on an earlier page) is skipped. A shown row
 * has 1 to 3 entries in the partial index, and an event that shows nothing has 1 there at most
 * (a job's full-price capture, beside the job's shown charge): one batch of about the page
 * size, seldom two. Then one statement for the balances, two index probes per row.
 *
 * Events are taken in anchor order. Because an account's writers are serialised by the wallet
 * row lock, the entries of one event are contiguous among the account's entries, so the events
 * a batch meets are exactly those whose anchor lies between the batch's ends.
 */
export async function listHistory(em: EntityManager, accountId: string, input: z.output<typeof historyInput>) {
  const cursor = parseCursor(input.starting_after);
  const want = input.limit + 1; // one more than the page says whether there is more
  const met = new Set<string>();
  const rows: PendingRow[] = [];
  let below = cursor ?? MAX_BIGINT;
  let scanned = 0;
  let size = Math.ceil(want * 1.5) + 8;

  for (;;) {
    const found = await em.execute<EntryRow[]>(BATCH, [accountId, below.toString(), size]);
    if (found.length === 0) break;
    const groups = new Map<string, Group>();
    for (const row of found) {
      const entry = toEntry(row);
      const key = groupKey(entry);
      if (met.has(key)) continue; // an event cut by the previous batch's end, already taken
      let group = groups.get(key);
      if (!group) groups.set(key, (group = { entries: [], hold: entry.holdId === null ? null : { kind: row.hold_kind, jobStatus: row.job_status, app: row.app_connection_id } }));
      group.entries.push(entry);
    }
    const events = [...groups].map(([key, group]) => ({ key, group, anchor: lastEntry(group.entries).id })).sort(byAnchorDesc);
    for (const { key, group, anchor } of events) {
      met.add(key);
      if (cursor !== null && anchor >= cursor) continue; // on an earlier page
      const row = customerRow(group, lastEntry(group.entries));
      if (row) rows.push(row);
    }
    scanned += found[0]!.batch_size;
    if (rows.length >= want || found[0]!.batch_size < size) break;
    below = BigInt(found[0]!.batch_end);
    // The next batch: what the page still needs, at the rate of index entries per row so far.
    const perRow = rows.length > 0 ? scanned / rows.length : Math.max(4, scanned);
    size = Math.min(500, Math.ceil((want - rows.length) * perRow * 1.25) + 8);
  }

  rows.sort(byAnchorDesc);
  const page = rows.slice(0, input.limit);
  const balances = await spendableAfter(
    em,
    accountId,
    page.map((r) => r.anchor),
  );
  const details = await describeRows(em, accountId, page);
  return {
    object: 'list' as const,
    data: page.map(
      (r): WalletEntryView => ({
        id: `le_${r.anchor}`,
        object: 'wallet_entry',
        type: r.type,
        description: r.description,
        amount_coins: coinsToJson(r.amount),
        balance_after_coins: coinsToJson(balances.get(r.anchor)!),
        reference: r.reference,
        app_connection_id: r.app,
        created_at: r.createdAt.toISOString(),
        ...details.get(r.anchor)!,
      }),
    ),
    has_more: rows.length > input.limit,
  };
}

/** What one event shows the customer: one row, or nothing. */
function customerRow({ entries: event, hold }: Group, anchor: Entry): PendingRow | null {
  const base = { anchor: anchor.id, entryKind: anchor.kind, holdKind: hold?.kind ?? null, reference: anchor.reference, createdAt: anchor.createdAt, app: hold?.app ?? null };
  if (!hold) {
    // A credit, or an operator's correction or refund: its entries are on spendable pockets.
    const amount = sum(event.map((e) => e.amount));
    // A payment taken back or given back (payments/reversals.ts): an adjustment of the balance,
    // labelled `Refund (Stripe)`, `Dispute` or `Dispute won`.
    const type = anchor.kind === 'payment_reversal' ? 'adjustment' : anchor.kind === 'subscription_grant' || anchor.kind === 'adjustment' || anchor.kind === 'refund' ? anchor.kind : 'topup';
    return { ...base, type, description: anchor.description, amount };
  }
  const job = hold.kind === 'generation';
  if (isReservation(anchor)) {
    // Minus what left the spendable pockets: the job's price.
    const taken = sum(event.filter(spendable).map((e) => e.amount));
    return job && taken !== 0n ? { ...base, type: 'api_usage', description: 'API usage', amount: taken } : null;
  }
  if (job) {
    const returned = sum(event.filter((e) => spendable(e) && e.kind === 'release').map((e) => e.amount));
    return returned > 0n ? { ...base, type: 'refund', description: refundDescription(hold.jobStatus), amount: returned } : null;
  }
  const captured = sum(event.filter((e) => e.kind === 'capture').map((e) => e.amount));
  return captured !== 0n ? { ...base, type: 'api_usage', description: 'API usage', amount: captured } : null;
}

function refundDescription(jobStatus: string | null): string {
  switch (jobStatus) {
    case 'failed':
      return 'Refund: generation failed';
    case 'canceled':
      return 'Refund: generation canceled';
    case 'succeeded':
      return 'Refund: unused part of the price';
    default:
      return 'Refund';
  }
}

/** subscription + purchased right after each given entry: the latest balance of each pocket at or before it. */
async function spendableAfter(em: EntityManager, accountId: string, anchors: bigint[]): Promise<Map<bigint, Micro>> {
  if (anchors.length === 0) return new Map();
  const found = await em.execute<{ id: string; spendable: string }[]>(
    `select a.id::text as id,
            (coalesce((select s.balance_after_micro from ledger_entries s
                       where s.account_id = ? and s.pocket = 'subscription' and -s.id >= -a.id order by -s.id limit 1), 0)
           + coalesce((select p.balance_after_micro from ledger_entries p
                       where p.account_id = ? and p.pocket = 'purchased' and -p.id >= -a.id order by -p.id limit 1), 0))::text as spendable
     from unnest(?::bigint[]) as a (id)`,
    [accountId, accountId, `{${anchors.join(',')}}`],
  );
  return new Map(found.map((r) => [BigInt(r.id), BigInt(r.spendable)]));
}
