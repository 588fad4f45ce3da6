import { describe, expect, it } from 'vitest';
import { ConfigError, loadEnv } from '../../config/env.ts';

describe('configuration', () => {
  it('has working defaults', () => {
    const env = loadEnv({});
    expect(env.PORT).toBe(8080);
    expect(env.PUBLIC_BASE_URL).toBe('http://localhost:8080');
    expect(env.DATABASE_URL).toBeUndefined();
    expect(env.DEMO_COINS).toBe(1000_000_000n);
    expect(env.DATA_DIR).toMatch(/\.data$/);
  });

  it('derives the public base URL from the port, and trims a trailing slash', () => {
    expect(loadEnv({ PORT: '9000' }).PUBLIC_BASE_URL).toBe('http://localhost:9000');
    expect(loadEnv({ PUBLIC_BASE_URL: 'https://api.example.com/' }).PUBLIC_BASE_URL).toBe('https://api.example.com');
  });

  it('stops on a bad value with one line naming the variable', () => {
    const cases: Record<string, string> = {
      PORT: 'eighty',
      DATABASE_URL: 'mysql://x',
      PUBLIC_BASE_URL: 'ftp://x',
      LOG_LEVEL: 'loud',
      DEMO_COINS: '-5',
      HOLD_TTL_SECONDS: '0',
    };
    for (const [name, value] of Object.entries(cases)) {
      let error: unknown;
      try {
        loadEnv({ [name]: value });
      } catch (err) {
        error = err;
      }
      expect(error).toBeInstanceOf(ConfigError);
      const message = (error as Error).message;
      expect(message).toContain(name);
      expect(message.split('\n')).toHaveLength(1);
    }
  });

  it('TRUST_PROXY trusts a number of proxies, never every hop (a client could name its own address)', () => {
    expect(loadEnv({}).TRUST_PROXY).toBe(false);
    expect(loadEnv({ TRUST_PROXY: 'false' }).TRUST_PROXY).toBe(false);
    expect(loadEnv({ TRUST_PROXY: 'true' }).TRUST_PROXY).toBe(1);
    expect(loadEnv({ TRUST_PROXY: '2' }).TRUST_PROXY).toBe(2);
    for (const bad of ['yes', '0', '10', '1.5']) expect(() => loadEnv({ TRUST_PROXY: bad })).toThrow(/TRUST_PROXY: must be true, false or a number of proxies/);
  });

  it('needs a bucket for the S3 storage driver', () => {
    expect(() => loadEnv({ STORAGE_DRIVER: 's3' })).toThrow(/S3_BUCKET: is required when STORAGE_DRIVER=s3/);
    expect(loadEnv({ STORAGE_DRIVER: 's3', S3_BUCKET: 'b', S3_FORCE_PATH_STYLE: 'true' })).toMatchObject({ S3_BUCKET: 'b', S3_FORCE_PATH_STYLE: true });
  });

  it('never echoes a database password in the error', () => {
    expect(() => loadEnv({ DATABASE_URL: 'postgres://u:hunter2@h/db', DATABASE_POOL_MAX: 'x' })).toThrow(/DATABASE_POOL_MAX/);
    try {
      loadEnv({ DATABASE_URL: 'postgres://u:hunter2@h/db', METRICS_TOKEN: 'abc', PORT: '-1' });
    } catch (err) {
      expect((err as Error).message).not.toContain('hunter2');
    }
  });

  it('takes an SMTP server as smtp:// or smtps://, never echoing its password, and a From with a default', () => {
    expect(loadEnv({}).SMTP_URL).toBeUndefined();
    expect(loadEnv({}).MAIL_FROM).toBe('Model Access Service <no-reply@localhost>');
    expect(loadEnv({ SMTP_URL: 'smtps://u:p@mail.example:465', MAIL_FROM: 'Us <us@example.com>' })).toMatchObject({ SMTP_URL: 'smtps://u:p@mail.example:465', MAIL_FROM: 'Us <us@example.com>' });
    expect(() => loadEnv({ SMTP_URL: 'http://u:hunter2@mail.example' })).toThrow(/^Invalid configuration: SMTP_URL: must be an smtp:\/\/ or smtps:\/\/ URL/);
    try {
      loadEnv({ SMTP_URL: 'http://u:hunter2@mail.example' });
    } catch (err) {
      expect((err as Error).message).not.toContain('hunter2');
    }
  });
});
