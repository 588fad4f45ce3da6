import { Migration } from '@mikro-orm/migrations';

/**
 * The Temporal run id of each job's workflow, recorded when the workflow starts, so that the
 * admin API names the exact run (workflow id = job id) an operator opens in the Temporal UI.
 */
export class Migration20261126040000_job_run_id extends Migration {
  override async up(): Promise<void> {
    this.addSql('alter table generations add column workflow_run_id text;');
  }

  override async down(): Promise<void> {
    this.addSql('alter table generations drop column if exists workflow_run_id;');
  }
}
