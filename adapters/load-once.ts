/**
 * A module (or anything) loaded on its first use and kept: every caller after the first gets the
 * same promise. A load that fails is forgotten, so that the next use tries again. The lazy
 * adapters (Stripe, the Anthropic mapping, nodemailer) load their libraries through it.
 */
export function loadOnce<T>(load: () => Promise<T>): () => Promise<T> {
  let loading: Promise<T> | undefined;
  return () =>
    (loading ??= load().catch((err: unknown) => {
      loading = undefined;
      throw err;
    }));
}
