import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import { firstUseBuild, masCacheDir, which } from '../../adapters/embedded/first-use-build.ts';
import { createLogger } from '../../config/logger.ts';
import { TestWorkflowEnvironment } from '@temporalio/testing';
import { SEARCH_ATTRIBUTES } from '../../workflows/shared.ts';

const execFileAsync = promisify(execFile);

/**
 * Temporal's time-skipping test server (the Java SDK's `io.temporal:temporal-test-server`), for
 * `TestWorkflowEnvironment.createTimeSkipping` of @temporalio/testing: workflow timers, deadlines
 * and retry backoff then take no wall-clock time. The SDK would download a native build of it at
 * run time, which this machine cannot; the same server is on Maven Central, so it is fetched
 * once per machine with Maven into ~/.cache/mas/temporal-test-server-<version>/ (its jars and a
 * `temporal-test-server` script that runs them with the machine's Java), one process at a time
 * (adapters/embedded/first-use-build.ts). `TEMPORAL_TEST_SERVER` names another executable.
 */
export const TEST_SERVER_VERSION = '1.32.1';
const ARTIFACT = `io.temporal:temporal-test-server:${TEST_SERVER_VERSION}`;

export const testServerCacheDir = () => path.join(masCacheDir(), `temporal-test-server-${TEST_SERVER_VERSION}`);

let ensured: Promise<string> | undefined;

/** The path of an executable that runs the test server: `<it> <port>` serves on that port. */
export function ensureTemporalTestServer(): Promise<string> {
  ensured ??= ensure().catch((err: unknown) => {
    ensured = undefined;
    throw err;
  });
  return ensured;
}

async function ensure(): Promise<string> {
  if (process.env.TEMPORAL_TEST_SERVER) return process.env.TEMPORAL_TEST_SERVER;
  const dir = testServerCacheDir();
  const script = path.join(dir, 'temporal-test-server');
  const [mvn, java] = await Promise.all([which('mvn'), which('java')]);
  await firstUseBuild({
    logger: createLogger('warn', process.stderr),
    name: "Temporal's time-skipping test server",
    how: `${TEST_SERVER_VERSION} with Maven (a minute)`,
    why: 'the workflow tests skip time through it; set TEMPORAL_TEST_SERVER to an executable of it to skip this',
    cacheDir: dir,
    isReady: () => existsSync(script),
    howToFix: mvn && java ? `run \`mvn dependency:copy-dependencies\` on a pom naming ${ARTIFACT} by hand to see the whole error.` : 'install a Java runtime (17 or later) and Maven, then start again.',
    build: async () => {
      if (!mvn || !java) throw new Error(`${!java ? 'Java' : 'Maven'} is not installed`);
      await fs.mkdir(path.dirname(dir), { recursive: true });
      const staging = await fs.mkdtemp(path.join(path.dirname(dir), '.staging-test-server-'));
      try {
        const [group, artifact, version] = ARTIFACT.split(':');
        await fs.writeFile(
          path.join(staging, 'pom.xml'),
          `<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion><groupId>mas.test</groupId><artifactId>temporal-test-server-fetch</artifactId><version>1</version>` +
            `<dependencies><dependency><groupId>${group}</groupId><artifactId>${artifact}</artifactId><version>${version}</version></dependency></dependencies></project>\n`,
        );
        await execFileAsync(mvn, ['-q', '-B', 'dependency:copy-dependencies', '-DoutputDirectory=lib'], { cwd: staging, maxBuffer: 64 * 1024 * 1024 });
        await fs.rm(path.join(staging, 'pom.xml'));
        // The SDK runs `<executable> <port> [extra args]`; the server then serves on that port.
        await fs.writeFile(
          path.join(staging, 'temporal-test-server'),
          `#!/bin/sh\n# ${ARTIFACT}, fetched by test/support/temporal-test-server.ts\nexec "${java}" -Xss4m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -cp "${path.join(dir, 'lib')}/*" io.temporal.testserver.TestServer "$@"\n`,
          { mode: 0o755 },
        );
        await fs.rm(dir, { recursive: true, force: true });
        await fs.rename(staging, dir);
      } finally {
        await fs.rm(staging, { recursive: true, force: true });
      }
    },
  });
  return script;
}

/**
 * Temporal's time-skipping test environment on the test server above: its clock jumps over
 * workflow timers and server-side retry backoff whenever the test waits on a workflow's result
 * through `env.client` (or calls `env.sleep`). The service's search attributes are registered
 * first, as a cluster's namespace has them (docs/operations.md).
 *
 * What it cannot skip: local activities' retries and their schedule-to-close, which the worker
 * times on the real clock (the job workflow's steps: test/integration/generation-workflow-failures.test.ts
 * says why those tests stay on the dev server), and waits inside an activity (an SDK's own retries).
 */
/** temporal.api.enums.v1.IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD: every attribute of the service's is a keyword. */
const INDEXED_VALUE_TYPE_KEYWORD = 2;

export async function startTimeSkipping(): Promise<TestWorkflowEnvironment> {
  const env = await TestWorkflowEnvironment.createTimeSkipping({ server: { executable: { type: 'existing-path', path: await ensureTemporalTestServer() } } });
  await env.connection.operatorService.addSearchAttributes({
    namespace: env.namespace ?? 'default',
    searchAttributes: Object.fromEntries(Object.values(SEARCH_ATTRIBUTES).map((k) => [k.name, INDEXED_VALUE_TYPE_KEYWORD])),
  });
  return env;
}
