import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { defaultVenvDir, ensurePythonVenv } from './support/python-venv.ts';
import { killLeftoversOnExit, printServerErrors, root, sayer, startServer, stopServer, type Server } from './support/server.ts';

/**
 * `npm run test:frameworks`: the Python side of the framework matrix (issue 32), each framework
 * as a developer points it at this base URL, against the real server:
 * - the `openai` SDK: chat with tools over two turns, a streamed tool call, `responses.create`
 *   plain and streamed, a function call through the Responses API;
 * - `langchain-openai`: `bind_tools` in an agent loop, `with_structured_output` (json_schema and
 *   function_calling);
 * - LiteLLM's `completion` with tools, as a client;
 * - LlamaIndex's `OpenAILike.structured_predict`.
 * (The Node side, the `openai` Node SDK, the AI SDK and LangChain JS, is in `npm test`.)
 *
 * The pinned packages live in a venv outside the clone, made on first use:
 * ~/.cache/mas/frameworks-<version> (FRAMEWORKS_VENV to put it elsewhere). The server starts on
 * a free port with a fresh DATA_DIR (the embedded PostgreSQL and Temporal dev server with it)
 * and prints the demo key of a funded account, which the cases use with the demo model mas/echo.
 * Arguments name cases to run only those (`npm run test:frameworks -- langchain_bind_tools`).
 */
// openai 2.x: langchain-openai and LiteLLM do not take the 3.x line yet.
const PINS = [
  'openai==2.54.0',
  'langchain-core==1.8.3',
  'langchain-openai==1.7.4',
  'litellm==1.110.2',
  'llama-index-core==0.14.25',
  'llama-index-llms-openai==0.8.3',
  'llama-index-llms-openai-like==0.8.1',
];
/** The venv's name carries a digest of the pins: a new pin makes a new venv. */
const VERSION = `py-${spawnSync('sha256sum', { input: PINS.join('\n'), encoding: 'utf8' }).stdout.slice(0, 10)}`;
const venv = process.env.FRAMEWORKS_VENV || defaultVenvDir('frameworks', VERSION);
const say = sayer('frameworks');

async function main(): Promise<number> {
  const dir = await ensurePythonVenv({
    dir: venv,
    name: 'frameworks',
    version: VERSION,
    why: 'the framework matrix (npm run test:frameworks) runs the Python frameworks against the server',
    installs: [PINS],
    out: say,
    works: (d) => spawnSync(path.join(d, 'bin', 'python'), ['-c', 'import openai, langchain_openai, litellm, llama_index.llms.openai_like'], { encoding: 'utf8' }).status === 0,
  });

  const work = await fs.mkdtemp(path.join(os.tmpdir(), 'mas-frameworks-'));
  const dataDir = path.join(work, 'data');
  const logFile = path.join(work, 'server.log');
  let server: Server | undefined;
  killLeftoversOnExit(work, () => server);
  try {
    say(`starting the server (DATA_DIR ${dataDir})`);
    server = await startServer(say, work, dataDir, logFile);
    say(`server up at ${server.base}; running the Python cases`);
    const code = await new Promise<number>((resolve) => {
      const child = spawn(path.join(dir, 'bin', 'python'), [path.join(root, 'scripts', 'frameworks', 'check_frameworks.py'), ...process.argv.slice(2)], {
        cwd: work,
        stdio: ['ignore', 'inherit', 'inherit'],
        // LiteLLM fetches its model-cost map from the network unless told to use its local copy.
        env: { ...process.env, PYTHONUNBUFFERED: '1', LITELLM_LOCAL_MODEL_COST_MAP: 'True', MAS_BASE_URL: `${server!.base}/api/v1`, MAS_KEY: server!.key, MAS_MODEL: 'mas/echo' },
      });
      child.on('error', (err) => {
        say(`python could not run: ${err.message}`);
        resolve(1);
      });
      child.on('exit', (c, signal) => resolve(c ?? (signal ? 128 : 1)));
    });
    if (code !== 0) await printServerErrors(say, logFile);
    say(code === 0 ? 'every framework case passed' : `framework cases failed (exit ${code})`);
    return code;
  } finally {
    if (server) await stopServer(say, server, work);
    await fs.rm(work, { recursive: true, force: true }).catch(() => undefined);
  }
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    say(`failed: ${(err as Error).message}`);
    process.exit(1);
  },
);
