import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import pg from 'pg';
import type { RunnerTask, RunnerTestFile } from 'vitest';
import type { Vitest } from 'vitest/node';
import { startEmbeddedPostgres } from '../adapters/embedded/postgres.ts';
import { createLogger } from '../config/logger.ts';
import { migrate, openOrm } from '../core/orm.ts';
import { nodeConditions } from '../vitest.node-conditions.ts';
import { root, sayer } from './support/server.ts';

/**
 * Mutation testing of the SQL money functions (core/money/money.sql), part of
 * `npm run test:mutation` (scripts/mutation.ts). StrykerJS mutates only TypeScript, so this
 * applies a fixed list of mutations of our own, the mistakes that would cost money: a flipped
 * comparison, a dropped ledger entry, a rounding, the subscription and purchased pockets
 * swapped, an off-by-one in a capture bound, a status check left out.
 *
 * One embedded PostgreSQL; the migrations applied once to a template database. For each
 * mutant: a database of its own copied from the template (`create database … template …`),
 * the mutated function put in with `CREATE OR REPLACE` (checked to differ from the original),
 * then the SQL-level money tests run against it (vitest, in this process, the database given
 * to the tests as `inject('databaseUrl')`), one file at a time, stopping at the first failure:
 * killed. A mutant all the tests pass survived. Every mutant must be killed; a mutation that
 * cannot change what any caller sees (equivalent) does not belong in the list.
 *
 * `node --import tsx scripts/sql-mutation.ts` runs it alone (`--only <id>,…` for some mutants,
 * `--tests <file>,…` for other tests);
 * the exit code is non-zero when a mutant survived or the tests fail without a mutant.
 */

export interface SqlMutant {
  id: string;
  /** The function (its name in money.sql) the mutation applies to. */
  fn: string;
  /** What the mutation does, as the mistake it stands for. */
  what: string;
  /** Text of the function's definition, found exactly once, and what replaces it. */
  find: string;
  replace: string;
}

export const SQL_MUTANTS: SqlMutant[] = [
  // mas_reserve: the single-hold reservation (media jobs).
  {
    id: 'reserve-fit-off-by-one',
    fn: 'mas_reserve',
    what: 'flipped comparison: a reservation of exactly the spendable balance is refused (`<` becomes `<=`)',
    find: 'if w.subscription_micro + w.purchased_micro < p_amount then',
    replace: 'if w.subscription_micro + w.purchased_micro <= p_amount then',
  },
  {
    id: 'reserve-pockets-swapped',
    fn: 'mas_reserve',
    what: 'pockets swapped: purchased coins are reserved before subscription coins',
    find: 'from_sub := least(w.subscription_micro, p_amount);',
    replace: 'from_sub := p_amount - least(w.purchased_micro, p_amount);',
  },
  {
    id: 'reserve-held-entry-dropped',
    fn: 'mas_reserve',
    what: 'dropped ledger insert: the held pocket moves without its ledger entry',
    find: "          ('purchased', -from_pur, w.purchased_micro),\n          ('held', p_amount, w.held_micro)",
    replace: "          ('purchased', -from_pur, w.purchased_micro)",
  },
  {
    id: 'reserve-cap-off-by-one',
    fn: 'mas_reserve',
    what: "off-by-one in the spend cap: a reservation that fits the app's remaining cap exactly is refused",
    find: "if room < p_amount and not exists (select 1 from holds where id = p_hold_id) then\n            return query select 'spend_cap_reached'",
    replace: "if room <= p_amount and not exists (select 1 from holds where id = p_hold_id) then\n            return query select 'spend_cap_reached'",
  },
  {
    id: 'reserve-idempotency-dropped',
    fn: 'mas_reserve',
    what: 'missing check: a repeated hold id is not recognised before the balance check (a retry of a job that no longer fits fails)',
    find: "        if exists (select 1 from holds where id = p_hold_id) then\n          return query select 'exists'::text, w.subscription_micro + w.purchased_micro;\n          return;\n        end if;\n",
    replace: '',
  },
  // mas_end_hold: settle and release of one hold.
  {
    id: 'end-hold-capture-bound',
    fn: 'mas_end_hold',
    what: 'off-by-one in the capture bound: one micro-coin more than the hold may be captured',
    find: 'p_actual > h.amount_micro or',
    replace: 'p_actual > h.amount_micro + 1 or',
  },
  {
    id: 'end-hold-status-check-dropped',
    fn: 'mas_end_hold',
    what: 'missing status check: a hold that already ended is ended again, moving its money twice',
    find: "        if h.status <> 'open' then\n          return query select h.status, h.captured_micro, h.amount_micro;\n          return;\n        end if;\n",
    replace: '',
  },
  {
    id: 'end-hold-release-amount',
    fn: 'mas_end_hold',
    what: 'missing check: a release may carry a capture',
    find: " or (p_outcome = 'released' and p_actual <> 0)",
    replace: '',
  },
  {
    id: 'end-hold-pockets-swapped',
    fn: 'mas_end_hold',
    what: 'pockets swapped: the unused rest goes back to the other pocket than it came from',
    find: 'subscription_micro = subscription_micro + ret_sub,\n          purchased_micro = purchased_micro + ret_pur,',
    replace: 'subscription_micro = subscription_micro + ret_pur,\n          purchased_micro = purchased_micro + ret_sub,',
  },
  {
    id: 'end-hold-rounding',
    fn: 'mas_end_hold',
    what: 'rounding changed: the purchased part of a capture is rounded down to an even number of micro-coins',
    find: 'cap_pur := p_actual - cap_sub;',
    replace: 'cap_pur := (p_actual - cap_sub) / 2 * 2;',
  },
  {
    id: 'end-hold-capture-entry-dropped',
    fn: 'mas_end_hold',
    what: 'dropped ledger insert: the capture (`API usage`) is not written',
    find: "          (1, 'held', 'capture', -p_actual, w.held_micro + (h.amount_micro - p_actual), 'API usage'),\n",
    replace: '',
  },
  // mas_end_hold_many: the batched settle and release (chat).
  {
    id: 'end-many-capture-bound',
    fn: 'mas_end_hold_many',
    what: 'flipped comparison: a capture of the whole hold is refused (`>` becomes `>=`)',
    find: 'x.actual > hd.amount_micro or',
    replace: 'x.actual >= hd.amount_micro or',
  },
  {
    id: 'end-many-status-check-dropped',
    fn: 'mas_end_hold_many',
    what: 'missing status check: a hold that already ended is ended again in a batch',
    find: "          if hd.status <> 'open' then\n            status := hd.status; captured := hd.captured_micro; amount := hd.amount_micro;\n            return next;\n            continue;\n          end if;\n",
    replace: '',
  },
  {
    id: 'end-many-pockets-swapped',
    fn: 'mas_end_hold_many',
    what: 'pockets swapped: the capture is taken from purchased coins first',
    find: 'cap_sub := least(hd.from_subscription_micro, x.actual);',
    replace: 'cap_sub := x.actual - least(hd.from_purchased_micro, x.actual);',
  },
  // mas_reserve_many: the batched reservation (chat).
  {
    id: 'reserve-many-revoked-key',
    fn: 'mas_reserve_many',
    what: 'missing status check: a revoked key still reserves',
    find: 'and k.revoked_at is null and k.disabled_at is null',
    replace: 'and k.disabled_at is null',
  },
  {
    id: 'reserve-many-disabled-key',
    fn: 'mas_reserve_many',
    what: 'missing status check: a disabled key (cached before it was disabled) still reserves',
    find: 'and k.revoked_at is null and k.disabled_at is null',
    replace: 'and k.revoked_at is null',
  },
  {
    id: 'reserve-many-fit-off-by-one',
    fn: 'mas_reserve_many',
    what: 'flipped comparison: a reservation of exactly the spendable balance is refused',
    find: 'if w.subscription_micro + w.purchased_micro < x.amount then',
    replace: 'if w.subscription_micro + w.purchased_micro <= x.amount then',
  },
  {
    id: 'reserve-many-cap-off-by-one',
    fn: 'mas_reserve_many',
    what: "off-by-one in the spend cap: one micro-coin over the app's cap is allowed",
    find: "if room < x.amount then\n              status := 'spend_cap_reached'",
    replace: "if room + 1 < x.amount then\n              status := 'spend_cap_reached'",
  },
  // mas_write_wallet: the batched functions' one wallet write.
  {
    id: 'write-wallet-held-dropped',
    fn: 'mas_write_wallet',
    what: 'dropped write: the batched functions do not store the held pocket',
    find: '\n          held_micro = p.held_micro, updated_at = now()',
    replace: ' updated_at = now()',
  },
  // mas_credit: top-ups and subscription grants.
  {
    id: 'credit-pockets-swapped',
    fn: 'mas_credit',
    what: 'pockets swapped: a top-up is added to the subscription pocket',
    find: "if p_pocket = 'subscription' then\n          update wallets set subscription_micro = subscription_micro + p_amount, updated_at = now()\n            where account_id = p_account returning subscription_micro into after;\n        elsif p_pocket = 'purchased' then",
    replace: "if p_pocket = 'purchased' then\n          update wallets set subscription_micro = subscription_micro + p_amount, updated_at = now()\n            where account_id = p_account returning subscription_micro into after;\n        elsif p_pocket = 'subscription' then",
  },
  {
    id: 'credit-paid-dropped',
    fn: 'mas_credit',
    what: 'dropped update: a credit does not make the account paid',
    find: 'update accounts set paid = true where id = p_account and not paid;',
    replace: '',
  },
  // mas_adjust: operator adjustments and refunds.
  {
    id: 'adjust-pockets-swapped',
    fn: 'mas_adjust',
    what: 'pockets swapped: a downward adjustment takes subscription coins first',
    find: 'from_pur := least(greatest(w.purchased_micro, 0), -p_amount);',
    replace: 'from_pur := -p_amount - least(w.subscription_micro, -p_amount);',
  },
  {
    id: 'adjust-insufficient-bound',
    fn: 'mas_adjust',
    what: 'flipped comparison: a downward adjustment of exactly the spendable balance is refused',
    find: 'if w.subscription_micro + greatest(w.purchased_micro, 0) < -p_amount then',
    replace: 'if w.subscription_micro + greatest(w.purchased_micro, 0) <= -p_amount then',
  },
  {
    id: 'adjust-negative-refund',
    fn: 'mas_adjust',
    what: 'missing check: a negative refund is accepted (it would take coins)',
    find: " or (p_kind = 'refund' and p_amount < 0)",
    replace: '',
  },
  // mas_app_spend_room: what an app may still spend under its cap.
  {
    id: 'spend-room-captures-ignored',
    fn: 'mas_app_spend_room',
    what: "dropped term: settled holds' captures do not count against the cap",
    find: "when 'settled' then h.captured_micro",
    replace: "when 'settled' then 0",
  },
  {
    id: 'spend-room-open-ignored',
    fn: 'mas_app_spend_room',
    what: 'dropped term: open holds do not count against the cap',
    find: "when 'open' then h.amount_micro",
    replace: "when 'open' then 0",
  },
  // A standard key's spend limit (issue 34, "Keys with limits"): mas_key_spend_room, mas_key_period_start and the checks in the reservations.
  {
    id: 'key-room-captures-ignored',
    fn: 'mas_key_spend_room',
    what: "dropped term: what the key's settled holds captured does not count against its limit",
    find: 'select sum(h.captured_micro) from holds h',
    replace: 'select 0 * sum(h.captured_micro) from holds h',
  },
  {
    id: 'key-room-open-ignored',
    fn: 'mas_key_spend_room',
    what: "dropped term: the key's open holds do not count against its limit",
    find: 'select sum(h.amount_micro) from holds h',
    replace: 'select 0 * sum(h.amount_micro) from holds h',
  },
  {
    id: 'key-room-period-ignored',
    fn: 'mas_key_spend_room',
    what: 'dropped condition: a monthly limit counts the spend of every month',
    find: 'and h.ended_at >= mas_key_period_start(k.spend_limit_period)',
    replace: 'and h.ended_at is not null',
  },
  {
    id: 'key-period-start-late',
    fn: 'mas_key_period_start',
    what: "wrong boundary: a monthly period starts a day into the month, dropping the first day's spend",
    find: "date_trunc('month', now(), 'UTC')",
    replace: "date_trunc('month', now(), 'UTC') + interval '1 day'",
  },
  {
    id: 'reserve-key-limit-off-by-one',
    fn: 'mas_reserve',
    what: "flipped comparison: a reservation that fits the key's remaining limit exactly is refused",
    find: "if room < p_amount and not exists (select 1 from holds where id = p_hold_id) then\n              return query select 'key_spend_limit_reached'",
    replace: "if room <= p_amount and not exists (select 1 from holds where id = p_hold_id) then\n              return query select 'key_spend_limit_reached'",
  },
  {
    id: 'reserve-many-key-limit-off-by-one',
    fn: 'mas_reserve_many',
    what: "flipped comparison: a batched reservation that fits the key's remaining limit exactly is refused",
    find: "if room < x.amount then\n              status := 'key_spend_limit_reached'",
    replace: "if room <= x.amount then\n              status := 'key_spend_limit_reached'",
  },
  {
    id: 'reserve-many-key-limit-dropped',
    fn: 'mas_reserve_many',
    what: "missing check: a batched reservation (chat) ignores the key's spend limit",
    find: "if room < x.amount then\n              status := 'key_spend_limit_reached'",
    replace: "if false then\n              status := 'key_spend_limit_reached'",
  },
  {
    id: 'reserve-many-limited-keys-inverted',
    fn: 'mas_reserve_many',
    what: "inverted condition: the batch asks for the room of the keys without a limit instead of those with one, so a limited key's chat is never refused",
    find: "if x.metadata->>'key_id' = any(limited) then",
    replace: "if x.metadata->>'key_id' <> all(limited) then",
  },
  {
    id: 'reserve-many-key-expiry-ignored',
    fn: 'mas_reserve_many',
    what: 'dropped condition: a key cached before its expiry still reserves after it',
    find: '\n                and (k.expires_at is null or k.expires_at > now())',
    replace: '',
  },
  // An organization member's spend limit (issue 49, docs/organizations.md): mas_member_spend_room and the checks in the reservations.
  {
    id: 'reserve-member-limit-off-by-one',
    fn: 'mas_reserve',
    what: "flipped comparison: a reservation that fits the member's remaining limit exactly is refused",
    find: "if room < p_amount and not exists (select 1 from holds where id = p_hold_id) then\n              return query select 'member_spend_limit_reached'",
    replace: "if room <= p_amount and not exists (select 1 from holds where id = p_hold_id) then\n              return query select 'member_spend_limit_reached'",
  },
  {
    id: 'reserve-member-limit-replay-refused',
    fn: 'mas_reserve',
    what: "missing check: a repeated hold id is refused once the member's limit is reached (a retried media job fails)",
    find: "if room < p_amount and not exists (select 1 from holds where id = p_hold_id) then\n              return query select 'member_spend_limit_reached'",
    replace: "if room < p_amount then\n              return query select 'member_spend_limit_reached'",
  },
  {
    id: 'reserve-member-lock-dropped',
    fn: 'mas_reserve',
    what: "dropped lock: the member's row is not locked, so reservations through two of their keys at once both pass the limit",
    find: "where k.id = p_metadata->>'key_id' and m.spend_limit_micro is not null for update of m;",
    replace: "where k.id = p_metadata->>'key_id' and m.spend_limit_micro is not null;",
  },
  {
    id: 'reserve-many-member-limit-off-by-one',
    fn: 'mas_reserve_many',
    what: "flipped comparison: a batched reservation that fits the member's remaining limit exactly is refused",
    find: "if room < x.amount then\n              status := 'member_spend_limit_reached'",
    replace: "if room <= x.amount then\n              status := 'member_spend_limit_reached'",
  },
  {
    id: 'reserve-many-member-limit-dropped',
    fn: 'mas_reserve_many',
    what: "missing check: a batched reservation (chat) ignores the member's spend limit",
    find: "if x.metadata->>'key_id' = any(member_limited) then",
    replace: 'if false then',
  },
  {
    id: 'reserve-many-member-lock-dropped',
    fn: 'mas_reserve_many',
    what: "dropped lock: the members of the batch are not locked, so two chats through two of a member's keys at once both pass the limit",
    find: 'order by m.organization_id, m.account_id, k.id for update of m) l;',
    replace: 'order by m.organization_id, m.account_id, k.id) l;',
  },
  {
    id: 'member-room-open-ignored',
    fn: 'mas_member_spend_room',
    what: "dropped term: the member's open holds do not count against their limit",
    find: 'select sum(h.amount_micro) from api_keys mk',
    replace: 'select 0 * sum(h.amount_micro) from api_keys mk',
  },
  {
    id: 'member-room-captures-ignored',
    fn: 'mas_member_spend_room',
    what: "dropped term: what the member's settled holds captured does not count against their limit",
    find: 'select sum(h.captured_micro) from api_keys mk',
    replace: 'select 0 * sum(h.captured_micro) from api_keys mk',
  },
  {
    id: 'member-room-period-ignored',
    fn: 'mas_member_spend_room',
    what: 'dropped condition: a monthly member limit counts the spend of every month',
    find: 'and h.ended_at >= mas_key_period_start(m.spend_limit_period)',
    replace: 'and h.ended_at is not null',
  },
  {
    id: 'member-room-one-key-open',
    fn: 'mas_member_spend_room',
    what: "narrowed sum: only the open holds of the key asking count, not those of the member's other keys",
    find: 'where mk.account_id = k.account_id and mk.member_id = k.member_id and h.ended_at is null',
    replace: 'where mk.id = k.id and h.ended_at is null',
  },
  {
    id: 'member-room-one-key-captured',
    fn: 'mas_member_spend_room',
    what: "narrowed sum: only what the key asking captured counts, not the member's other keys",
    find: 'where mk.account_id = k.account_id and mk.member_id = k.member_id\n',
    replace: 'where mk.id = k.id\n',
  },
  {
    id: 'member-room-every-organization',
    fn: 'mas_member_spend_room',
    what: "widened sum: the person's keys of every organization count against their limit in this one",
    find: 'where mk.account_id = k.account_id and mk.member_id = k.member_id and h.ended_at is null',
    replace: 'where mk.member_id = k.member_id and h.ended_at is null',
  },
  // mas_reverse_payment and the negative purchased pocket (refunds and disputes, issue 31).
  {
    id: 'reversal-sign-flipped',
    fn: 'mas_reverse_payment',
    what: 'flipped sign: a refund or dispute adds the coins instead of taking them back',
    find: 'update wallets set purchased_micro = purchased_micro + p_amount',
    replace: 'update wallets set purchased_micro = purchased_micro - p_amount',
  },
  {
    id: 'reversal-ledger-dropped',
    fn: 'mas_reverse_payment',
    what: 'dropped ledger insert: the purchased pocket moves without its ledger entry',
    find: "        insert into ledger_entries (account_id, pocket, kind, amount_micro, balance_after_micro, reference, idempotency_key, description)\n          values (p_account, 'purchased', 'payment_reversal', p_amount, w.purchased_micro, p_reference, p_idempotency_key, p_description)\n          returning * into e;\n",
    replace: '',
  },
  {
    id: 'reversal-idempotency-dropped',
    fn: 'mas_reverse_payment',
    what: 'missing check: a repeated key takes the coins back again',
    find: "        select * into e from ledger_entries where idempotency_key = p_idempotency_key;\n        if found then\n          return query select 'duplicate'::text, e.id, e.balance_after_micro;\n          return;\n        end if;\n",
    replace: '',
  },
  {
    id: 'reserve-negative-pocket-ignored',
    fn: 'mas_reserve',
    what: 'missing check: a negative purchased pocket is hidden by subscription coins (a media job spends past a debt)',
    find: 'if w.purchased_micro < 0 then',
    replace: 'if w.subscription_micro + w.purchased_micro < 0 then',
  },
  {
    id: 'reserve-many-negative-pocket-ignored',
    fn: 'mas_reserve_many',
    what: 'missing check: a negative purchased pocket is hidden by subscription coins (a chat spends past a debt)',
    find: 'if w.purchased_micro < 0 then',
    replace: 'if w.subscription_micro + w.purchased_micro < 0 then',
  },
  {
    id: 'adjust-takes-negative-pocket',
    fn: 'mas_adjust',
    what: 'a correction down takes from a negative purchased pocket, adding to it',
    find: 'from_pur := least(greatest(w.purchased_micro, 0), -p_amount);',
    replace: 'from_pur := least(w.purchased_micro, -p_amount);',
  },
  // One payment's refunds and disputes (issue 45): the claims, their records, the settle.
  {
    id: 'settle-room-ignored',
    fn: 'mas_settle_payment',
    what: 'missing cap: a claim takes all it wants though the payment has less room (a refund and a dispute both take the payment)',
    find: 'step := least(c.wanted - c.held, room);',
    replace: 'step := c.wanted - c.held;',
  },
  {
    id: 'settle-room-off-by-one',
    fn: 'mas_settle_payment',
    what: 'off-by-one in the cap: the claims may hold one cent more than the payment',
    find: 'room := p.amount_cents - coalesce((',
    replace: 'room := p.amount_cents + 1 - coalesce((',
  },
  {
    id: 'settle-release-dropped',
    fn: 'mas_settle_payment',
    what: 'dropped pass: a claim never gives back what it no longer wants (a dispute won, a refund failed)',
    find: 'if pass = 1 and c.held > c.wanted then',
    replace: 'if false then',
  },
  {
    id: 'settle-inquiry-holds',
    fn: 'mas_settle_payment',
    what: 'wrong state: an inquiry (no funds withdrawn) takes its disputed coins',
    find: "case when d.state in ('withdrawn', 'lost') then d.amount_cents else 0 end",
    replace: "case when d.state in ('withdrawn', 'lost', 'inquiry') then d.amount_cents else 0 end",
  },
  {
    id: 'settle-won-holds',
    fn: 'mas_settle_payment',
    what: 'wrong state: a won dispute (funds reinstated) keeps its coins',
    find: "case when d.state in ('withdrawn', 'lost') then d.amount_cents else 0 end",
    replace: "case when d.state in ('withdrawn', 'lost', 'won') then d.amount_cents else 0 end",
  },
  {
    id: 'settle-sign-flipped',
    fn: 'mas_settle_payment',
    what: 'flipped sign: a step taking coins back adds them',
    find: 'step_micro := -step * 10000000;',
    replace: 'step_micro := step * 10000000;',
  },
  {
    id: 'record-charge-refund-lowers',
    fn: 'mas_record_charge_refund',
    what: 'lost maximum: an older charge.refunded arriving late lowers the refunded amount (and gives coins back)',
    find: 'refunded_cents = greatest(c.refunded_cents, excluded.refunded_cents)',
    replace: 'refunded_cents = excluded.refunded_cents',
  },
  {
    id: 'record-refund-status-goes-back',
    fn: 'mas_record_refund',
    what: "lost order: a refund's late `succeeded` event after `failed` takes its coins again",
    find: 'status = case when mas_refund_rank(excluded.status) > mas_refund_rank(r.status) then excluded.status else r.status end,',
    replace: 'status = excluded.status,',
  },
  {
    id: 'record-dispute-state-goes-back',
    fn: 'mas_record_dispute',
    what: 'lost order: a dispute created after it was won takes its coins for good',
    find: 'state = case when mas_dispute_rank(excluded.state) > mas_dispute_rank(d.state) then excluded.state else d.state end,',
    replace: 'state = excluded.state,',
  },
  {
    id: 'dispute-rank-won-not-final',
    fn: 'mas_dispute_rank',
    what: 'wrong rank: won is not final, so a later `created` or `funds_withdrawn` withdraws again',
    find: "when p_state in ('won', 'lost', 'closed') then 2",
    replace: "when p_state in ('lost', 'closed') then 2",
  },
  {
    id: 'refund-rank-canceled-not-final',
    fn: 'mas_refund_rank',
    what: 'wrong rank: a canceled refund still counts as refunded',
    find: "when p_status in ('failed', 'canceled') then 2",
    replace: "when p_status in ('failed') then 2",
  },
  {
    id: 'refunded-failed-still-counted',
    fn: 'mas_payment_refunded_cents',
    what: "missing subtraction: a refund that failed still counts in the charge's refunded amount (its coins never come back)",
    find: '\n            - coalesce((select sum(r.amount_cents) from payment_refunds r where r.payment_intent_id = p_payment_intent and mas_refund_rank(r.status) = 2), 0),',
    replace: ',',
  },
  {
    id: 'refunded-standing-ignored',
    fn: 'mas_payment_refunded_cents',
    what: 'missing term: a refund object (refund.created) takes nothing until its charge.refunded arrives',
    find: ',\n          coalesce((select sum(r.amount_cents) from payment_refunds r where r.payment_intent_id = p_payment_intent and mas_refund_rank(r.status) < 2), 0))::bigint',
    replace: ')::bigint',
  },
  {
    id: 'record-charge-refund-unlocked',
    fn: 'mas_record_charge_refund',
    what: "dropped lock: a refund recorded while its payment is being credited is taken back by neither",
    find: '        perform mas_lock_payment(p_payment_intent);\n',
    replace: '',
  },
  // The ledger's append-only trigger.
  {
    id: 'ledger-append-only-dropped',
    fn: 'ledger_entries_append_only',
    what: 'dropped check: the ledger accepts UPDATE and DELETE',
    find: "raise exception 'ledger_entries is append-only';",
    replace: 'return null;',
  },
];

/**
 * The SQL-level tests, in the order they run for each mutant (the first to fail ends the
 * mutant's run, so the quick and targeted ones come first). Each gets its database from
 * `inject('databaseUrl')` (test/support/db.ts) and needs no Temporal.
 */
export const SQL_TESTS = [
  'test/integration/money-sql-rules.test.ts',
  'test/integration/payment-reversals-sql.test.ts',
  'test/integration/payment-reversal-rules.test.ts',
  'test/integration/holds.test.ts',
  'test/integration/hold-batcher.test.ts',
  'test/integration/sweep.test.ts',
  'test/integration/hold-batch-equivalence.test.ts',
  'test/integration/wallet-concurrency.test.ts',
  'test/integration/wallet-model.test.ts',
];

export interface SqlMutantResult {
  mutant: SqlMutant;
  status: 'killed' | 'survived' | 'error';
  /** The first failing test (killed), or what went wrong (error). */
  detail: string;
  ms: number;
}

/** Each function's definition in money.sql, by name: `CREATE OR REPLACE FUNCTION public.<name>(` … `$function$\n;`. */
export function functionDefinitions(sql: string): Map<string, string> {
  const out = new Map<string, string>();
  const re = /CREATE OR REPLACE FUNCTION public\.(\w+)\([\s\S]*?\$function\$[\s\S]*?\$function\$\n;/g;
  for (const m of sql.matchAll(re)) out.set(m[1]!, m[0]);
  return out;
}

/** The mutated definition; throws when the text to mutate is not found exactly once (money.sql changed). */
export function mutate(definitions: Map<string, string>, m: SqlMutant): string {
  const def = definitions.get(m.fn);
  if (!def) throw new Error(`SQL mutant ${m.id}: money.sql defines no function ${m.fn}`);
  const at = def.indexOf(m.find);
  if (at < 0 || def.indexOf(m.find, at + 1) >= 0) {
    throw new Error(`SQL mutant ${m.id}: the text to mutate is ${at < 0 ? 'not' : 'more than once'} in ${m.fn}; update scripts/sql-mutation.ts to money.sql`);
  }
  return def.slice(0, at) + m.replace + def.slice(at + m.find.length);
}

const DEFINITION_OF = `select pg_get_functiondef(p.oid) as def from pg_proc p join pg_namespace n on n.oid = p.pronamespace where n.nspname = 'public' and p.proname = $1`;

async function withClient<T>(url: string, fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const c = new pg.Client(url);
  await c.connect();
  try {
    return await fn(c);
  } finally {
    await c.end();
  }
}

function failures(files: RunnerTestFile[]): string[] {
  const out: string[] = [];
  const first = (errors: { message?: string }[] | undefined) => (errors?.[0]?.message ?? '').split('\n')[0]!.slice(0, 200);
  const walk = (task: RunnerTask, name: string) => {
    if (task.type === 'test' && task.result?.state === 'fail') out.push(`${name}: ${first(task.result.errors)}`);
    if ('tasks' in task) for (const t of task.tasks) walk(t, `${name} > ${t.name}`);
  };
  for (const f of files) {
    const file = path.basename(f.name);
    if (f.result?.state === 'fail' && (f.result.errors?.length ?? 0) > 0) out.push(`${file}: ${first(f.result.errors)}`);
    for (const t of f.tasks) walk(t, `${file} > ${t.name}`);
  }
  return out;
}

/**
 * Runs the SQL tests (one file at a time, in order) against this database: the first failure,
 * or undefined when every file passed. A file that did not pass for another reason (its worker
 * crashed, an error outside a test) counts as a failure too.
 */
async function runTests(vitest: Vitest, databaseUrl: string, adminUrl: string, tests: string[]): Promise<string | undefined> {
  vitest.provide('databaseUrl', databaseUrl);
  vitest.provide('adminDatabaseUrl', adminUrl);
  for (const file of tests) {
    vitest.state.filesMap.clear();
    vitest.state.clearErrors();
    await vitest.start([path.join(root, file)]);
    const files = vitest.state.getFiles();
    if (files.length === 0) return `${file}: not found`;
    const failed = failures(files);
    if (failed.length > 0) return failed[0];
    const errors = vitest.state.getUnhandledErrors();
    if (errors.length > 0) return `${file}: ${String((errors[0] as Error | undefined)?.message ?? errors[0]).split('\n')[0]}`;
    const notPassed = files.find((f) => f.result?.state !== 'pass');
    if (notPassed) return `${file}: did not pass (${notPassed.result?.state ?? 'no result: its worker ended'})`;
  }
  return undefined;
}

export async function runSqlMutation(opts: { only?: string[]; tests?: string[]; say?: (line: string) => void } = {}): Promise<{ baseline: string | undefined; results: SqlMutantResult[] }> {
  const say = opts.say ?? sayer('sql-mutation');
  const tests = opts.tests ?? SQL_TESTS;
  const mutants = opts.only ? SQL_MUTANTS.filter((m) => opts.only!.includes(m.id)) : SQL_MUTANTS;
  const definitions = functionDefinitions(await fs.readFile(path.join(root, 'core/money/money.sql'), 'utf8'));
  // Every mutation must apply to today's money.sql before anything starts.
  const mutated = new Map(mutants.map((m) => [m.id, mutate(definitions, m)]));

  const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'mas-sql-mutation-'));
  const logger = createLogger('warn', process.stderr);
  const server = await startEmbeddedPostgres({ dataDir: path.join(dataDir, 'data'), database: 'mas_sql_template', logger });
  const { createVitest } = await import('vitest/node');
  let vitest: Vitest | undefined;
  const results: SqlMutantResult[] = [];
  // Stopped (Ctrl-C, a CI timeout): the server and the data of this run go too.
  const stop = (signal: NodeJS.Signals) => {
    void server
      .release()
      .then(() => fs.rm(dataDir, { recursive: true, force: true }))
      .finally(() => process.exit(signal === 'SIGINT' ? 130 : 143));
  };
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
  try {
    const orm = await openOrm({ url: server.url });
    await migrate(orm);
    await orm.close();
    const urlOf = (db: string) => server.url.replace(/\/[^/]+$/, `/${db}`);
    vitest = await createVitest(
      'test',
      {
        config: false,
        root,
        watch: false,
        pool: 'forks',
        maxWorkers: 1,
        isolate: false,
        testTimeout: 120_000,
        hookTimeout: 120_000,
        include: tests,
        setupFiles: ['test/mutation/no-shrink.ts'],
        reporters: [{}],
        // The first failing test ends the file's run.
        bail: 1,
      },
      nodeConditions,
    );
    let n = 0;
    const inFreshDatabase = async (setup: (url: string) => Promise<void>) => {
      const db = `mas_sql_mutant_${++n}`;
      await withClient(server.adminUrl, (c) => c.query(`create database ${db} template mas_sql_template`));
      try {
        await setup(urlOf(db));
        return await runTests(vitest!, urlOf(db), server.adminUrl, tests);
      } finally {
        await withClient(server.adminUrl, (c) => c.query(`drop database if exists ${db} with (force)`));
      }
    };

    const started = Date.now();
    const baseline = await inFreshDatabase(async () => undefined);
    say(`baseline (no mutant): ${baseline ? `FAILED: ${baseline}` : 'all tests pass'} (${((Date.now() - started) / 1000).toFixed(0)} s)`);
    if (baseline) return { baseline, results };

    for (const m of mutants) {
      const t0 = Date.now();
      let status: SqlMutantResult['status'];
      let detail: string;
      try {
        const failed = await inFreshDatabase(async (url) => {
          await withClient(url, async (c) => {
            const before = (await c.query<{ def: string }>(DEFINITION_OF, [m.fn])).rows[0]?.def;
            await c.query(mutated.get(m.id)!);
            const after = (await c.query<{ def: string }>(DEFINITION_OF, [m.fn])).rows[0]?.def;
            if (before === undefined || before === after) throw new Error(`the mutation of ${m.fn} changed nothing in the database`);
          });
        });
        status = failed ? 'killed' : 'survived';
        detail = failed ?? '';
      } catch (err) {
        status = 'error';
        detail = (err as Error).message;
      }
      const ms = Date.now() - t0;
      results.push({ mutant: m, status, detail, ms });
      say(`${status.padEnd(8)} ${m.id} (${(ms / 1000).toFixed(0)} s)${detail ? `: ${detail}` : ''}`);
    }
    return { baseline, results };
  } finally {
    process.off('SIGINT', stop);
    process.off('SIGTERM', stop);
    await vitest?.close();
    await server.release();
    await fs.rm(dataDir, { recursive: true, force: true });
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const arg = (name: string) => {
    const at = process.argv.indexOf(name);
    return at >= 0 ? process.argv[at + 1]?.split(',') : undefined;
  };
  const only = arg('--only');
  const tests = arg('--tests');
  const { baseline, results } = await runSqlMutation({ ...(only ? { only } : {}), ...(tests ? { tests } : {}) });
  const survived = results.filter((r) => r.status !== 'killed');
  process.stderr.write(`[sql-mutation] ${results.length - survived.length} of ${results.length} SQL mutants killed\n`);
  process.exit(baseline || survived.length > 0 ? 1 : 0);
}
