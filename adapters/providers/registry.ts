import type { ChatProvider, ProviderRegistry } from '../../core/ports.ts';
import { chatTimeouts, type ProviderConfig } from '../../core/catalog/schema.ts';
import { localProvider } from './local.ts';
import { localMediaProvider } from './media/local-media.ts';
import { replicateProvider } from './media/replicate.ts';
import { falProvider } from './media/fal.ts';
import { openaiMediaProvider } from './media/openai-media.ts';
import { elevenLabsProvider } from './media/elevenlabs.ts';
import type { MediaProvider, MediaProviderRegistry } from '../../core/ports.ts';
import { openaiCompatibleProvider } from './openai-compatible.ts';
import type { AnthropicConfig } from './anthropic.ts';
import { loadOnce } from '../load-once.ts';
import { noteUpstreamWords, observedChatProvider, observedMediaProvider } from './telemetry.ts';
import { timedChatProvider } from './timeouts.ts';

/** Builds the providers named in the catalog file; upstream keys come from the environment; `log` is the operator's, for what upstreams said. */
export function createProviderRegistry(
  configs: Record<string, ProviderConfig>,
  env: NodeJS.ProcessEnv = process.env,
  log?: { warn(fields: object, message: string): void },
): ProviderRegistry {
  const providers = new Map<string, ChatProvider>();
  for (const [name, config] of Object.entries(configs)) {
    const upstreamLog = log && ((fields: object, message: string) => log.warn({ provider: name, ...fields }, message));
    if (config.kind === 'local') providers.set(name, localProvider());
    else if (config.kind === 'openai-compatible') {
      providers.set(name, timed(openaiCompatibleProvider({ ...upstream(config, env), headers: config.headers, log: upstreamLog }), config, upstreamLog));
    } else if (config.kind === 'anthropic') {
      providers.set(name, timed(anthropicOnFirstUse({ ...upstream(config, env), version: config.anthropic_version, log: upstreamLog }), config, upstreamLog));
    }
  }
  // Every upstream call a span (tracing on) and metrics (adapters/providers/telemetry.ts).
  for (const [name, provider] of providers) providers.set(name, observedChatProvider(name, provider));
  return { get: (name) => providers.get(name) };
}

/**
 * Media providers of the catalog: `local` makes files offline; `replicate` calls a predictions
 * API; `fal` fal.ai's queue; `openai` its images, speech and videos APIs; `elevenlabs` its
 * text-to-speech.
 */
export function createMediaProviderRegistry(
  configs: Record<string, ProviderConfig>,
  opts: {
    download: (url: string) => Promise<Uint8Array>;
    env?: NodeJS.ProcessEnv | undefined;
    /** The operator's log, for what upstreams said (never shown to customers). */
    log?: { warn(fields: object, message: string): void } | undefined;
  },
): MediaProviderRegistry {
  const env = opts.env ?? process.env;
  const providers = new Map<string, MediaProvider>();
  // What an upstream said goes to the operator's log and to the trace of the call that got it.
  const warn = opts.log?.warn.bind(opts.log);
  const upstreamLog = warn && {
    warn(fields: object, message: string) {
      warn(fields, message);
      noteUpstreamWords(message, fields);
    },
  };
  for (const [name, config] of Object.entries(configs)) {
    if (config.kind === 'local') providers.set(name, localMediaProvider());
    else if (config.kind === 'replicate') providers.set(name, replicateProvider({ ...upstream(config, env), download: opts.download, log: upstreamLog && { warn: (fields, message) => upstreamLog.warn({ provider: name, ...fields }, message) } }));
    else if (config.kind === 'fal') {
      providers.set(name, falProvider({ ...upstream(config, env), download: opts.download, log: upstreamLog && ((fields, message) => upstreamLog.warn({ provider: name, ...fields }, message)) }));
    } else if (config.kind === 'openai') {
      const { organization, project } = config;
      providers.set(name, openaiMediaProvider({ ...upstream(config, env), organization, project, maxResultBytes: config.max_result_mb * 1_048_576, log: upstreamLog }));
    } else if (config.kind === 'elevenlabs') {
      providers.set(name, elevenLabsProvider({ ...upstream(config, env), maxResultBytes: config.max_result_mb * 1_048_576, log: upstreamLog }));
    }
  }
  for (const [name, provider] of providers) providers.set(name, observedMediaProvider(name, provider));
  return { get: (name) => providers.get(name) };
}

/**
 * The Anthropic mapping (anthropic.ts and its request and error modules), imported on the
 * route's first call: a process whose catalog names Anthropic but never calls it, and the
 * worker, which runs no chat, never hold it.
 */
function anthropicOnFirstUse(config: AnthropicConfig): ChatProvider {
  const provider = loadOnce(async () => (await import('./anthropic.ts')).anthropicProvider(config));
  return {
    async *stream(request, signal) {
      yield* (await provider()).stream(request, signal);
    },
  };
}

/** A chat upstream bounded by its answer's time limits (first token, idle, deadline), keep-alives not counting. */
function timed(provider: ChatProvider, config: Parameters<typeof chatTimeouts>[0], log: ((fields: object, message: string) => void) | undefined): ChatProvider {
  const t = chatTimeouts(config);
  return timedChatProvider(provider, { firstTokenMs: t.firstToken * 1000, idleMs: t.idle * 1000, deadlineMs: t.deadline * 1000 }, { log });
}

/** Where an upstream is, its key (named by the catalog, read from the environment) and its timeout. */
function upstream(config: { base_url: string; api_key_env?: string | undefined; timeout_seconds: number }, env: NodeJS.ProcessEnv) {
  return {
    baseUrl: config.base_url,
    apiKey: config.api_key_env ? env[config.api_key_env] : undefined,
    timeoutMs: config.timeout_seconds * 1000,
  };
}
