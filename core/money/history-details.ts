import type { EntityManager } from '@mikro-orm/postgresql';
import { formatCoins, type Micro } from './coins.ts';

/** An adjustment's ledger description when the operator wrote a note to the customer (adjustBalance's customer_note): the note follows this prefix. */
export const ADJUSTMENT_NOTE_PREFIX = 'Balance adjustment: ';

/** The welcome credit's ledger entry (core/accounts/welcome-credit.ts): an `adjustment` with this reference and description. */
export const WELCOME_CREDIT_REFERENCE = 'welcome_credit';
export const WELCOME_CREDIT_DESCRIPTION = 'Welcome credit';

/**
 * What a history row is about, in words (`details`) and as fields (model, tokens, job, key),
 * read for one page of rows in one statement from the records each kind of event leaves:
 * - a chat or response: its `completion_records` row (model, input and output tokens, key), a
 *   response's under its `resp_…` id for the `chatcmpl-…` its charge is referenced by;
 * - a media job's charge and refund: the `generations` row (model, its kind, status, what came
 *   back), so that a failed job's charge says it was refunded and its refund names the job;
 * - a top-up: its `payments` row (the amount in USD; a card payment or an automatic top-up);
 * - a payment taken back or given back (a refund or dispute, payments/reversals.ts): the
 *   `payments` row its `payment_reversals` row points at, found by the reversal's ledger entry
 *   (its reference is Stripe's charge or dispute id, which no `payments` row is keyed by);
 * - an operator's correction or refund: said so. The operator's reason stays in the audit log:
 *   reasons are written for operators (core/admin/audit.ts), never shown to the customer.
 */
export interface RowToDescribe {
  anchor: bigint;
  type: 'topup' | 'subscription_grant' | 'api_usage' | 'refund' | 'adjustment';
  /** The anchor entry's ledger kind: `reservation`, `capture`, `release`, `refund`, `payment_reversal`, … */
  entryKind: string;
  /** The hold's metadata kind (`generation`, `chat`), null for an entry without a hold. */
  holdKind: string | null;
  description: string;
  amount: Micro;
  reference: string;
}

export interface RowDetails {
  details: string;
  model: string | null;
  input_tokens: number | null;
  output_tokens: number | null;
  generation_id: string | null;
  key_id: string | null;
  /** The organization member whose key made the request (an organization's wallet), else null. */
  user_id: string | null;
}

interface Found {
  src: 'chat' | 'job' | 'payment';
  ref: string;
  model: string | null;
  model_type: string | null;
  record_kind: string | null;
  input_tokens: number | null;
  output_tokens: number | null;
  key_id: string | null;
  status: string | null;
  price: string | null;
  cost: string | null;
  amount_cents: string | null;
  currency: string | null;
  source: string | null;
}

const FIND = `
  select 'chat' as src, c.id as ref, c.model, null as model_type, c.kind as record_kind, c.prompt_tokens as input_tokens, c.completion_tokens as output_tokens, c.key_id,
         null as status, null as price, null as cost, null as amount_cents, null as currency, null as source
    from completion_records c where c.account_id = ? and c.id = any(?::text[])
  union all
  select 'job', g.id, g.model_id, m.type, null, null, null, g.key_id, g.status, g.price_micro::text, g.cost_micro::text, null, null, null
    from generations g left join models m on m.id = g.model_id where g.account_id = ? and g.id = any(?::text[])
  union all
  select 'payment', coalesce(p.checkout_session_id, p.payment_intent_id), null, null, null, null, null, null, null, null, null, p.amount_cents::text, p.currency, p.source
    from payments p where p.account_id = ? and coalesce(p.checkout_session_id, p.payment_intent_id) = any(?::text[])
  union all
  select 'payment', r.provider_object_id, null, null, null, null, null, null, null, null, null, p.amount_cents::text, p.currency, p.source
    from payment_reversals r join payments p on p.id = r.payment_id where r.account_id = ? and r.ledger_entry_id = any(?::bigint[])`;

const JOB_NOUN: Record<string, string> = { image: 'Image job', video: 'Video job', audio: 'Audio job', '3d': '3D job', text: 'Job' };
const STATUS_WORD: Record<string, string> = { queued: 'queued', running: 'running', succeeded: 'done', failed: 'failed', canceled: 'canceled' };

/** `10.00 USD`: cents as a decimal amount with its currency. */
export function money(cents: bigint, currency: string): string {
  const whole = cents / 100n;
  const rest = (cents % 100n).toString().padStart(2, '0');
  return `${whole}.${rest} ${currency.toUpperCase()}`;
}

const textArray = (xs: string[]) => `{${xs.map((x) => `"${x.replace(/["\\]/g, (c) => `\\${c}`)}"`).join(',')}}`;

/**
 * A Responses API charge is referenced by the chat completion it ran (`chatcmpl-…`, the hold's
 * reference), while its record is kept under the response's own id (`resp_…`, the same random
 * part: core/chat/responses.ts), which GET /responses/{id} reads: the record of such a row is
 * looked for under both.
 */
const responseIdOf = (reference: string) => (reference.startsWith('chatcmpl-') ? `resp_${reference.slice('chatcmpl-'.length)}` : undefined);

export async function describeRows(em: EntityManager, accountId: string, rows: RowToDescribe[]): Promise<Map<bigint, RowDetails>> {
  const wanted = new Set(rows.map((r) => r.reference));
  for (const r of rows) {
    const response = responseIdOf(r.reference);
    if (response) wanted.add(response);
  }
  const refs = textArray([...wanted]);
  // A reversal's payment is found by its entry (the row's anchor): every anchor of the page is asked, only reversals match.
  const entries = `{${rows.map((r) => r.anchor).join(',')}}`;
  const found = rows.length === 0 ? [] : await em.execute<Found[]>(FIND, [accountId, refs, accountId, refs, accountId, refs, accountId, entries]);
  const chats = new Map(found.filter((f) => f.src === 'chat').map((f) => [f.ref, f]));
  const jobs = new Map(found.filter((f) => f.src === 'job').map((f) => [f.ref, f]));
  const payments = new Map(found.filter((f) => f.src === 'payment').map((f) => [f.ref, f]));
  const chatOf = (reference: string) => chats.get(reference) ?? chats.get(responseIdOf(reference) ?? '');
  const described = rows.map((r) => [r.anchor, describe(r, chatOf(r.reference), jobs.get(r.reference), payments.get(r.reference))] as const);
  // Which member spent: the member of each key (an organization's wallet; null on a personal one).
  const keyIds = [...new Set(described.map(([, d]) => d.key_id).filter((k): k is string => k !== null))];
  const members =
    keyIds.length === 0
      ? new Map<string, string | null>()
      : new Map((await em.execute<{ id: string; member_id: string | null }[]>('select id, member_id from api_keys where id = any(?::text[])', [textArray(keyIds)])).map((k) => [k.id, k.member_id]));
  return new Map(described.map(([anchor, d]) => [anchor, { ...d, user_id: d.key_id ? (members.get(d.key_id) ?? null) : null }]));
}

const none = { model: null, input_tokens: null, output_tokens: null, generation_id: null, key_id: null };

function describe(r: RowToDescribe, chat: Found | undefined, job: Found | undefined, payment: Found | undefined): Omit<RowDetails, 'user_id'> {
  if (job || r.holdKind === 'generation') {
    const model = job?.model ?? null;
    const what = `${JOB_NOUN[job?.model_type ?? ''] ?? 'Job'} ${r.reference}${model ? ` on ${model}` : ''}`;
    const base = { ...none, model, generation_id: r.reference, key_id: job?.key_id ?? null };
    const status = job?.status ?? null;
    if (r.type === 'api_usage') {
      // The charge: says how the job ended and what came back, so it reads with its refund.
      const price = BigInt(job?.price ?? '0');
      const back = status === 'failed' || status === 'canceled' ? price : status === 'succeeded' ? price - BigInt(job?.cost ?? price.toString()) : 0n;
      const ended = status ? ` — ${STATUS_WORD[status] ?? status}` : '';
      return { ...base, details: `${what}${ended}${back > 0n ? `, refunded ${formatCoins(back)} coins` : ''}` };
    }
    if (r.entryKind === 'refund') return { ...base, details: `Refund of ${lower(what)} by the operator` };
    const why = status === 'failed' ? ' (the job failed)' : status === 'canceled' ? ' (the job was canceled)' : status === 'succeeded' ? ' (the unused part of its price)' : '';
    return { ...base, details: `Refund of ${lower(what)}${why}` };
  }
  if (chat || r.reference.startsWith('chatcmpl-') || r.reference.startsWith('resp_')) {
    const noun = chat?.record_kind === 'response' || r.reference.startsWith('resp_') ? 'Response' : 'Chat';
    if (!chat) return { ...none, details: `${noun} ${r.reference}` };
    const tokens = `${chat.input_tokens} input + ${chat.output_tokens} output tokens`;
    return { ...none, model: chat.model, input_tokens: chat.input_tokens, output_tokens: chat.output_tokens, key_id: chat.key_id, details: `${noun} on ${chat.model}: ${tokens}` };
  }
  if (r.type === 'topup') {
    if (!payment) return { ...none, details: 'Coins added by the operator' };
    const paid = money(BigInt(payment.amount_cents!), payment.currency!);
    return { ...none, details: payment.source === 'auto_top_up' ? `Automatic top-up: card payment of ${paid}` : `Card payment of ${paid}` };
  }
  if (r.type === 'subscription_grant') return { ...none, details: 'Coins of your subscription' };
  if (r.entryKind === 'payment_reversal') return { ...none, details: payment ? `${r.description} of the card payment of ${money(BigInt(payment.amount_cents!), payment.currency!)}` : r.description };
  if (r.entryKind === 'refund') return { ...none, details: 'Refund by the operator' };
  if (r.type === 'adjustment' && r.reference === WELCOME_CREDIT_REFERENCE) return { ...none, details: WELCOME_CREDIT_DESCRIPTION };
  if (r.type === 'adjustment') {
    // The operator's note to the customer, when they wrote one (adjustBalance's customer_note); the audit reason stays theirs.
    const note = r.description.startsWith(ADJUSTMENT_NOTE_PREFIX) ? `: ${r.description.slice(ADJUSTMENT_NOTE_PREFIX.length)}` : '';
    return { ...none, details: `Balance correction by the operator (${r.amount < 0n ? 'down' : 'up'})${note}` };
  }
  return { ...none, details: r.description };
}

const lower = (s: string) => s.charAt(0).toLowerCase() + s.slice(1);
