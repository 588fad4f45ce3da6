import type { CheckoutReturn } from '../../core/ports.ts';

/**
 * Where a payment page (Stripe Checkout) sends the customer back: the account overview, which
 * ignores what it does not know of the query. `{CHECKOUT_SESSION_ID}` is Stripe's placeholder,
 * filled in by Stripe. The redirect credits nothing: only the verified webhook does.
 */
export function paymentReturnUrls(publicBaseUrl: string): CheckoutReturn {
  return {
    successUrl: `${publicBaseUrl}/account?checkout=success&session_id={CHECKOUT_SESSION_ID}`,
    cancelUrl: `${publicBaseUrl}/account?checkout=canceled`,
  };
}
