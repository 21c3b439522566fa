#!/usr/bin/env node
// `ralph` on PATH after `npm install -g @ralph-loop/ralph`: runs the prebuilt binary that npm
// installed from this platform's optional dependency (@ralph-loop/ralph-<os>-<cpu>). The
// Claude Code plugin never goes through this file: its launcher runs the binary directly.
// The launcher of the Claude Code plugin accepts a `ralph` found on PATH only when its bytes
// hold this project's mark (crates/ralph/src/main.rs, BINARY_ID): ralph-loop-binary-id:3f7c1e92b04d
'use strict';
const { spawnSync } = require('child_process');

const exe = process.platform === 'win32' ? 'ralph.exe' : 'ralph';
const pkg = `@ralph-loop/ralph-${process.platform}-${process.arch}`;
let binary;
try {
  binary = require.resolve(`${pkg}/bin/${exe}`);
} catch {
  console.error(
    `ralph: the package ${pkg} is not installed, so there is no binary for this platform ` +
      `(${process.platform} ${process.arch}). Reinstall without --omit=optional, ` +
      'or build it: cargo install --locked ralph-loop'
  );
  process.exit(1);
}
const run = spawnSync(binary, process.argv.slice(2), { stdio: 'inherit' });
if (run.error) {
  console.error(`ralph: could not run ${binary}: ${run.error.message}`);
  process.exit(1);
}
if (run.signal) {
  process.kill(process.pid, run.signal);
}
process.exit(run.status === null ? 1 : run.status);
