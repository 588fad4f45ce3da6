import { createRequire } from 'node:module';
import { trace } from '@opentelemetry/api';
import pino, { type DestinationStream, type Logger } from 'pino';
import { tracingConfigured } from './telemetry.ts';

/** Paths that must never reach a log line, whatever a future caller passes in. */
const REDACT = [
  'req.headers.authorization',
  'req.headers.cookie',
  'res.headers["set-cookie"]',
  '*.authorization',
  '*.Authorization',
  '*.cookie',
  '*.password',
  '*.secret',
  '*.token',
  '*.apiKey',
  '*.api_key',
  'key',
  '*.key',
];

/**
 * The service's logger: JSON lines on stdout (or `destination`). `pretty` (LOG_FORMAT=pretty,
 * never the default) prints them as text for a person at a terminal instead, through
 * pino-pretty, loaded only then. With tracing configured, lines carry `trace_id` and `span_id`.
 */
export function createLogger(level: string, destination?: DestinationStream, format: 'json' | 'pretty' = 'json'): Logger {
  return pino(
    {
      level,
      base: { service: 'mas' },
      redact: { paths: REDACT, censor: '[redacted]' },
      timestamp: pino.stdTimeFunctions.isoTime,
      // Tracing on (config/telemetry.ts): each line written inside a span names it, so a log line leads to its trace.
      ...(tracingConfigured() ? { mixin: traceIds } : {}),
    },
    destination ?? (format === 'pretty' ? prettyStdout() : pino.destination({ dest: 1, sync: true })),
  );
}

/** `trace_id` and `span_id` of the active span, when there is one (nothing otherwise). */
export function traceIds(): Record<string, string> {
  const ctx = trace.getActiveSpan()?.spanContext();
  return ctx && trace.isSpanContextValid(ctx) ? { trace_id: ctx.traceId, span_id: ctx.spanId } : {};
}

function prettyStdout(): DestinationStream {
  const pretty = createRequire(import.meta.url)('pino-pretty') as typeof import('pino-pretty');
  return pretty({ destination: 1, sync: true, ignore: 'pid,hostname,service' });
}
