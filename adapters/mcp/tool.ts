import type { CallToolResult, ContentBlock } from '@modelcontextprotocol/sdk/types.js';
import type { z } from 'zod';
import type { createCaller } from '../../core/router.ts';

export type CoreCaller = ReturnType<typeof createCaller>;

/** What a tool's handler gets besides its arguments. */
export interface ToolContext {
  /** Core, as this call's caller (its key, its request id; one request against the rate limit). */
  core: CoreCaller;
  /** Aborted when the client cancels the call or goes away. */
  signal: AbortSignal;
  /** Sends a progress notification when the client asked for them (a progressToken); else does nothing. */
  progress(message: string, progress: number, total?: number): Promise<void>;
  /**
   * How long `generate` waits for its job on this call: MCP_GENERATE_WAIT_SECONDS when the call
   * carries a progressToken, else at most MCP_GENERATE_QUIET_WAIT_SECONDS (clients without progress
   * give up after 60 s).
   */
  generateWaitSeconds: number;
  /** The most `wait_seconds` may ask for (MCP_GENERATE_WAIT_SECONDS). */
  maxWaitSeconds: number;
  /** How often `generate` sends progress while it waits (10 s; shorter in tests). */
  progressEverySeconds: number;
}

/** What a handler returns: the structured result (matching `output`), a short text, and more content if any. */
export interface ToolAnswer<O> {
  structured: O;
  text: string;
  content?: ContentBlock[];
}

/**
 * One MCP tool: like a REST route, it parses (its zod input), calls one core use case and
 * shapes the answer. No business rule lives here.
 */
export interface Tool<I extends z.ZodType = z.ZodType, O extends z.ZodType = z.ZodType> {
  name: string;
  title: string;
  description: string;
  input: I;
  output: O;
  annotations: { readOnlyHint: boolean; destructiveHint?: boolean; idempotentHint: boolean; openWorldHint: boolean };
  /** Whether a client may run the tool as a task (2025-11-25 revision; adapters/mcp/tasks.ts). Absent: it may not. */
  execution?: { taskSupport: 'optional' };
  /** The `ui://` resource (MCP Apps, adapters/mcp/apps/) that shows this tool's result in hosts that support them. */
  ui?: string;
  run(args: z.output<I>, ctx: ToolContext): Promise<ToolAnswer<z.input<O>>>;
}

export function defineTool<I extends z.ZodType, O extends z.ZodType>(tool: Tool<I, O>): Tool<I, O> {
  return tool;
}

export function answer<O>(a: ToolAnswer<O>): CallToolResult {
  return { content: [{ type: 'text', text: a.text }, ...(a.content ?? [])], structuredContent: a.structured as Record<string, unknown> };
}
