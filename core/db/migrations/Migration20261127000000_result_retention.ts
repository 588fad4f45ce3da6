import { Migration } from '@mikro-orm/migrations';

/**
 * Results are deleted by a Temporal Schedule once their retention passes (no longer by a timer
 * in each job's workflow): the schedule asks for results past `output_expires_at` and not yet
 * deleted, in batches. This partial index holds only those rows, so it stays small.
 */
export class Migration20261127000000_result_retention extends Migration {
  override async up(): Promise<void> {
    this.addSql(`create index generations_results_kept on generations (output_expires_at)
      where status = 'succeeded' and output is not null and output->'deleted' is null;`);
  }

  override async down(): Promise<void> {
    this.addSql('drop index if exists generations_results_kept;');
  }
}
