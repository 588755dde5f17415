// ESLint (flat config) for the TypeScript SDK: typescript-eslint's strict,
// type-checked rules. (Import cycles, type imports included, are madge's:
// npm run lint.)
import js from "@eslint/js";
import { defineConfig } from "eslint/config";
import globals from "globals";
import tseslint from "typescript-eslint";

export default defineConfig(
  // test/types holds typing fixtures: tsc checks them against the build (npm run lint).
  { ignores: ["dist/", "build-test/", "build-conformance-runner/", "src/gen/", "test/types/"] },
  js.configs.recommended,
  tseslint.configs.strictTypeChecked,
  {
    languageOptions: {
      parserOptions: {
        project: ["./tsconfig.test.json", "./conformance-runner/tsconfig.json"],
        tsconfigRootDir: import.meta.dirname,
      },
    },
    rules: {
      // node:test's describe/it/before/after return promises the runner awaits.
      "@typescript-eslint/no-floating-promises": [
        "error",
        { allowForKnownSafeCalls: [{ from: "package", package: "node:test", name: ["describe", "it", "test", "before", "after", "beforeEach", "afterEach"] }] },
      ],
      // Numbers and bigints (fencing tokens) read well in messages.
      "@typescript-eslint/restrict-template-expressions": ["error", { allowNumber: true, allowBoolean: true }],
    },
  },
  {
    // Tests assert at run time what the types already promise (an error's
    // code), guard hooks whose setup may have failed (client?.close()), and
    // read fixtures they just made (addr!).
    files: ["test/**/*.ts"],
    rules: {
      "@typescript-eslint/no-unnecessary-condition": "off",
      "@typescript-eslint/no-non-null-assertion": "off",
    },
  },
  {
    files: ["**/*.mjs", "**/*.cjs"],
    extends: [tseslint.configs.disableTypeChecked],
    languageOptions: { globals: globals.node },
  },
);
