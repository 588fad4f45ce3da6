import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { ensurePythonVenv } from '../../scripts/support/python-venv.ts';

/** The official Python MCP SDK, pinned: the release that first tries the 2026-07-28 revision (issue 35). */
export const MCP_PYTHON_VERSION = '2.3.0';

/**
 * The venv with the Python MCP SDK, made once on first use under ~/.cache/mas/mcp-python-<version>
 * (scripts/support/python-venv.ts: pinned, from PyPI, with progress lines); returns its python.
 */
export async function mcpPython(): Promise<string> {
  const venv = await ensurePythonVenv({
    name: 'mcp-python',
    version: MCP_PYTHON_VERSION,
    why: 'the Python MCP SDK test (test/e2e/mcp-python.test.ts) drives the server with it',
    installs: [[`mcp==${MCP_PYTHON_VERSION}`]],
    works: (dir) => spawnSync(path.join(dir, 'bin', 'python'), ['-c', 'import mcp.client.streamable_http'], { encoding: 'utf8' }).status === 0,
  });
  return path.join(venv, 'bin', 'python');
}
