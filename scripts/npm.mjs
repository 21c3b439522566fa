// Writes ralph's npm packages from one table, so the release workflow, scripts/pack-npm.sh
// and the plugin's lockfile agree on names and versions.
//
//   node scripts/npm.mjs platform <rust-target> <binary> <out-dir>   one platform package
//   node scripts/npm.mjs main <out-dir>                              @ralph-loop/ralph
//   node scripts/npm.mjs plugin [--check]                            plugin/package.json + lock
//
// The version is the workspace version in Cargo.toml.
import { readFileSync, writeFileSync, mkdirSync, copyFileSync, chmodSync, cpSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const repo = join(dirname(fileURLToPath(import.meta.url)), '..');
const SCOPE = '@ralph-loop';
const MAIN = `${SCOPE}/ralph`;
const LICENSE = 'MIT OR Apache-2.0';
const REPOSITORY = 'https://github.com/ralph-loop/ralph';

// Rust target -> npm platform. Linux binaries are static (musl): one package serves glibc
// and musl systems alike.
export const PLATFORMS = [
  { target: 'x86_64-unknown-linux-musl', os: 'linux', cpu: 'x64' },
  { target: 'aarch64-unknown-linux-musl', os: 'linux', cpu: 'arm64' },
  { target: 'x86_64-apple-darwin', os: 'darwin', cpu: 'x64' },
  { target: 'aarch64-apple-darwin', os: 'darwin', cpu: 'arm64' },
  { target: 'x86_64-pc-windows-msvc', os: 'win32', cpu: 'x64' },
];
const packageName = (p) => `${SCOPE}/ralph-${p.os}-${p.cpu}`;
const exe = (p) => (p.os === 'win32' ? 'ralph.exe' : 'ralph');

function version() {
  const cargo = readFileSync(join(repo, 'Cargo.toml'), 'utf8');
  const section = cargo.split('[workspace.package]')[1] ?? '';
  const found = section.match(/^version\s*=\s*"([^"]+)"/m);
  if (!found) throw new Error('no version in [workspace.package] of Cargo.toml');
  return found[1];
}

const json = (value) => JSON.stringify(value, null, 2) + '\n';

function platformPackage(target, binary, out) {
  const p = PLATFORMS.find((x) => x.target === target);
  if (!p) throw new Error(`unknown target ${target}; known: ${PLATFORMS.map((x) => x.target).join(', ')}`);
  const dir = join(out, `ralph-${p.os}-${p.cpu}`);
  mkdirSync(join(dir, 'bin'), { recursive: true });
  copyFileSync(binary, join(dir, 'bin', exe(p)));
  chmodSync(join(dir, 'bin', exe(p)), 0o755);
  writeFileSync(
    join(dir, 'package.json'),
    json({
      name: packageName(p),
      version: version(),
      description: `The ralph binary for ${p.os} ${p.cpu} (installed by ${MAIN}; not meant to be installed directly)`,
      license: LICENSE,
      repository: { type: 'git', url: `git+${REPOSITORY}.git` },
      os: [p.os],
      cpu: [p.cpu],
      files: [`bin/${exe(p)}`],
      preferUnplugged: true,
    })
  );
  writeFileSync(join(dir, 'README.md'), `# ${packageName(p)}\n\nThe prebuilt \`ralph\` binary for ${p.os} ${p.cpu}. Install \`${MAIN}\` instead: it picks this package on this platform.\n`);
  console.log(dir);
}

function mainManifest() {
  const v = version();
  return {
    name: MAIN,
    version: v,
    description: 'ralph: keeps a coding agent working on one task until it is really done (Claude Code Stop hook and loop CLI). Prebuilt binaries; no Rust needed.',
    license: LICENSE,
    repository: { type: 'git', url: `git+${REPOSITORY}.git` },
    homepage: REPOSITORY,
    keywords: ['claude-code', 'ralph', 'ralph-loop', 'agent', 'stop-hook'],
    bin: { ralph: 'bin/ralph.js' },
    files: ['bin/ralph.js', 'README.md'],
    engines: { node: '>=16' },
    optionalDependencies: Object.fromEntries(PLATFORMS.map((p) => [packageName(p), v])),
  };
}

function mainPackage(out) {
  const dir = join(out, 'ralph');
  mkdirSync(join(dir, 'bin'), { recursive: true });
  cpSync(join(repo, 'npm/ralph/bin/ralph.js'), join(dir, 'bin/ralph.js'));
  chmodSync(join(dir, 'bin/ralph.js'), 0o755);
  cpSync(join(repo, 'npm/ralph/README.md'), join(dir, 'README.md'));
  writeFileSync(join(dir, 'package.json'), json(mainManifest()));
  console.log(dir);
}

// The plugin depends on the main package only; its lockfile lists every platform package
// with its os/cpu, so `npm ci --ignore-scripts` (run by `claude plugin install`) fetches
// exactly this machine's binary. Versions are pinned; no `resolved` URL or `integrity` is
// recorded, so the same lockfile installs from any registry npm is pointed at (the release's
// or a local one in tests/install.rs), and a version once published on npm cannot change.
function pluginFiles() {
  const v = version();
  const main = mainManifest();
  const root = {
    name: 'ralph-claude-plugin',
    version: v,
    private: true,
    description: 'The ralph Claude Code plugin. Its only dependency is the prebuilt ralph binary for this platform, which Claude Code installs with npm ci when it installs the plugin.',
    license: LICENSE,
    dependencies: { [MAIN]: v },
  };
  const packages = {
    '': { name: root.name, version: v, license: LICENSE, dependencies: root.dependencies },
    [`node_modules/${MAIN}`]: {
      version: v,
      license: LICENSE,
      bin: main.bin,
      engines: main.engines,
      optionalDependencies: main.optionalDependencies,
    },
  };
  for (const p of PLATFORMS) {
    packages[`node_modules/${packageName(p)}`] = {
      version: v,
      cpu: [p.cpu],
      license: LICENSE,
      optional: true,
      os: [p.os],
    };
  }
  const lock = { name: root.name, version: v, lockfileVersion: 3, requires: true, packages };
  return { 'plugin/package.json': json(root), 'plugin/package-lock.json': json(lock) };
}

const [command, ...args] = process.argv.slice(2);
if (command === 'platform' && args.length === 3) {
  platformPackage(...args);
} else if (command === 'main' && args.length === 1) {
  mainPackage(args[0]);
} else if (command === 'plugin') {
  let stale = false;
  for (const [file, text] of Object.entries(pluginFiles())) {
    const path = join(repo, file);
    let current = '';
    try {
      current = readFileSync(path, 'utf8');
    } catch {}
    if (current === text) continue;
    if (args[0] === '--check') {
      console.error(`${file} is out of date: run node scripts/npm.mjs plugin`);
      stale = true;
    } else {
      writeFileSync(path, text);
      console.log(`wrote ${file}`);
    }
  }
  process.exit(stale ? 1 : 0);
} else {
  console.error('usage: node scripts/npm.mjs platform <rust-target> <binary> <out-dir> | main <out-dir> | plugin [--check]');
  process.exit(2);
}
