import fc from 'fast-check';

/**
 * A setup file of the mutation runs (vitest.mutation.config.ts, scripts/sql-mutation.ts): a
 * property that fails ends there, without shrinking the counterexample. A mutant needs only to
 * be caught; shrinking a failure of the wallet model can take minutes.
 */
fc.configureGlobal({ ...fc.readConfigureGlobal(), endOnFailure: true });
