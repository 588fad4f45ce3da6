/**
 * graphql-js, as Pothos and Yoga load it. graphql 16 ships CommonJS (`main`) and ESM
 * (`module`) copies; Node loads the CommonJS one for every importer, but a bundler-style
 * resolver (Vite, under vitest) picks the ESM copy for our own files, and graphql refuses
 * types and errors from "another realm". Naming the file pins one copy everywhere.
 */
export { graphql, GraphQLError, Kind, printSchema, valueFromASTUntyped } from 'graphql/index.js';
export type { FragmentDefinitionNode, SelectionSetNode, ValidationRule } from 'graphql/index.js';
