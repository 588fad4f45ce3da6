import { ErrorCode, type CallToolResult, type Tool as ToolDefinition } from '@modelcontextprotocol/sdk/types.js';
import type { Logger } from 'pino';
import { z } from 'zod';
import { invalid } from '../../core/errors.ts';
import { toCoreError } from '../../core/trpc.ts';
import { toolError } from './errors.ts';
import { appResourceContents, appResources, appToolMeta } from './apps/index.ts';
import { portableSchema } from './portable-schema.ts';
import { answer, type CoreCaller, type Tool } from './tool.ts';
import { chat } from './tools/chat.ts';
import { getBalance } from './tools/balance.ts';
import { uploadFile } from './tools/files.ts';
import { generate, getGeneration, listGenerations } from './tools/generations.ts';
import { getModel, listModels } from './tools/models.ts';

/**
 * What the MCP server offers, whatever the protocol revision or SDK that carries it: the
 * tools, their JSON Schemas, and one way to call a tool. The SDK bindings (server.ts for the
 * 2025 revisions, over `@modelcontextprotocol/sdk`) only translate requests into these.
 */

/** The tools, in the order agents see them. */
export const TOOLS: Tool[] = [listModels, getModel, chat, generate, uploadFile, getGeneration, listGenerations, getBalance] as unknown as Tool[];

export const SERVER_INFO = { name: 'model-access-service', title: 'Model Access Service' } as const;

export const INSTRUCTIONS =
  'Paid access to text, image, video, audio and 3D models. Every call that runs a model is paid in coins (1 USD = 1000 coins) ' +
  'from this account: list_models and get_model show prices, get_balance what is left. Text models answer chat; media models run ' +
  'as jobs with generate, which waits for the result up to about 100 s with progress notifications (about 50 s without a progressToken), then returns the running job; get_generation fetches a job later, and list_generations finds ' +
  'recent jobs (a generate call that timed out). upload_file makes a file usable as a generation input.';

function jsonSchema(schema: z.ZodType, io: 'input' | 'output'): ToolDefinition['inputSchema'] {
  const { $schema: _drop, ...rest } = z.toJSONSchema(schema, { io, unrepresentable: 'any' }) as Record<string, unknown>;
  // Strict clients warn about bare {} and type arrays: rewritten into their exact equivalents.
  return portableSchema(rest) as ToolDefinition['inputSchema'];
}

/** The tools as tools/list describes them: their JSON Schemas are made once, not per request. */
export const DEFINITIONS: ToolDefinition[] = TOOLS.map((t) => ({
  name: t.name,
  title: t.title,
  description: t.description,
  inputSchema: jsonSchema(t.input, 'input'),
  outputSchema: jsonSchema(t.output, 'output'),
  annotations: { title: t.title, ...t.annotations },
  ...(t.execution ? { execution: t.execution } : {}),
  ...(t.ui ? { _meta: appToolMeta(t.ui) } : {}),
}));
const BY_NAME = new Map(TOOLS.map((t) => [t.name, t]));
const KNOWN_ARGUMENTS = new Map(DEFINITIONS.map((d) => [d.name, new Set(Object.keys(d.inputSchema.properties ?? {}))]));

/**
 * A JSON-RPC error. Not McpError: it writes "MCP error <code>:" into its own message, which
 * the client then prefixes again.
 */
export function protocolError(code: ErrorCode, message: string): Error {
  return Object.assign(new Error(message), { code });
}

/** The MCP Apps views (`ui://`, adapters/mcp/apps/) as resources/list describes them; their CSP allows only `publicBaseUrl`. */
export function listResources(publicBaseUrl: string) {
  return { resources: appResources(publicBaseUrl) };
}

/** The 2025 revisions' "Resource not found" (-32002); on 2026-07-28 the v2 SDK answers it as invalid params (-32602), as that revision says. */
export const RESOURCE_NOT_FOUND = -32002;

/** One view's HTML for resources/read; an unknown uri is the spec's resource-not-found error, never a 500. */
export function readResource(uri: string, publicBaseUrl: string) {
  const contents = appResourceContents(uri, publicBaseUrl);
  if (!contents) throw Object.assign(protocolError(RESOURCE_NOT_FOUND as ErrorCode, `Resource not found: ${uri.slice(0, 200)}. resources/list names the resources.`), { data: { uri: uri.slice(0, 200) } });
  return { contents: [contents] };
}

/** What one tool call needs from its transport. */
export interface CallContext {
  /** A core caller for this call: its own rate-limit count, aborted with `signal`. */
  core(signal: AbortSignal): CoreCaller;
  /** Aborted when the client cancels the call or goes away. */
  signal: AbortSignal;
  /** Sends a progress notification if the client asked for them; else does nothing. */
  progress(message: string, done: number, total?: number): Promise<void>;
  logger: Logger;
  /** How long `generate` waits for its job on this call: shorter when the call carries no progressToken (mcp.ts). */
  generateWaitSeconds: number;
  /** The most `wait_seconds` may ask for (MCP_GENERATE_WAIT_SECONDS). */
  maxWaitSeconds: number;
  /** How often `generate` sends progress while it waits. */
  progressEverySeconds: number;
}

/**
 * A tool's arguments, parsed with its zod schema; an unknown argument is refused by name.
 * Throws a ZodError or a CoreError (toCoreError makes both an error naming the field).
 */
export function toolArguments<T extends Tool>(tool: T, args: Record<string, unknown> | undefined): z.output<T['input']> {
  const given = args ?? {};
  const known = KNOWN_ARGUMENTS.get(tool.name)!;
  const unknown = Object.keys(given).find((k) => !known.has(k));
  if (unknown !== undefined) throw invalid(unknown, `Unknown argument '${unknown}' for ${tool.name}. Its arguments are: ${[...known].join(', ') || 'none'}.`, 'unknown_argument');
  const parsed = tool.input.safeParse(given);
  if (!parsed.success) throw parsed.error;
  return parsed.data as z.output<T['input']>;
}

/**
 * Calls one tool. Its arguments are parsed with its zod schema, and any error, its own or
 * core's, is an `isError` result naming the field; only an unknown tool or an internal fault
 * is thrown, as a JSON-RPC error.
 */
export async function callTool(name: string, args: Record<string, unknown> | undefined, ctx: CallContext): Promise<CallToolResult> {
  const tool = BY_NAME.get(name);
  if (!tool) throw protocolError(ErrorCode.InvalidParams, `Unknown tool: ${name}. tools/list names the tools.`);
  try {
    const result = await tool.run(toolArguments(tool, args), { core: ctx.core(ctx.signal), signal: ctx.signal, progress: ctx.progress, generateWaitSeconds: ctx.generateWaitSeconds, maxWaitSeconds: ctx.maxWaitSeconds, progressEverySeconds: ctx.progressEverySeconds });
    return answer(result);
  } catch (err) {
    const core = toCoreError(err);
    if (core) return toolError(core);
    ctx.logger.error({ err, tool: tool.name }, 'MCP tool failed');
    throw protocolError(ErrorCode.InternalError, 'Internal error. The request id is in the x-request-id header.');
  }
}
