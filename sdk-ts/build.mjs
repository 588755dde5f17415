// Builds the package: ESM into dist/esm, CommonJS into dist/cjs (marked
// "type": "commonjs" so Node and TypeScript read its .js and .d.ts as
// CommonJS). `npm pack` runs this through "prepack".
import { spawnSync } from "node:child_process";
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const tsc = createRequire(import.meta.url).resolve("typescript/bin/tsc");

rmSync(join(here, "dist"), { recursive: true, force: true });
for (const project of ["tsconfig.build.json", "tsconfig.build-cjs.json"]) {
  const r = spawnSync(process.execPath, [tsc, "-p", join(here, project)], { stdio: "inherit" });
  if (r.status !== 0) process.exit(r.status ?? 1);
}
mkdirSync(join(here, "dist", "cjs"), { recursive: true });
writeFileSync(join(here, "dist", "cjs", "package.json"), JSON.stringify({ type: "commonjs" }) + "\n");
