/** Where the MCP adapter is mounted, and so the URL of the protected resource OAuth tokens are for (RFC 9728). */
export const MCP_PATH = '/api/v1/mcp';

export function mcpResourceUrl(publicBaseUrl: string): string {
  return `${publicBaseUrl.replace(/\/+$/, '')}${MCP_PATH}`;
}
