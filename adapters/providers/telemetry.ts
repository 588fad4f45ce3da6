import { SpanKind, trace, type Attributes, type Span } from '@opentelemetry/api';
import { Counter, Histogram, Registry, type Metric } from 'prom-client';
import { captureContent, errorType, failSpan, inSpan, tracer, tracingOn } from '../../core/telemetry.ts';
import { countChatTokens } from '../../core/chat/tokens.ts';
import type { ChatProvider, InputReader, MediaJobSpec, MediaProvider, ProviderChatRequest, ProviderEvent } from '../../core/ports.ts';

/**
 * Every upstream call, as the OpenTelemetry GenAI semantic conventions name it
 * (docs/observability.md): a client span per call (`chat <model>`, `generate_content <model>`)
 * with `gen_ai.operation.name`, `gen_ai.provider.name`, `gen_ai.request.model`,
 * `gen_ai.response.model`, `gen_ai.usage.input_tokens` and `output_tokens`, and the route
 * (`mas.route`: `provider/model`); and the GenAI metrics, as Prometheus series named from the
 * conventions' instruments (dots to underscores, the unit as a suffix), on the service's
 * /metrics beside the existing ones. The metrics are always kept (a few histogram observations
 * per call); the spans only when tracing is on. Prompts and completions go on a span only with
 * OTEL_GENAI_CAPTURE_CONTENT=true. An error is recorded by its type, never its message.
 *
 * One registry per process, merged into /metrics by adapters/http/metrics.ts: the provider
 * registries are built once per process (config/compose.ts), API and worker alike.
 */
export const upstreamRegistry = new Registry();

const operationDuration = new Histogram({
  name: 'gen_ai_client_operation_duration_seconds',
  help: 'GenAI operation duration (gen_ai.client.operation.duration): one upstream call, by operation, provider, request model and error type',
  labelNames: ['gen_ai_operation_name', 'gen_ai_provider_name', 'gen_ai_request_model', 'error_type'],
  buckets: [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92],
  registers: [upstreamRegistry],
});
const timeToFirstToken = new Histogram({
  name: 'gen_ai_server_time_to_first_token_seconds',
  help: 'Time to the first output of a streamed upstream answer (gen_ai.server.time_to_first_token), by provider and request model',
  labelNames: ['gen_ai_operation_name', 'gen_ai_provider_name', 'gen_ai_request_model'],
  buckets: [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10],
  registers: [upstreamRegistry],
});
const tokenUsage = new Histogram({
  name: 'gen_ai_client_token_usage',
  help: 'Tokens per upstream call as the upstream reported them (gen_ai.client.token.usage), by provider, request model and token type (input, output)',
  labelNames: ['gen_ai_operation_name', 'gen_ai_provider_name', 'gen_ai_request_model', 'gen_ai_token_type'],
  buckets: [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304],
  registers: [upstreamRegistry],
});
const upstreamErrors = new Counter({
  name: 'mas_upstream_errors_total',
  help: 'Failed upstream calls, by provider, route (provider/model) and error type',
  labelNames: ['provider', 'route', 'error_type'],
  registers: [upstreamRegistry],
});

/** The metrics above, for /metrics to register (adapters/http/metrics.ts). */
export const upstreamMetrics: Metric[] = [operationDuration, timeToFirstToken, tokenUsage, upstreamErrors] as Metric[];

/** The time-to-first-token and token histograms of one provider and model (tracing on only). */
interface ChatSeries {
  firstToken: Histogram.Internal<string>;
  input: Histogram.Internal<string>;
  output: Histogram.Internal<string>;
}
const chatSeries = new Map<string, ChatSeries>();
function seriesOf(provider: string, model: string): ChatSeries {
  const key = `${provider} ${model}`;
  let s = chatSeries.get(key);
  if (!s) {
    const labels = { gen_ai_operation_name: 'chat', gen_ai_provider_name: provider, gen_ai_request_model: model };
    s = { firstToken: timeToFirstToken.labels(labels), input: tokenUsage.labels({ ...labels, gen_ai_token_type: 'input' }), output: tokenUsage.labels({ ...labels, gen_ai_token_type: 'output' }) };
    chatSeries.set(key, s);
  }
  return s;
}

/**
 * One chat call to a route, as core told its breaker (adapters/providers/breakers.ts): its
 * duration and, for a failure, its reason, whether tracing is on or off. Free of the stream's
 * events, so the chat path pays one histogram observation for it.
 */
export function noteChatCall(route: string, outcome: { ok: boolean; latencyMs: number; reason?: string | undefined }): void {
  const slash = route.indexOf('/');
  const provider = slash < 0 ? route : route.slice(0, slash);
  const model = slash < 0 ? '' : route.slice(slash + 1);
  const error = outcome.ok ? '' : (outcome.reason ?? 'error');
  operationDuration.observe({ gen_ai_operation_name: 'chat', gen_ai_provider_name: provider, gen_ai_request_model: model, error_type: error }, outcome.latencyMs / 1000);
  if (!outcome.ok) upstreamErrors.inc({ provider, route, error_type: error });
}

/**
 * A chat provider whose calls are spans, with their time to first token and token usage as
 * metrics, when tracing is on. Off, the provider's own stream is handed back untouched: a
 * wrapper that sees each event cost the chat path about 10 µs of CPU per call in a
 * micro-benchmark (bench/RESULTS.md), more than tracing off may cost, so those two histograms
 * are kept only with tracing on; every call's duration and errors are noted through the
 * breakers (`noteChatCall`), tracing on or off.
 */
export function observedChatProvider(provider: string, inner: ChatProvider): ChatProvider {
  return {
    stream(request: ProviderChatRequest, signal: AbortSignal): AsyncIterable<ProviderEvent> {
      if (!tracingOn()) return inner.stream(request, signal);
      return {
        [Symbol.asyncIterator]: () => observe(provider, inner.stream(request, signal)[Symbol.asyncIterator](), request, signal),
      };
    },
  };
}

function observe(provider: string, it: AsyncIterator<ProviderEvent>, request: ProviderChatRequest, signal: AbortSignal): AsyncIterator<ProviderEvent> {
  const started = performance.now();
  const series = seriesOf(provider, request.model);
  const span: Span | undefined = startChatSpan(provider, request);
  let firstToken = -1;
  let ended = false;
  let failure: string | undefined;
  let inputTokens: number | undefined;
  let outputTokens: number | undefined;
  let output = '';
  const end = () => {
    if (ended) return;
    ended = true;
    // The duration and any error are noted through the breaker (noteChatCall), for every call.
    if (firstToken >= 0) series.firstToken.observe(firstToken);
    if (inputTokens !== undefined) series.input.observe(inputTokens);
    if (outputTokens !== undefined) series.output.observe(outputTokens);
    if (span) {
      if (inputTokens !== undefined) span.setAttribute('gen_ai.usage.input_tokens', inputTokens);
      else if (!failure) {
        // The upstream did not say (the demo model reports only its output): our count, as billed.
        span.setAttribute('gen_ai.usage.input_tokens', countChatTokens(request.messages));
        span.setAttribute('mas.usage.input_counted', true);
      }
      if (outputTokens !== undefined) span.setAttribute('gen_ai.usage.output_tokens', outputTokens);
      if (signal.aborted) span.setAttribute('mas.aborted', true);
      if (captureContent()) span.setAttribute('gen_ai.output.messages', JSON.stringify([{ role: 'assistant', parts: [{ type: 'text', content: output }] }]));
      span.end();
    }
  };
  const onEvent = (r: IteratorResult<ProviderEvent>): IteratorResult<ProviderEvent> => {
    if (r.done) {
      end();
      return r;
    }
    const event = r.value;
    if (event.type === 'usage') {
      inputTokens = event.promptTokens;
      outputTokens = event.completionTokens;
    } else if (firstToken < 0 && (event.type === 'delta' || event.type === 'tool_call')) {
      firstToken = (performance.now() - started) / 1000;
    }
    if (span) {
      if (event.type === 'finish') span.setAttribute('gen_ai.response.finish_reasons', [event.reason]);
      else if (event.type === 'delta' && captureContent()) output += event.content;
    }
    return r;
  };
  const onError = (err: unknown): never => {
    if (!ended) {
      failure = signal.aborted ? undefined : errorType(err);
      if (span && failure) failSpan(span, err);
      end();
    }
    throw err;
  };
  return {
    next: () => it.next().then(onEvent, onError),
    // The consumer stopped early (the client went away, or a fallback moved on).
    return: (value?: unknown) => {
      end();
      return it.return ? it.return(value).catch(onError) : Promise.resolve({ done: true as const, value: undefined });
    },
  };
}

function startChatSpan(provider: string, request: ProviderChatRequest): Span {
  const attributes: Attributes = {
    'gen_ai.operation.name': 'chat',
    'gen_ai.provider.name': provider,
    'gen_ai.request.model': request.model,
    // The upstream answers for the model it was asked for (no provider here reports another).
    'gen_ai.response.model': request.model,
    'gen_ai.request.max_tokens': request.maxTokens,
    'mas.route': `${provider}/${request.model}`,
  };
  if (request.options.temperature !== undefined) attributes['gen_ai.request.temperature'] = request.options.temperature;
  if (captureContent()) attributes['gen_ai.input.messages'] = JSON.stringify(request.messages);
  return tracer().startSpan(`chat ${request.model}`, { kind: SpanKind.CLIENT, attributes });
}

/** A media provider whose calls (submit, poll, fetch the result, cancel) are spans, and whose submits and results are metrics. */
export function observedMediaProvider(provider: string, inner: MediaProvider): MediaProvider {
  const step = <T>(name: string, model: string | undefined, attributes: Attributes, fn: () => Promise<T>, measured: boolean): Promise<T> => {
    const started = performance.now();
    const labels = { gen_ai_operation_name: 'generate_content', gen_ai_provider_name: provider, gen_ai_request_model: model ?? '' };
    let failure = '';
    return inSpan(
      `generate_content ${name}`,
      () => ({
        'gen_ai.operation.name': 'generate_content',
        'gen_ai.provider.name': provider,
        ...(model ? { 'gen_ai.request.model': model, 'gen_ai.response.model': model, 'mas.route': `${provider}/${model}` } : {}),
        'mas.media.step': name,
        ...attributes,
      }),
      () =>
        fn().catch((err: unknown) => {
          failure = errorType(err);
          upstreamErrors.inc({ provider, route: model ? `${provider}/${model}` : provider, error_type: failure });
          throw err;
        }),
      SpanKind.CLIENT,
    ).finally(() => {
      if (measured) operationDuration.observe({ ...labels, error_type: failure }, (performance.now() - started) / 1000);
    });
  };
  return {
    submit: (spec: MediaJobSpec, inputs: InputReader) =>
      step('submit', spec.model, { 'mas.job_id': spec.jobId, 'mas.media.type': spec.type, ...(captureContent() ? { 'gen_ai.input.messages': JSON.stringify([{ role: 'user', parts: [{ type: 'text', content: spec.prompt }] }]) } : {}) }, () => inner.submit(spec, inputs), true),
    poll: (handle: string) => step('poll', undefined, {}, () => inner.poll(handle), false),
    fetchResult: (handle: string, inputs: InputReader) => step('fetch_result', undefined, {}, () => inner.fetchResult(handle, inputs), true),
    ...(inner.cancel ? { cancel: (handle: string) => step('cancel', undefined, {}, () => inner.cancel!(handle), false) } : {}),
  };
}

/** What names the call, without anything the upstream wrote: kept on the event whether content capture is on or off. */
const CALL_FIELDS = new Set(['provider', 'call', 'status', 'request', 'prediction', 'job', 'model', 'field', 'errorType', 'retryAfterMs']);

/**
 * What an upstream said (an error body, a failed job's reason), logged for the operator by a
 * media adapter, is also an event on the upstream call's span (the active one while the adapter
 * runs): the job's trace shows the step that got it, with the log line's message, the provider,
 * the call and the HTTP status. The upstream's own text can quote the prompt, so it goes on the
 * event only with OTEL_GENAI_CAPTURE_CONTENT=true, as prompts do; otherwise it is in the log line,
 * which carries the span's trace_id and span_id. Never the customer's: the customer reads the
 * adapter's words. Tracing off, or outside a span: nothing.
 */
export function noteUpstreamWords(message: string, fields: object): void {
  if (!tracingOn()) return;
  const span = trace.getActiveSpan();
  if (!span) return;
  const withText = captureContent();
  const attributes: Attributes = {};
  for (const [key, value] of Object.entries(fields)) {
    if (value === undefined || (!withText && !CALL_FIELDS.has(key))) continue;
    attributes[`mas.upstream.${key}`] = typeof value === 'string' || typeof value === 'number' || typeof value === 'boolean' ? value : JSON.stringify(value);
  }
  span.addEvent(message, attributes);
}
