/**
 * What core needs from outside, in one place. Outbound adapters implement these (adapters/
 * providers, storage, net, limits; config/temporal.ts for the workflow starter); the
 * composition root (config/compose.ts) wires them. Core never imports an adapter.
 */
import type { Readable } from 'node:stream';

/** The time, injectable so tests can move it. */
export type Clock = () => Date;

// ---------------------------------------------------------------- text models

/**
 * A tool call, as an assistant message in the history carries it, and as the provider-neutral
 * form of OpenAI's `tool_calls` and Anthropic's `tool_use` blocks.
 */
export interface ToolCall {
  id: string;
  name: string;
  /** The arguments as the model wrote them: JSON text, not parsed. */
  arguments: string;
}

export interface ChatMessageIn {
  role: 'system' | 'developer' | 'user' | 'assistant' | 'tool';
  /** '' when an assistant message has only tool calls. */
  content: string;
  name?: string | undefined;
  /** assistant only: the calls it made. */
  toolCalls?: ToolCall[] | undefined;
  /** tool only: the call this message is the result of. */
  toolCallId?: string | undefined;
}

/** A function the model may call; `parameters` is a JSON Schema (already compiled by core: valid). */
export interface ToolSpec {
  name: string;
  description?: string;
  parameters?: Record<string, unknown>;
  strict?: boolean;
}

/** Whether the model may, must, or must not call a tool, or which one it must call. */
export type ToolChoice = 'none' | 'auto' | 'required' | { name: string };

/** The shape the answer's text must have: any JSON object, or an instance of a JSON Schema. */
export type ResponseFormat =
  | { type: 'json_object' }
  | { type: 'json_schema'; name: string; description?: string; schema?: Record<string, unknown>; strict?: boolean };

/** Sampling options passed through to the upstream as the client sent them. */
export interface ChatOptions {
  temperature?: number;
  top_p?: number;
  stop?: string | string[];
  seed?: number;
  presence_penalty?: number;
  frequency_penalty?: number;
  user?: string;
}

export interface ProviderChatRequest {
  /** The model name the upstream knows (the catalog's provider route). */
  model: string;
  messages: ChatMessageIn[];
  maxTokens: number;
  options: ChatOptions;
  /** Functions the model may call (none when empty or absent). */
  tools?: ToolSpec[] | undefined;
  toolChoice?: ToolChoice | undefined;
  /** false: at most one tool call per answer. */
  parallelToolCalls?: boolean | undefined;
  responseFormat?: ResponseFormat | undefined;
}

export type ProviderEvent =
  | { type: 'delta'; content: string }
  /**
   * A piece of a tool call. `index` tells the calls of one answer apart (any numbers, in any
   * order of first appearance); the first piece of a call carries its `id` (when the upstream
   * gives one) and `name`, every piece a part of its `arguments` (possibly '').
   */
  | { type: 'tool_call'; index: number; id?: string | undefined; name?: string | undefined; arguments: string }
  | { type: 'finish'; reason: string }
  /** What the upstream says it used; either count may be missing. */
  /** What the upstream says it used (either count may be missing), and what it cost in USD when it says (OpenRouter's `usage.cost`). */
  | { type: 'usage'; promptTokens?: number | undefined; completionTokens?: number | undefined; costUsd?: number | undefined };

/** A text model upstream. Every provider streams; a non-streamed answer is assembled by core. */
export interface ChatProvider {
  stream(request: ProviderChatRequest, signal: AbortSignal): AsyncIterable<ProviderEvent>;
}

/**
 * A text upstream's failure, its message in our words (the upstream's own body goes to the
 * operator's log, never to the customer):
 * - `timeout`: it did not answer in time;
 * - `failed`: it could not be reached, answered 5xx or 429, said it was overloaded, refused
 *   our key, or answered something unreadable;
 * - `refused`: it refused the request on its merits (content policy, invalid input): the same
 *   request fails on every route, so it is the customer's 400, never a fallback.
 * `timeout` and `failed` are retryable: before any output, a model with another route tries it
 * (core/chat/routes.ts), after `retryAfterMs` at the earliest when the upstream named a delay.
 */
export class ProviderError extends Error {
  readonly kind: 'failed' | 'timeout' | 'refused';
  readonly status: number | undefined;
  readonly retryAfterMs: number | undefined;
  /** For `refused`: a snake_case reason for the customer's error (`content_policy`, `invalid_input`). */
  readonly code: string | undefined;
  constructor(kind: 'failed' | 'timeout' | 'refused', message: string, status?: number, opts: { retryAfterMs?: number | undefined; code?: string | undefined } = {}) {
    super(message);
    this.name = 'ProviderError';
    this.kind = kind;
    this.status = status;
    this.retryAfterMs = opts.retryAfterMs;
    this.code = opts.code;
  }

  /** Whether another route, or a later try, may succeed where this failed. */
  get retryable(): boolean {
    return this.kind !== 'refused';
  }
}

export interface ProviderRegistry {
  get(name: string): ChatProvider | undefined;
}

// ---------------------------------------------------------------- media models

export interface MediaJobSpec {
  jobId: string;
  /** The model name the upstream knows. */
  model: string;
  type: 'image' | 'video' | 'audio' | '3d';
  prompt: string;
  settings: Record<string, unknown>;
  inputs: Record<string, string | string[]>;
}

export type MediaPollResult = { status: 'running' } | { status: 'succeeded' } | { status: 'failed'; message: string; code?: string };

export interface MediaResult {
  bytes: Uint8Array;
  mimeType: string;
  /** File extension without the dot: png, wav, avi, gltf. */
  extension: string;
}

/** How a provider reads an input value: a public URL (fetched through the URL guard) or an uploaded file id. */
export interface InputReader {
  read(value: string): Promise<Uint8Array>;
  /** A URL an upstream can fetch the input from (a signed link for uploaded files). */
  url(value: string): string;
}

/**
 * A media upstream's failure, in words a customer may read (the upstream's own body is logged,
 * never put here). `refused` will not change on a retry (content policy, invalid input, our
 * key refused, a result over the size limit): the job fails now with `code`. `retryable` (429,
 * 5xx, a time-out, a malformed answer) is tried again, after `retryAfterMs` when the upstream
 * named a delay; when every retry failed the job fails with `code` and this message.
 */
export class MediaProviderError extends Error {
  readonly kind: 'refused' | 'retryable';
  readonly code: string;
  readonly retryAfterMs: number | undefined;
  constructor(kind: 'refused' | 'retryable', code: string, message: string, retryAfterMs?: number) {
    super(message);
    this.name = 'MediaProviderError';
    this.kind = kind;
    this.code = code;
    this.retryAfterMs = retryAfterMs;
  }
}

export interface MediaProvider {
  /** Starts the job upstream; returns the upstream's handle (opaque, JSON-serialisable). Idempotent on jobId. */
  submit(spec: MediaJobSpec, inputs: InputReader): Promise<string>;
  poll(handle: string): Promise<MediaPollResult>;
  /**
   * The result's bytes. Upstreams that answer synchronously (an image, a speech file) do their
   * work here, in the step that has minutes and a heartbeat, so they read their inputs here too.
   */
  fetchResult(handle: string, inputs: InputReader): Promise<MediaResult>;
  /** Asks the upstream to stop the job, where it supports that. */
  cancel?(handle: string): Promise<void>;
}

/** A refusal that retrying will not change (MediaProviderError `refused`), as the fal adapter names it. */
export class MediaJobRefused extends MediaProviderError {
  constructor(code: string, message: string) {
    super('refused', code, message);
    this.name = 'MediaJobRefused';
  }
}

/** A media upstream asked us to come back later (a 429 with `Retry-After`): retried, not before `retryAfterMs`. */
export class MediaUpstreamBusy extends MediaProviderError {
  constructor(_detail: string, retryAfterMs: number) {
    // What the job says if the provider stays busy through every retry.
    super('retryable', 'provider_busy', 'The provider stayed too busy to take the job. Nothing was charged.', retryAfterMs);
    this.name = 'MediaUpstreamBusy';
  }
}

export interface MediaProviderRegistry {
  get(name: string): MediaProvider | undefined;
}

// ---------------------------------------------------------------- routes

/** How one call to a route went, for its breaker and its latency figures. */
export type RouteOutcome =
  | { ok: true; latencyMs: number }
  | {
      ok: false;
      latencyMs: number;
      retryAfterMs?: number | undefined;
      /** How it failed, for the metrics: `timeout`, `unreachable`, `http_<status>`, `error`. */
      reason?: string | undefined;
      /** The request moved on to its next route. */
      fallback?: boolean | undefined;
    };

/** A route's breaker and figures, as `/metrics` and the GraphQL admin show them. */
export interface RouteHealth {
  /** `provider/model` (core/catalog/schema.ts routeKey). */
  route: string;
  /** closed: calls go through; open: skipped until the cool-down ends; half_open: one probe is let through. */
  state: 'closed' | 'open' | 'half_open';
  /** Failures within the breaker's window. */
  recentFailures: number;
  /** Latency of recent calls, successful or not, in milliseconds; null before any call. */
  latencyP50Ms: number | null;
  latencyP99Ms: number | null;
}

/**
 * One circuit breaker per route (adapters/providers/breakers.ts, on cockatiel): it opens after
 * a number of failures within a window, lets one probe through after a cool-down, and closes
 * when the probe succeeds. Shared through Redis when the service has one, so that every
 * instance skips a route one of them found down.
 */
export interface RouteBreakers {
  /**
   * A pass for one call to the route now, or undefined when its breaker is open (or its one
   * probe is already out). Closed: every caller gets one. Open past its cool-down: exactly one
   * caller (the probe), whose outcome closes or reopens it. The caller tells the pass how the
   * call went, exactly once.
   */
  admit(route: string): Promise<RoutePass | undefined>;
  /** Every route called since start, for /metrics and the admin API. */
  health(): Promise<RouteHealth[]>;
}

export interface RoutePass {
  done(outcome: RouteOutcome): void;
}

// ---------------------------------------------------------------- storage and the network

/** Bytes `start` to `end` of an object, both included (as in HTTP's `bytes=start-end`). */
export interface ByteRange {
  start: number;
  end: number;
}

/**
 * A stored object opened for reading: what it is (size, a strong validator, when it was
 * written) without its bytes, and a way to stream all or part of them. Opening reads no
 * bytes and holds nothing open; each `stream()` opens its own read (a file or an S3 GET),
 * which ends when the stream ends or is destroyed.
 */
export interface StoredObject {
  size: number;
  /** A strong entity tag, quoted (`"…"`): equal for equal bytes of the same object. */
  etag: string;
  lastModified: Date;
  /**
   * The bytes, or the bytes of `range` (which the caller has checked against `size`). The
   * stream emits 'error' if the read fails (the object vanished, the bucket broke off);
   * destroying it releases the file descriptor or the S3 connection.
   */
  stream(range?: ByteRange): Readable;
}

/** Uploaded files and job results: local disk or an S3 bucket. */
export interface ResultStorage {
  put(key: string, bytes: Uint8Array): Promise<void>;
  /** Moves a local file (an upload spooled to disk) into storage. */
  putFile(key: string, sourcePath: string): Promise<void>;
  /** The whole object in memory, or undefined once deleted: for small reads (a job's input file). Downloads use `open`. */
  get(key: string): Promise<Uint8Array | undefined>;
  /** The object, to stream (downloads), or undefined once deleted. */
  open(key: string): Promise<StoredObject | undefined>;
  delete(key: string): Promise<void>;
}

/** Refuses URLs that are not http(s) or that resolve to a loopback, private, link-local or metadata address. */
export interface UrlGuard {
  check(url: string): Promise<void>;
  /** GETs a URL's bytes over a connection that applies the same check. */
  fetch(url: string, init?: { maxBytes?: number; timeoutMs?: number }): Promise<Uint8Array>;
  /**
   * GETs a URL's bytes into the file `target` (created with mode 0600), streamed and hashed on
   * the way, over the same guarded connection: for uploads by URL, which must not hold up to
   * 50 MB in memory. Over `maxBytes`, a redirect or an HTTP error: rejects, and no file is left.
   */
  download(url: string, target: string, init?: { maxBytes?: number; timeoutMs?: number }): Promise<{ bytes: number; sha256: string }>;
}

/** Sends a job's webhook: POSTs to a public URL (checked again at connect time); returns the HTTP status. */
export interface WebhookTransport {
  post(url: string, body: string, headers: Record<string, string>): Promise<number>;
}

// ---------------------------------------------------------------- links

/** What a signed link opens: a job's result or an uploaded file. */
export type LinkedResource = 'generation' | 'file';

/**
 * Where a signed link points, without its query: the transport that serves the bytes decides
 * (REST: `…/api/v1/generations/{id}/output`). Configured by the composition root.
 */
export type LinkLocator = (resource: LinkedResource, id: string) => string;

/** Makes and checks the expiring, signed links to results and files (core/links.ts). */
export interface UrlSigner {
  sign(id: string, expiresAt: Date, resource?: LinkedResource): string;
  verify(id: string, expires: unknown, signature: unknown, now: Date, resource?: LinkedResource): void;
}

// ---------------------------------------------------------------- limits

export interface RateLimitState {
  allowed: boolean;
  limit: number;
  remaining: number;
  /** Seconds until the window frees a request. */
  resetSeconds: number;
}

/** SPEC part 8: requests per minute per API key; in memory or shared through Redis. */
export interface RateLimiter {
  consume(key: string): Promise<RateLimitState>;
}

/**
 * Consecutive failures of one key (a sign-in's email and address, say), and blocks on it:
 * core's policy (core/accounts/attempts.ts) decides when to block and for how long; the
 * adapter counts (in memory, or shared through Redis).
 */
export interface FailureCounter {
  /** Seconds left on the key's block; 0 when it is not blocked. */
  blockedFor(key: string): Promise<number>;
  /** Counts one failure; returns the failures counted since the last `reset` (forgotten after the counter's window). */
  fail(key: string): Promise<number>;
  /** Refuses the key for `seconds`. */
  block(key: string, seconds: number): Promise<void>;
  /** Forgets the key's failures and block (a success). */
  reset(key: string): Promise<void>;
}

// ---------------------------------------------------------------- mail

/** One e-mail to one person. Every mail the service sends is plain text (with an HTML part at most). */
export interface MailMessage {
  to: string;
  subject: string;
  text: string;
  html?: string | undefined;
  /**
   * The message's one-time link, if it has one. A secret: the adapter may log it only where
   * the mail goes nowhere else (no SMTP server set: the dev mode), never when it is sent.
   */
  link?: string | undefined;
}

/** Sends mail (adapters/mail/: SMTP through nodemailer, or .eml files under DATA_DIR/mail without SMTP_URL). */
export interface Mailer {
  send(message: MailMessage): Promise<void>;
}

// ---------------------------------------------------------------- workflows

/** What a job's workflow is started with: its id, and what an operator filters and reads on. */
export interface JobWorkflowStart {
  jobId: string;
  accountId: string;
  keyId: string;
  model: string;
  /** image, video, audio or 3d. */
  modelType: string;
  /** The job's price in micro-coins. */
  priceMicro: bigint;
  /** The first words of the prompt (core cuts it: the rest may be private). */
  promptHead: string;
}

/** Where a job's workflow stands, as the workflow engine sees it. */
export type JobWorkflowState =
  | { state: 'open' }
  /** Closed: `how` is the engine's close status (completed, failed, canceled, terminated, timed_out, continued_as_new). */
  | { state: 'closed'; how: string }
  /** No workflow with the job's id (never started, or its history is past the engine's retention). */
  | { state: 'missing' };

/** Starts an account's auto top-up workflow (Temporal): one per account at a time, so starting it while one runs does nothing. */
export interface AutoTopUpStarter {
  start(accountId: string): Promise<void>;
}

/** Starts and stops a job's workflow (Temporal); the workflow id is the job id. */
export interface GenerationStarter {
  /** Starts the job's workflow and answers its run id; starting it twice is harmless (no run id then). */
  start(job: JobWorkflowStart): Promise<string | void>;
  /** Tells a running job's workflow to stop (it then asks the provider to stop too). */
  cancel(jobId: string): Promise<void>;
  /** Whether the job's workflow is still open: the sweep ends jobs whose workflow closed without ending them. */
  state(jobId: string): Promise<JobWorkflowState>;
  /** Delivers the webhook of a job that ended outside its workflow (the sweep), with retries; once per job. */
  deliverWebhook(jobId: string): Promise<void>;
}

// ---------------------------------------------------------------- payments

/** A hosted payment page the customer is sent to (Stripe Checkout), and its id. */
export interface CheckoutLink {
  id: string;
  url: string;
}

/** Where the payment page sends the customer back: the account pages (configured by the composition root). */
export interface CheckoutReturn {
  successUrl: string;
  cancelUrl: string;
}

export interface TopUpCheckoutRequest extends CheckoutReturn {
  accountId: string;
  /** In the currency's smallest unit (cents). */
  amountCents: number;
  currency: string;
  /** What the customer buys, as the payment page shows it: "12,340 coins". */
  description: string;
  /** Makes a retried creation return the first session instead of a second one. */
  idempotencyKey: string;
  /** The provider's customer, when the account has one: the page then knows the customer's saved details. */
  customerId?: string | undefined;
  /** Keep the payment method for later off-session charges (auto top-up). */
  saveForLater?: boolean | undefined;
  /** The organization whose wallet this pays (Stripe's metadata names it), when it is one's. */
  organizationId?: string | undefined;
  /** The person acting for the organization (an owner), for Stripe's metadata. */
  actingAccountId?: string | undefined;
  /** The billing address for a new customer (an organization's own), when the service has one to give. */
  customerEmail?: string | undefined;
}

export interface SubscriptionCheckoutRequest extends CheckoutReturn {
  accountId: string;
  /** The provider's id of the plan's price (plans.yaml). */
  priceId: string;
  idempotencyKey: string;
  customerId?: string | undefined;
  /** The organization whose wallet this pays (Stripe's metadata names it), when it is one's. */
  organizationId?: string | undefined;
  /** The person acting for the organization (an owner), for Stripe's metadata. */
  actingAccountId?: string | undefined;
  /** The billing address for a new customer (an organization's own), when the service has one to give. */
  customerEmail?: string | undefined;
}

export interface OffSessionChargeRequest {
  accountId: string;
  customerId: string;
  paymentMethodId: string;
  amountCents: number;
  currency: string;
  idempotencyKey: string;
  /** The service's id of this charge (auto_top_up_charges), put on the payment so that its webhook names it. */
  chargeId: string;
  /** The organization whose wallet this pays, when it is one's (Stripe's metadata names it). */
  organizationId?: string | undefined;
}

/** How an off-session charge ended at once: the credit itself always comes from a webhook. */
export type OffSessionChargeResult =
  | { status: 'succeeded' | 'processing'; paymentId: string }
  /** The bank wants the customer present (3-D Secure): nothing was charged. */
  | { status: 'requires_action'; paymentId: string | null; reason: string }
  | { status: 'declined'; paymentId: string | null; reason: string };

/** What a completed, paid or failed Checkout Session says, as the provider reported it: core decides what it is worth. */
export interface CheckoutSessionFacts {
  id: string;
  mode: 'payment' | 'subscription' | 'setup';
  /** The account the session was made for (its client reference), as the event names it: not yet checked to exist. */
  accountId: string | null;
  /** What the service marked the session as when it made it (`topup`, `subscription`); null for a session it did not make. */
  purpose: string | null;
  /** `paid`, `unpaid` (a delayed method still on its way) or `no_payment_required`. */
  paymentStatus: string;
  /** The total charged, in the currency's smallest unit; null when the provider gave none. */
  amountTotalCents: number | null;
  /** Lower case ISO code (`usd`); null when the provider gave none. */
  currency: string | null;
  customerId: string | null;
  paymentIntentId: string | null;
  /** The customer chose to keep the card for auto top-up at this Checkout (setup_future_usage=off_session). */
  savesCard?: boolean;
}

/** A PaymentIntent the service made itself (an auto top-up's off-session charge), as its webhook or the reconciliation reads it. */
export interface PaymentIntentFacts {
  id: string;
  /** What the service marked the payment as when it made it (`auto_topup`); null for one it did not make. */
  purpose: string | null;
  accountId: string | null;
  /** The service's auto_top_up_charges id, from the payment's metadata. */
  chargeId: string | null;
  /** What was received, in the currency's smallest unit. */
  amountReceivedCents: number;
  currency: string;
  customerId: string | null;
  /** Why it failed (payment_failed), in the provider's words. */
  failure: string | null;
}

/**
 * A verified webhook delivery as a domain event. `eventId` is the provider's id of the
 * delivery's event (deliveries of one event share it); `providerType` its type as sent.
 */
export type PaymentEvent = { eventId: string; providerType: string; createdAt: Date } & (
  /** A Checkout Session finished (`completed`), or its delayed payment later succeeded or failed. */
  | { kind: 'checkout_session'; stage: 'completed' | 'async_payment_succeeded' | 'async_payment_failed'; session: CheckoutSessionFacts }
  /** A subscription's invoice was paid: a period's grant. */
  | {
      kind: 'invoice_paid';
      invoice: { id: string; subscriptionId: string | null; customerId: string | null; accountId: string | null; priceIds: string[]; amountPaidCents: number; currency: string; periodEnd: Date | null };
    }
  /** A PaymentIntent succeeded or failed: only the service's own off-session charges (auto top-up) are acted on. */
  | { kind: 'payment_intent'; stage: 'succeeded' | 'failed'; intent: PaymentIntentFacts }
  | { kind: 'subscription_deleted'; subscription: { id: string; customerId: string | null; accountId: string | null } }
  /** A charge was refunded, in part or in full: `amountRefundedCents` is the total refunded so far. */
  | { kind: 'refund'; charge: { id: string; paymentIntentId: string | null; amountCents: number; amountRefundedCents: number; currency: string } }
  /** One refund was created or changed (its status: pending, requires_action, succeeded, failed, canceled). */
  | { kind: 'refund_object'; refund: { id: string; chargeId: string | null; paymentIntentId: string | null; amountCents: number; currency: string; status: string } }
  /**
   * A dispute (chargeback) or an inquiry, at one step of its life. `status` is the provider's
   * (warning_needs_response, needs_response, won, lost, …); `balanceAmounts` the amounts of the
   * balance transactions the event carries (funds withdrawn: negative; reinstated: positive),
   * null when it carries none.
   */
  | {
      kind: 'dispute';
      stage: 'created' | 'updated' | 'funds_withdrawn' | 'funds_reinstated' | 'closed';
      dispute: { id: string; chargeId: string | null; paymentIntentId: string | null; amountCents: number; currency: string; status: string; balanceAmounts: number[] | null };
    }
  /** An event type the service does not use. */
  | { kind: 'ignored' }
);

/** Why a webhook delivery was refused before it became an event. */
export class PaymentWebhookError extends Error {
  /** `signature`: missing, malformed, wrong or too old; `payload`: signed, but not an event this service can read. */
  readonly kind: 'signature' | 'payload';
  constructor(kind: 'signature' | 'payload', message: string) {
    super(message);
    this.name = 'PaymentWebhookError';
    this.kind = kind;
  }
}

/** The payment provider failed or refused a request (a network failure, a bad key, an idempotency key reused with other parameters). */
export class PaymentProviderError extends Error {
  readonly kind: 'failed' | 'idempotency_conflict' | 'invalid_request';
  constructor(kind: 'failed' | 'idempotency_conflict' | 'invalid_request', message: string) {
    super(message);
    this.name = 'PaymentProviderError';
    this.kind = kind;
  }
}

/** The payment provider (Stripe: adapters/payments/stripe.ts). Money enters the wallet only through verified webhook events. */
export interface PaymentProvider {
  checkoutTopUp(request: TopUpCheckoutRequest): Promise<CheckoutLink>;
  checkoutSubscription(request: SubscriptionCheckoutRequest): Promise<CheckoutLink>;
  /** A link to the provider's customer portal (change the card, cancel the plan). */
  portalLink(request: { customerId: string; returnUrl: string }): Promise<{ url: string }>;
  /** Charges a saved payment method with the customer away (auto top-up). */
  chargeOffSession(request: OffSessionChargeRequest): Promise<OffSessionChargeResult>;
  /** The payment method that paid a PaymentIntent (the Checkout that saved the card), null when it has none. */
  paymentMethodOf(paymentIntentId: string): Promise<string | null>;
  /**
   * Checks the delivery's signature on its raw bytes (at most `toleranceSeconds` old at
   * `receivedAt`), then reads its event. Throws PaymentWebhookError for a bad delivery.
   */
  verifyWebhook(rawBody: Uint8Array, signature: string | undefined, receivedAt: Date, toleranceSeconds: number): Promise<PaymentEvent>;
  /** The customer's receipt of a payment (Stripe: its charge's `receipt_url`), null when the provider has none yet. */
  receiptUrl?(paymentIntentId: string): Promise<string | null>;
  /**
   * What was paid since `since`, as the provider's API lists it (the reconciliation): the
   * completed Checkout Sessions in payment mode whose payment is paid, the paid invoices, and
   * the succeeded PaymentIntents the service made itself (auto top-ups).
   */
  listPaidSince(since: Date): Promise<{ sessions: CheckoutSessionFacts[]; invoices: PaidInvoiceFacts[]; intents: PaymentIntentFacts[] }>;
}

/** A paid invoice, as `invoice_paid` events and the reconciliation read it. */
export type PaidInvoiceFacts = Extract<PaymentEvent, { kind: 'invoice_paid' }>['invoice'];
