import { Migration } from '@mikro-orm/migrations';

/**
 * Tracing (docs/observability.md): `generations.trace_id`, the OpenTelemetry trace id of the
 * request that submitted the job (32 hex digits), kept when tracing was on at the time, so an
 * operator finds the job's one trace (submit, workflow, activities, upstream calls, the settle
 * or refund) from the admin API. Null for jobs submitted with tracing off, or sampled out.
 */
export class Migration20261206000000_trace_id extends Migration {
  override async up(): Promise<void> {
    this.addSql(`alter table generations add column trace_id text check (trace_id ~ '^[0-9a-f]{32}$');`);
  }

  override async down(): Promise<void> {
    this.addSql(`alter table generations drop column trace_id;`);
  }
}
