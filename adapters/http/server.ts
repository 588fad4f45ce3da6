import type { Server } from 'node:http';
import type { Express } from 'express';
import type { Logger } from 'pino';

export interface ListeningServer {
  server: Server;
  port: number;
  /** Stops accepting, lets requests in flight finish up to the timeout, then closes their connections. */
  drain(): Promise<void>;
}

/** Listens, and drains on shutdown: idle connections close at once, busy ones when their request ends or the timeout passes. */
export async function listen(app: Express, opts: { port: number; host: string; shutdownTimeoutSeconds: number; logger: Logger }): Promise<ListeningServer> {
  const server = await new Promise<Server>((resolve, reject) => {
    const s = app.listen(opts.port, opts.host, (err?: Error) => (err ? reject(err) : resolve(s)));
  });
  server.keepAliveTimeout = 65_000; // longer than common load balancer idle timeouts
  return {
    server,
    port: (server.address() as { port: number }).port,
    async drain() {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeIdleConnections();
      // A kept-alive connection whose request (a stream) ends later stays open, idle, until its
      // keep-alive timeout: close such connections as they become idle.
      const idle = setInterval(() => server.closeIdleConnections(), 200);
      const timeout = setTimeout(() => {
        opts.logger.warn('requests still in flight after the shutdown timeout: closing their connections');
        server.closeAllConnections();
      }, opts.shutdownTimeoutSeconds * 1000);
      await closed;
      clearInterval(idle);
      clearTimeout(timeout);
    },
  };
}
