import type { Request, Response } from 'express';
import type { GraphQLSchema, ValidationRule } from 'graphql';

/**
 * graphql-yoga, typed here for the few members this adapter uses. Its own typings reference
 * TypeScript's DOM library (through @whatwg-node/fetch), and one such reference retypes Blob,
 * fetch and BodyInit for the whole program, a Node service's included; a specifier TypeScript
 * does not follow keeps them out. The module itself is the real graphql-yoga.
 */
export interface YogaPlugin {
  onValidate?: (payload: { addValidationRule: (rule: ValidationRule) => void }) => void;
}

export interface YogaOptions<Context> {
  schema: GraphQLSchema;
  graphqlEndpoint: string;
  graphiql: false;
  landingPage: false;
  logging: false;
  batching: false;
  maskedErrors: { maskError: (error: unknown, message: string) => Error };
  plugins: YogaPlugin[];
  context: (server: { req: Request; res: Response }) => Context;
}

export type YogaHandler = (req: Request, res: Response) => Promise<void>;

const specifier: string = 'graphql-yoga';
const yoga = (await import(specifier)) as { createYoga: <Context>(options: YogaOptions<Context>) => YogaHandler };

export const createYoga = yoga.createYoga;
