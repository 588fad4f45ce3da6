import { SpanKind, SpanStatusCode, trace, type Attributes, type Span } from '@opentelemetry/api';

/**
 * Spans for core and the adapters (docs/observability.md), through @opentelemetry/api only:
 * the SDK that exports them is started by config/telemetry.ts, and only when
 * OTEL_EXPORTER_OTLP_ENDPOINT is set. Off (the default), `tracingOn()` is false and every
 * helper here calls straight through: no span object, no context switch, nothing allocated
 * for attributes the caller builds lazily.
 *
 * What goes on a span: ids (accounts, keys, jobs, holds), model and route names, token counts,
 * costs. Never a credential, a prompt or a completion (unless OTEL_GENAI_CAPTURE_CONTENT, see
 * `captureContent`), and never an error's message, which may quote an upstream's answer: only
 * its type or code.
 */
let on = false;
let content = false;

/** Set once at start by config/telemetry.ts. */
export function setTracing(opts: { on: boolean; captureContent?: boolean }): void {
  on = opts.on;
  content = opts.on && opts.captureContent === true;
}

export function tracingOn(): boolean {
  return on;
}

/**
 * Whether a span made here would be recorded: tracing is on, and the trace this code runs in was
 * sampled (or there is none yet, and the sampler decides). Under a sampled-out trace (1 % kept:
 * 99 requests in 100) every helper below calls straight through, as when tracing is off: no
 * child span, no context switch, no attributes built. Exact with the `parentbased_*` samplers
 * (the default and the documented ones), which never record a child of a parent they dropped.
 */
export function recordingHere(): boolean {
  if (!on) return false;
  return trace.getActiveSpan()?.isRecording() ?? true;
}

/** OTEL_GENAI_CAPTURE_CONTENT=true: prompts and completions go on the upstream spans (off by default). */
export function captureContent(): boolean {
  return content;
}

export const TRACER_NAME = 'model-access-service';

export function tracer() {
  return trace.getTracer(TRACER_NAME);
}

/**
 * Runs `fn` in a new active span, ended when `fn` settles; a throw marks the span failed with
 * the error's type (its name, or a CoreError's code), never its message. Off, or in a trace the
 * sampler dropped: just `fn(undefined)`.
 */
export function inSpan<T>(name: string, attributes: (() => Attributes) | undefined, fn: (span: Span | undefined) => Promise<T>, kind: SpanKind = SpanKind.INTERNAL): Promise<T> {
  if (!recordingHere()) return fn(undefined);
  return tracer().startActiveSpan(name, { kind, ...(attributes ? { attributes: attributes() } : {}) }, async (span) => {
    try {
      return await fn(span);
    } catch (err) {
      failSpan(span, err);
      throw err;
    } finally {
      span.end();
    }
  });
}

/** A database call as a client span (the reservation and the settle: core/money). */
export function dbSpan<T>(operation: string, attributes: () => Attributes, fn: () => Promise<T>): Promise<T> {
  if (!recordingHere()) return fn();
  return inSpan(operation, () => ({ 'db.system.name': 'postgresql', 'db.system': 'postgresql', 'db.operation.name': operation, ...attributes() }), () => fn(), SpanKind.CLIENT);
}

/** Adds attributes to the active span (the core procedure's, the request's): a no-op when off. */
export function annotate(attributes: () => Attributes): void {
  if (!on) return;
  const span = trace.getActiveSpan();
  if (span?.isRecording()) span.setAttributes(attributes());
}

/** The error's type, safe to export: a CoreError's or provider error's code, else the class name. */
export function errorType(err: unknown): string {
  if (typeof err === 'object' && err !== null) {
    const code = (err as { code?: unknown }).code;
    if (typeof code === 'string' && /^[\w.-]{1,64}$/.test(code)) return code;
    const name = (err as { name?: unknown }).name;
    if (typeof name === 'string' && /^[\w.-]{1,64}$/.test(name)) return name;
  }
  return '_OTHER';
}

export function failSpan(span: Span, err: unknown): void {
  const type = errorType(err);
  span.setAttribute('error.type', type);
  span.setStatus({ code: SpanStatusCode.ERROR, message: type });
}

/** Micro-coins as coins, for `mas.cost_coins` (a span attribute is a number, not a bigint). */
export function coins(micro: bigint): number {
  return Number(micro) / 1_000_000;
}

/** The active trace's id (32 hex digits), or undefined when tracing is off or nothing is traced. */
export function activeTraceId(): string | undefined {
  if (!on) return undefined;
  const ctx = trace.getActiveSpan()?.spanContext();
  return ctx && trace.isSpanContextValid(ctx) ? ctx.traceId : undefined;
}
