//! What a loop with a gate protects by default (issue 45): the usual test
//! layouts and test-runner configuration of each ecosystem found in the
//! project, so that an agent cannot make the gate pass by deselecting the
//! failing test (a root `conftest.py`, `pytest.ini`, `pyproject.toml`'s
//! `addopts`, `package.json`'s test script). Pure: the caller says which
//! files are at the project's root, and gives a manifest's two texts.
//!
//! A manifest (`package.json`, `pyproject.toml`, `Cargo.toml`) holds both
//! the test configuration and the dependencies an honest agent adds: it is
//! compared without its dependency lists ([`dependency_only_change`]), so
//! `npm install x`, `uv add x` or `cargo add x` is no violation while a
//! changed `scripts.test`, `[tool.pytest.ini_options]` or `[lib] test =
//! false` is.

use serde_json::Value;

/// One ecosystem: the files at the root that reveal it, and what it protects.
pub struct Ecosystem {
    pub name: &'static str,
    /// Any of these at the project's root reveals the ecosystem.
    pub markers: &'static [&'static str],
    pub globs: &'static [&'static str],
}

/// The ecosystems ralph detects, and their default protections.
pub(crate) const ECOSYSTEMS: &[Ecosystem] = &[
    Ecosystem {
        name: "Python",
        markers: &[
            "pyproject.toml",
            "setup.py",
            "setup.cfg",
            "requirements.txt",
            "Pipfile",
            "tox.ini",
            "pytest.ini",
        ],
        globs: &[
            "tests/**",
            "**/test_*.py",
            "**/*_test.py",
            "**/conftest.py",
            "pytest.ini",
            "pyproject.toml",
            "setup.cfg",
            "tox.ini",
            "noxfile.py",
            "**/sitecustomize.py",
            "**/usercustomize.py",
        ],
    },
    Ecosystem {
        name: "JavaScript/TypeScript",
        markers: &["package.json"],
        globs: &[
            "test/**",
            "tests/**",
            "**/__tests__/**",
            "**/*.test.*",
            "**/*.spec.*",
            "package.json",
            "jest.config.*",
            "vitest.config.*",
            ".mocharc*",
            "babel.config.*",
            "tsconfig*.json",
        ],
    },
    Ecosystem {
        name: "Rust",
        markers: &["Cargo.toml"],
        globs: &[
            "tests/**",
            "Cargo.toml",
            "build.rs",
            ".cargo/config*",
            "rust-toolchain*",
        ],
    },
    Ecosystem {
        name: "Go",
        markers: &["go.mod"],
        globs: &["**/*_test.go", "**/testdata/**"],
    },
];

/// Protected for every loop with a gate, whatever the ecosystem: `.claude/`
/// is never the agent's to change (its settings and hooks steer the
/// client; ralph's own bookkeeping there is never compared:
/// `ralph_fs::tree_diff`).
pub(crate) const ALWAYS: &[&str] = &[".claude/**"];

/// The manifests compared without their dependency lists.
pub const MANIFESTS: &[&str] = &["package.json", "pyproject.toml", "Cargo.toml"];

/// The ecosystems whose markers `at_root` finds.
pub fn detect(at_root: impl Fn(&str) -> bool) -> Vec<&'static Ecosystem> {
    ECOSYSTEMS
        .iter()
        .filter(|e| e.markers.iter().any(|m| at_root(m)))
        .collect()
}

/// The default globs of `found`, once each, without those `unprotect` names
/// (a glob given to `--unprotect` removes the defaults equal to it or that it
/// matches as text: `--unprotect 'tests/**'`, `--unprotect package.json`).
pub fn globs(found: &[&Ecosystem], unprotect: &[String]) -> Vec<String> {
    let narrowing = crate::globs::Globs::new(unprotect);
    let mut out: Vec<String> = Vec::new();
    let every = found.iter().flat_map(|e| e.globs.iter()).chain(ALWAYS);
    for glob in every {
        let removed = unprotect.iter().any(|u| u == glob) || narrowing.matches(glob);
        if !removed && !out.iter().any(|g| g == glob) {
            out.push((*glob).to_owned());
        }
    }
    out
}

/// Whether `path` is a manifest compared without its dependency lists.
pub fn is_manifest(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    MANIFESTS.contains(&name)
}

/// Whether the manifest `path` changed from `before` to `after` only in its
/// dependency lists. A manifest that does not parse on either side changed
/// in more than that.
pub fn dependency_only_change(path: &str, before: &str, after: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    let strip = match name {
        "package.json" => json_without_dependencies,
        "pyproject.toml" => |t: &str| toml_without(t, PYPROJECT_DEPENDENCIES),
        "Cargo.toml" => |t: &str| toml_without(t, CARGO_DEPENDENCIES),
        _ => return false,
    };
    match (strip(before), strip(after)) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    }
}

/// `package.json` without the keys `npm install` and its peers write.
fn json_without_dependencies(text: &str) -> Option<Value> {
    let mut value: Value = serde_json::from_str(text).ok()?;
    let object = value.as_object_mut()?;
    for key in [
        "dependencies",
        "devDependencies",
        "peerDependencies",
        "peerDependenciesMeta",
        "optionalDependencies",
        "bundleDependencies",
        "bundledDependencies",
    ] {
        object.remove(key);
    }
    Some(value)
}

/// Dotted paths of dependency tables and keys; `*` is any one key.
const PYPROJECT_DEPENDENCIES: &[&str] = &[
    "project.dependencies",
    "project.optional-dependencies",
    "dependency-groups",
    "tool.poetry.dependencies",
    "tool.poetry.dev-dependencies",
    "tool.poetry.group.*.dependencies",
    "tool.uv.dev-dependencies",
    "tool.pdm.dev-dependencies",
];

const CARGO_DEPENDENCIES: &[&str] = &[
    "dependencies",
    "dev-dependencies",
    "build-dependencies",
    "target.*.dependencies",
    "target.*.dev-dependencies",
    "target.*.build-dependencies",
    "workspace.dependencies",
];

/// A TOML document as JSON (formatting and key order aside), without the
/// `dropped` paths.
fn toml_without(text: &str, dropped: &[&str]) -> Option<Value> {
    let doc: toml_edit::DocumentMut = text.parse().ok()?;
    let mut value = item_json(doc.as_item())?;
    for path in dropped {
        let parts: Vec<&str> = path.split('.').collect();
        remove_path(&mut value, &parts);
    }
    prune_empty(&mut value);
    Some(value)
}

/// Drops the tables left empty (a `[target.'cfg(unix)'.dependencies]` added
/// leaves its `target` table once the dependencies are dropped).
fn prune_empty(value: &mut Value) {
    if let Some(object) = value.as_object_mut() {
        for child in object.values_mut() {
            prune_empty(child);
        }
        object.retain(|_, child| child.as_object().is_none_or(|o| !o.is_empty()));
    }
}

fn remove_path(value: &mut Value, parts: &[&str]) {
    let (Some(object), Some((first, rest))) = (value.as_object_mut(), parts.split_first()) else {
        return;
    };
    if rest.is_empty() {
        object.remove(*first);
        return;
    }
    if *first == "*" {
        for child in object.values_mut() {
            remove_path(child, rest);
        }
    } else if let Some(child) = object.get_mut(*first) {
        remove_path(child, rest);
    }
}

fn item_json(item: &toml_edit::Item) -> Option<Value> {
    match item {
        toml_edit::Item::None => Some(Value::Null),
        toml_edit::Item::Value(v) => value_json(v),
        toml_edit::Item::Table(t) => table_json(t.iter()),
        toml_edit::Item::ArrayOfTables(a) => a
            .iter()
            .map(|t| table_json(t.iter()))
            .collect::<Option<Vec<_>>>()
            .map(Value::Array),
    }
}

fn table_json<'a>(entries: impl Iterator<Item = (&'a str, &'a toml_edit::Item)>) -> Option<Value> {
    let mut map = serde_json::Map::new();
    for (key, item) in entries {
        map.insert(key.to_owned(), item_json(item)?);
    }
    Some(Value::Object(map))
}

fn value_json(value: &toml_edit::Value) -> Option<Value> {
    use toml_edit::Value as V;
    Some(match value {
        V::String(s) => Value::String(s.value().clone()),
        V::Integer(i) => Value::from(*i.value()),
        V::Float(f) => Value::String(f.value().to_string()),
        V::Boolean(b) => Value::Bool(*b.value()),
        V::Datetime(d) => Value::String(d.value().to_string()),
        V::Array(a) => Value::Array(a.iter().map(value_json).collect::<Option<Vec<_>>>()?),
        V::InlineTable(t) => {
            let mut map = serde_json::Map::new();
            for (key, v) in t {
                map.insert(key.to_owned(), value_json(v)?);
            }
            Value::Object(map)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_ecosystem_is_found_by_its_markers_and_narrowed_by_unprotect() {
        let found = detect(|f| f == "pyproject.toml" || f == "package.json");
        let names: Vec<&str> = found.iter().map(|e| e.name).collect();
        assert_eq!(names, ["Python", "JavaScript/TypeScript"]);
        let all = globs(&found, &[]);
        assert_eq!(all.iter().filter(|g| *g == "tests/**").count(), 1);
        assert!(
            all.contains(&"**/conftest.py".to_owned()) && all.contains(&"package.json".to_owned())
        );
        let narrowed = globs(&found, &["tests/**".to_owned(), "package.json".to_owned()]);
        assert!(
            !narrowed.contains(&"tests/**".to_owned())
                && !narrowed.contains(&"package.json".to_owned())
        );
        assert!(detect(|_| false).is_empty());
        // `.claude/` whatever the ecosystem.
        assert_eq!(globs(&[], &[]), [".claude/**"]);
        assert!(all.contains(&".claude/**".to_owned()));
    }

    #[test]
    fn a_manifest_may_gain_a_dependency_but_not_a_changed_test_configuration() {
        let pkg = r#"{"name": "x", "scripts": {"test": "node --test"}, "dependencies": {}}"#;
        let added = r#"{"name": "x", "dependencies": {"left-pad": "1"}, "scripts": {"test": "node --test"}}"#;
        let weakened =
            r#"{"name": "x", "scripts": {"test": "node --test test/ok.js"}, "dependencies": {}}"#;
        assert!(dependency_only_change("package.json", pkg, added));
        assert!(!dependency_only_change("web/package.json", pkg, weakened));
        assert!(!dependency_only_change("package.json", pkg, "{not json"));
        let py = "[project]\nname = \"x\"\ndependencies = []\n\n[tool.pytest.ini_options]\naddopts = \"-q\"\n";
        let py_added = "[project]\nname = \"x\"\ndependencies = [\n  \"requests>=2\",\n]\n\n[tool.pytest.ini_options]\naddopts = \"-q\"\n";
        let py_weakened = "[project]\nname = \"x\"\ndependencies = []\n\n[tool.pytest.ini_options]\naddopts = \"-q -k 'not parser'\"\n";
        let py_dotted = "tool.pytest.ini_options.addopts = \"-q\"\n[project]\nname = \"x\"\ndependencies = []\n";
        assert!(dependency_only_change("pyproject.toml", py, py_added));
        assert!(!dependency_only_change("pyproject.toml", py, py_weakened));
        // The same setting written another way reads the same.
        let py_plain = "[project]\nname = \"x\"\ndependencies = []\n[tool.pytest.ini_options]\naddopts = \"-q\"\n";
        assert!(dependency_only_change("pyproject.toml", py, py_plain));
        assert!(dependency_only_change("pyproject.toml", py, py_dotted));
        let cargo = "[package]\nname = \"x\"\n\n[dependencies]\n";
        let cargo_added = "[package]\nname = \"x\"\n\n[dependencies]\nserde = \"1\"\n\n[target.'cfg(unix)'.dependencies]\nrustix = \"1\"\n";
        let cargo_weakened = "[package]\nname = \"x\"\n\n[lib]\ntest = false\n\n[dependencies]\n";
        assert!(dependency_only_change("Cargo.toml", cargo, cargo_added));
        assert!(!dependency_only_change("Cargo.toml", cargo, cargo_weakened));
        assert!(!dependency_only_change("go.mod", "a", "a"));
    }
}
