import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { CallToolRequestSchema, ErrorCode, ListToolsRequestSchema, type Tool as ToolDefinition } from '@modelcontextprotocol/sdk/types.js';
import type { Logger } from 'pino';
import { z } from 'zod';
import { invalid } from '../../core/errors.ts';
import { toCoreError } from '../../core/trpc.ts';
import { toolError } from './errors.ts';
import { answer, type CoreCaller, type Tool } from './tool.ts';
import { chat } from './tools/chat.ts';
import { getBalance } from './tools/balance.ts';
import { uploadFile } from './tools/files.ts';
import { generate, getGeneration } from './tools/generations.ts';
import { getModel, listModels } from './tools/models.ts';

/** The seven tools, in the order agents see them. */
export const TOOLS: Tool[] = [listModels, getModel, chat, generate, uploadFile, getGeneration, getBalance] as unknown as Tool[];

const INSTRUCTIONS =
  'Paid access to text, image, video, audio and 3D models. Every call that runs a model is paid in coins (1 USD = 1000 coins) ' +
  'from this account: list_models and get_model show prices, get_balance what is left. Text models answer chat; media models run ' +
  'as jobs with generate, which waits for the result up to about 100 s; get_generation fetches a job later. upload_file makes a ' +
  'file usable as a generation input.';

function jsonSchema(schema: z.ZodType, io: 'input' | 'output'): ToolDefinition['inputSchema'] {
  const { $schema: _drop, ...rest } = z.toJSONSchema(schema, { io, unrepresentable: 'any' }) as Record<string, unknown>;
  return rest as ToolDefinition['inputSchema'];
}

/** The tools as tools/list describes them: their JSON Schemas are made once, not per request. */
const DEFINITIONS: ToolDefinition[] = TOOLS.map((t) => ({
  name: t.name,
  title: t.title,
  description: t.description,
  inputSchema: jsonSchema(t.input, 'input'),
  outputSchema: jsonSchema(t.output, 'output'),
  annotations: { title: t.title, ...t.annotations },
}));
const BY_NAME = new Map(TOOLS.map((t) => [t.name, t]));
const KNOWN_ARGUMENTS = new Map(DEFINITIONS.map((d) => [d.name, new Set(Object.keys(d.inputSchema.properties ?? {}))]));

/**
 * A JSON-RPC error. Not McpError: it writes "MCP error <code>:" into its own message, which
 * the client then prefixes again.
 */
function protocolError(code: ErrorCode, message: string): Error {
  return Object.assign(new Error(message), { code });
}

/** What one HTTP request's server needs: a core caller per tool call, and the transport's limits. */
export interface McpServerOptions {
  /** A core caller for one tool call: its own rate-limit count, aborted with `signal`. */
  core(signal: AbortSignal): CoreCaller;
  logger: Logger;
  version: string;
  generateWaitSeconds: number;
}

/**
 * An MCP server for one request (the transport is stateless): tools/list and tools/call over
 * the seven tools. A tool's arguments are parsed with its zod schema, and any error, its own or
 * core's, is an `isError` result naming the field; only an unknown tool or a malformed call is a
 * JSON-RPC error.
 */
export function createMcpServer(opts: McpServerOptions): Server {
  const server = new Server({ name: 'model-access-service', title: 'Model Access Service', version: opts.version }, { capabilities: { tools: {} }, instructions: INSTRUCTIONS });
  server.setRequestHandler(ListToolsRequestSchema, () => ({ tools: DEFINITIONS }));
  server.setRequestHandler(CallToolRequestSchema, async (request, extra) => {
    const tool = BY_NAME.get(request.params.name);
    if (!tool) throw protocolError(ErrorCode.InvalidParams, `Unknown tool: ${request.params.name}. tools/list names the tools.`);
    const token = extra._meta?.progressToken;
    const progress = async (message: string, done: number, total?: number) => {
      if (token === undefined) return;
      // A client that went away cannot be told: the call goes on (its job is billed as in REST).
      await extra
        .sendNotification({ method: 'notifications/progress', params: { progressToken: token, progress: done, ...(total !== undefined ? { total } : {}), message } })
        .catch(() => undefined);
    };
    try {
      const args = request.params.arguments ?? {};
      const unknown = Object.keys(args).find((k) => !KNOWN_ARGUMENTS.get(tool.name)!.has(k));
      if (unknown !== undefined) throw invalid(unknown, `Unknown argument '${unknown}' for ${tool.name}. Its arguments are: ${[...KNOWN_ARGUMENTS.get(tool.name)!].join(', ') || 'none'}.`, 'unknown_argument');
      const parsed = tool.input.safeParse(args);
      if (!parsed.success) throw parsed.error;
      const result = await tool.run(parsed.data, { core: opts.core(extra.signal), signal: extra.signal, progress, generateWaitSeconds: opts.generateWaitSeconds });
      return answer(result);
    } catch (err) {
      const core = toCoreError(err);
      if (core) return toolError(core);
      opts.logger.error({ err, tool: tool.name }, 'MCP tool failed');
      throw protocolError(ErrorCode.InternalError, 'Internal error. The request id is in the x-request-id header.');
    }
  });
  return server;
}
