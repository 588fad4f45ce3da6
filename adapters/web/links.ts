import type { AccountLinks } from '../../core/accounts/mails.ts';
import type { PaymentsConfig } from '../../core/context.ts';

/**
 * Where a payment page (Stripe Checkout) and the customer portal send the customer back: the
 * Billing page (/account/billing). `{CHECKOUT_SESSION_ID}` is Stripe's placeholder, filled in by Stripe. A
 * top-up comes back to its success page, which waits for the webhook's credit: the redirect
 * itself credits nothing.
 */
export function paymentReturnUrls(publicBaseUrl: string): PaymentsConfig['returnUrls'] {
  return {
    successUrl: `${publicBaseUrl}/account/credits/success?session_id={CHECKOUT_SESSION_ID}`,
    cancelUrl: `${publicBaseUrl}/account/billing?checkout=canceled`,
    subscriptionSuccessUrl: `${publicBaseUrl}/account/billing?checkout=subscribed`,
    portalReturnUrl: `${publicBaseUrl}/account/billing`,
  };
}

/** Where the links of the service's mails lead: the account pages (adapters/web/web.ts). */
export function accountLinks(publicBaseUrl: string): AccountLinks {
  return {
    verifyEmail: (token) => `${publicBaseUrl}/signup/verify?${new URLSearchParams({ token }).toString()}`,
    resetPassword: (token) => `${publicBaseUrl}/password/reset?${new URLSearchParams({ token }).toString()}`,
    invitation: (token) => `${publicBaseUrl}/invitations/${encodeURIComponent(token)}`,
    signIn: `${publicBaseUrl}/login`,
    forgotPassword: `${publicBaseUrl}/password/forgot`,
    account: `${publicBaseUrl}/account`,
    // The "Add credits" section of the account pages (adapters/web/pages/billing.ts).
    addCredits: `${publicBaseUrl}/account/billing#add-credits`,
  };
}
