// Builds the live view into server/internal/ui/dist, which the holdfast
// binary embeds (//go:embed all:dist). The output is not committed; only
// dist/.gitkeep is, so `go build` works before this runs (the server then
// serves a "UI not built" page).
//
// Usage: node build.mjs [--dev]   (--dev: no minification, inline sourcemap)
import * as esbuild from "esbuild";
import { copyFile, mkdir, readdir, rm } from "node:fs/promises";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const out = join(here, "..", "server", "internal", "ui", "dist");
const dev = process.argv.includes("--dev");

// The generated client lives in sdk-ts/src/gen; its imports of the runtime
// packages must resolve to web/node_modules (not sdk-ts/node_modules, which
// may be absent or a second copy), so the bundle has one runtime.
/** @type {import("esbuild").Plugin} */
const oneRuntime = {
  name: "one-runtime",
  setup(build) {
    build.onResolve({ filter: /^@(bufbuild|connectrpc)\// }, (args) => {
      if (args.resolveDir === here) return undefined; // already resolving from web/
      return build.resolve(args.path, { kind: args.kind, resolveDir: here });
    });
  },
};

await mkdir(out, { recursive: true });
for (const name of await readdir(out)) {
  if (name !== ".gitkeep") await rm(join(out, name), { recursive: true, force: true });
}

const started = Date.now();
const result = await esbuild.build({
  entryPoints: [
    { in: join(here, "src", "main.ts"), out: "app" },
    { in: join(here, "src", "style.css"), out: "app" },
  ],
  outdir: out,
  bundle: true,
  format: "esm",
  platform: "browser",
  target: ["es2022"],
  minify: !dev,
  sourcemap: dev ? "inline" : false,
  legalComments: "none",
  logLevel: "warning",
  plugins: [oneRuntime],
  metafile: true,
});
// Guard the one-runtime promise above.
const foreign = Object.keys(result.metafile.inputs).filter((p) => p.includes("sdk-ts/node_modules"));
if (foreign.length > 0) throw new Error(`web: bundle pulled packages from sdk-ts/node_modules: ${foreign.join(", ")}`);
await copyFile(join(here, "src", "index.html"), join(out, "index.html"));
console.log(`web: built ${out} in ${Date.now() - started}ms`);
