import { Migration } from '@mikro-orm/migrations';

/**
 * Idempotency keys store the use case's result, not an HTTP answer: the status is each
 * adapter's business (REST answers a replayed job with the same status as the first time).
 */
export class Migration20261123010000_idempotency_results extends Migration {
  override async up(): Promise<void> {
    this.addSql('alter table idempotency_keys drop column response_status;');
  }

  override async down(): Promise<void> {
    this.addSql('alter table idempotency_keys add column response_status int not null default 202;');
  }
}
