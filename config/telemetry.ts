import { createRequire } from 'node:module';
import { context, diag, DiagLogLevel, trace } from '@opentelemetry/api';
import type { Resource } from '@opentelemetry/resources';
import type { SpanProcessor } from '@opentelemetry/sdk-trace-base';
import type { Logger } from 'pino';
import { setTracing } from '../core/telemetry.ts';

// The SDK packages (CommonJS) are required only when tracing is on: off, a process never holds
// them (about 5 MiB of heap and 11 MiB of RSS with the OTLP exporter's protobuf code).
const require = createRequire(import.meta.url);

/**
 * OpenTelemetry tracing (docs/observability.md), on by the standard variables and off by
 * default. Off, nothing of the SDK is loaded: no provider is registered, no context
 * manager, no exporter, so @opentelemetry/api's no-op tracer answers and core's helpers
 * (core/telemetry.ts) call straight through.
 *
 * On (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT set, OTEL_SDK_DISABLED
 * not true): the Node SDK's tracer provider with an OTLP/HTTP (protobuf) exporter behind a batch
 * processor, the AsyncLocalStorage context manager and the W3C trace context propagator; the
 * sampler is the SDK's, from OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG
 * (parentbased_always_on by default); the resource from OTEL_SERVICE_NAME (default
 * `model-access-service`) and OTEL_RESOURCE_ATTRIBUTES. No instrumentation library patches
 * anything: every span is made by the service where it knows what the span means (the HTTP
 * request with its route, the core procedure, the reservation and the settle, the upstream
 * call with its GenAI attributes, the Temporal interceptors).
 */
export function tracingConfigured(env: NodeJS.ProcessEnv = process.env): boolean {
  if ((env.OTEL_SDK_DISABLED ?? '').toLowerCase() === 'true') return false;
  return Boolean(env.OTEL_EXPORTER_OTLP_ENDPOINT || env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT);
}

export interface Telemetry {
  /** The processor and resource the Temporal worker's workflow span sink exports through. */
  spanProcessor: SpanProcessor;
  resource: Resource;
  /** Exports what is still buffered, then stops. */
  shutdown(): Promise<void>;
}

let running: Telemetry | undefined;

/** Starts tracing when configured (once per process); undefined when off. */
export function startTelemetry(opts: { role: string; logger?: Logger; env?: NodeJS.ProcessEnv }): Telemetry | undefined {
  const env = opts.env ?? process.env;
  if (running) return running;
  if (!tracingConfigured(env)) {
    setTracing({ on: false });
    return undefined;
  }
  if (opts.logger) {
    const log = opts.logger.child({ component: 'opentelemetry' });
    // The SDK's own complaints (an exporter that cannot reach its endpoint) as log lines.
    diag.setLogger(
      { error: (m) => log.error(m), warn: (m) => log.warn(m), info: () => {}, debug: () => {}, verbose: () => {} },
      DiagLogLevel.WARN,
    );
  }
  const { OTLPTraceExporter } = require('@opentelemetry/exporter-trace-otlp-proto') as typeof import('@opentelemetry/exporter-trace-otlp-proto');
  const { detectResourcesSync, envDetectorSync, Resource } = require('@opentelemetry/resources') as typeof import('@opentelemetry/resources');
  const { BatchSpanProcessor } = require('@opentelemetry/sdk-trace-base') as typeof import('@opentelemetry/sdk-trace-base');
  const { NodeTracerProvider } = require('@opentelemetry/sdk-trace-node') as typeof import('@opentelemetry/sdk-trace-node');
  const detected = detectResourcesSync({ detectors: [envDetectorSync] });
  const resource = new Resource({ 'service.name': 'model-access-service', 'mas.role': opts.role }).merge(detected);
  const spanProcessor = new BatchSpanProcessor(new OTLPTraceExporter());
  const provider = new NodeTracerProvider({ resource, spanProcessors: [spanProcessor] });
  provider.register();
  setTracing({ on: true, captureContent: (env.OTEL_GENAI_CAPTURE_CONTENT ?? '').toLowerCase() === 'true' });
  running = {
    spanProcessor,
    resource: provider.resource,
    async shutdown() {
      await provider.shutdown().catch(() => undefined);
      trace.disable();
      context.disable();
      setTracing({ on: false });
      running = undefined;
    },
  };
  return running;
}

export function runningTelemetry(): Telemetry | undefined {
  return running;
}
