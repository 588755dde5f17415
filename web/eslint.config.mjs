// ESLint (flat config) for the live view: typescript-eslint's strict,
// type-checked rules over the page's TypeScript; the recommended rules over
// its JavaScript (the tests and build.mjs, which tsc checks with checkJs).
import js from "@eslint/js";
import { defineConfig } from "eslint/config";
import globals from "globals";
import tseslint from "typescript-eslint";

export default defineConfig(
  // src/gen.ts re-exports sdk-ts's generated code, linted there.
  { ignores: ["node_modules/", "artifacts/"] },
  js.configs.recommended,
  tseslint.configs.strictTypeChecked,
  {
    languageOptions: {
      parserOptions: { project: ["./tsconfig.json"], tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      "@typescript-eslint/no-floating-promises": [
        "error",
        { allowForKnownSafeCalls: [{ from: "package", package: "node:test", name: ["describe", "it", "test", "before", "after", "beforeEach", "afterEach"] }] },
      ],
      "@typescript-eslint/restrict-template-expressions": ["error", { allowNumber: true, allowBoolean: true }],
    },
  },
  { files: ["src/**/*.ts"], languageOptions: { globals: globals.browser } },
  {
    files: ["**/*.mjs"],
    extends: [tseslint.configs.disableTypeChecked],
    languageOptions: { globals: globals.node },
  },
);
