import type { EntityManager } from '@mikro-orm/postgresql';
import { recordAudit } from '../admin/audit.ts';
import type { CoreDeps } from '../context.ts';
import type { PaymentEvent } from '../ports.ts';
import { handlePaymentEvent } from './receive-webhook.ts';

/** How far back the reconciliation looks: Stripe retries a webhook for three days. */
export const RECONCILE_WINDOW_MS = 3 * 24 * 3600_000;

export interface ReconcileReport {
  object: 'payments_reconciliation';
  /** False while payments are off (no STRIPE_SECRET_KEY): nothing was listed. */
  ran: boolean;
  since: string;
  sessions_listed: number;
  invoices_listed: number;
  /** The service's own off-session charges (auto top-ups) that succeeded. */
  intents_listed: number;
  /** The sessions and invoices the webhook had missed, now credited. */
  credited: string[];
  /** Listed but not credited now: already seen by an earlier run, or refused (audited like the webhook's). */
  not_credited: { id: string; outcome: string }[];
}

/**
 * The reconciliation (`mas-payments-reconcile` Schedule): lists the paid top-up sessions and paid
 * invoices of the last three days at the payment provider and hands each the webhook has not
 * credited to the very code the webhook runs (handlePaymentEvent), as an event of its own id
 * (`reconcile:<session or invoice id>`). The same exactly-once keys hold (the ledger key and the
 * unique session or invoice id), so a credit the webhook makes later, or a second run, credits
 * nothing. Each credit it makes gets an audit entry (`payment.reconciled`) in its transaction,
 * and the run logs what it did.
 */
export async function reconcilePayments(deps: Pick<CoreDeps, 'payments' | 'config' | 'clock' | 'logger'>, em: EntityManager): Promise<ReconcileReport> {
  const since = new Date(deps.clock().getTime() - RECONCILE_WINDOW_MS);
  const report: ReconcileReport = { object: 'payments_reconciliation', ran: false, since: since.toISOString(), sessions_listed: 0, invoices_listed: 0, intents_listed: 0, credited: [], not_credited: [] };
  if (!deps.payments) return report;
  const listed = await deps.payments.listPaidSince(since);
  report.ran = true;
  report.sessions_listed = listed.sessions.length;
  report.invoices_listed = listed.invoices.length;
  report.intents_listed = listed.intents.length;

  const known = async (sql: string, ids: string[]) =>
    new Set(ids.length === 0 ? [] : (await em.fork().execute<{ id: string }[]>(sql, [ids.join(',')])).map((r) => r.id));
  const credited = await known(`select checkout_session_id as id from payments where checkout_session_id = any(string_to_array(?, ','))`, listed.sessions.map((s) => s.id));
  const charged = await known(
    `select payment_intent_id as id from payments where source = 'auto_top_up' and payment_intent_id = any(string_to_array(?, ','))`,
    listed.intents.map((i) => i.id),
  );
  const granted = await known(`select invoice_id as id from subscription_grants where invoice_id = any(string_to_array(?, ','))`, listed.invoices.map((i) => i.id));

  const now = deps.clock();
  const events: PaymentEvent[] = [
    ...listed.sessions
      .filter((s) => !credited.has(s.id))
      .map((session): PaymentEvent => ({ eventId: `reconcile:${session.id}`, providerType: 'reconcile:checkout.session', createdAt: now, kind: 'checkout_session', stage: 'completed', session })),
    ...listed.invoices
      .filter((i) => !granted.has(i.id))
      .map((invoice): PaymentEvent => ({ eventId: `reconcile:${invoice.id}`, providerType: 'reconcile:invoice', createdAt: now, kind: 'invoice_paid', invoice })),
    ...listed.intents
      .filter((i) => !charged.has(i.id))
      .map((intent): PaymentEvent => ({ eventId: `reconcile:${intent.id}`, providerType: 'reconcile:payment_intent', createdAt: now, kind: 'payment_intent', stage: 'succeeded', intent })),
  ];
  for (const event of events) {
    const id = event.kind === 'checkout_session' ? event.session.id : event.kind === 'invoice_paid' ? event.invoice.id : event.kind === 'payment_intent' ? event.intent.id : event.eventId;
    const outcome = await em.fork().transactional(async (tx) => {
      const o = await handlePaymentEvent(deps, tx, event);
      if (o.outcome === 'credited') {
        await recordAudit(tx, { kind: 'internal' }, {
          action: 'payment.reconciled',
          targetType: 'payment',
          targetId: id,
          reason: 'paid at the payment provider, and no webhook had credited it: credited by the reconciliation',
          after: { account_id: o.accountId, kind: event.kind },
        });
      }
      return o;
    });
    if (outcome.outcome === 'credited') report.credited.push(id);
    else report.not_credited.push({ id, outcome: outcome.outcome });
  }
  const log = report.credited.length > 0 ? deps.logger.warn.bind(deps.logger) : deps.logger.info.bind(deps.logger);
  log(
    { since: report.since, sessions: report.sessions_listed, invoices: report.invoices_listed, intents: report.intents_listed, credited: report.credited, not_credited: report.not_credited },
    `payments reconciled: ${report.credited.length} credited that the webhook missed`,
  );
  return report;
}
