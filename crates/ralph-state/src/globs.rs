//! `--protect` and `--scope` globs: paths relative to the project root,
//! matched with `globset` (docs/decisions/protect-and-scope.md). `*` and `?` stay
//! inside one folder, `**` crosses folders, and a glob that names a folder
//! covers everything under it (`tests` is `tests/**` too). Pure: no file
//! is read.

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};

/// The most globs one loop (or story) may name, and the longest one.
pub(crate) const MAX_GLOBS: usize = 64;
pub(crate) const MAX_GLOB_LEN: usize = 512;

/// Why a glob cannot be used, in words that name the fix.
pub fn check(glob: &str) -> Result<(), String> {
    if glob.is_empty() {
        return Err("a glob is empty".to_owned());
    }
    if glob.len() > MAX_GLOB_LEN {
        return Err(format!("a glob is longer than {MAX_GLOB_LEN} bytes"));
    }
    if glob.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(
            "a glob holds a space or a control character (match a space with `?`)".to_owned(),
        );
    }
    if glob.starts_with('/') || glob.contains('\\') || glob.split('/').any(|part| part == "..") {
        return Err(
            "a glob is relative to the project root, with `/` between folders and no `..`"
                .to_owned(),
        );
    }
    compile_one(glob).map(|_| ())
}

/// Globs as a loop file keeps them: separated by spaces (a glob holds none).
pub fn list(text: &str) -> Vec<String> {
    text.split_whitespace().map(str::to_owned).collect()
}

/// Globs as a loop file writes them.
pub fn join(globs: &[String]) -> String {
    globs.join(" ")
}

fn compile_one(glob: &str) -> Result<globset::Glob, String> {
    let glob = glob.strip_prefix("./").unwrap_or(glob);
    GlobBuilder::new(glob.trim_end_matches('/'))
        .literal_separator(true)
        .backslash_escape(true)
        .build()
        .map_err(|e| format!("`{glob}` is not a glob: {}", e.kind()))
}

/// A set of globs, compiled once.
#[derive(Debug, Clone)]
pub struct Globs {
    set: GlobSet,
    empty: bool,
}

impl Globs {
    /// The globs compiled; one that does not compile is left out (each was
    /// checked when the loop was armed, and a file that fails the check
    /// does not parse).
    pub fn new(globs: &[String]) -> Self {
        let mut builder = GlobSetBuilder::new();
        for glob in globs {
            if let Ok(g) = compile_one(glob) {
                builder.add(g);
            }
        }
        Self {
            set: builder.build().unwrap_or_else(|_| GlobSet::empty()),
            empty: globs.is_empty(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.empty
    }

    /// Whether `path` (relative, `/` between folders) or a folder above it
    /// matches.
    pub fn matches(&self, path: &str) -> bool {
        let mut at = Some(path);
        while let Some(p) = at {
            if self.set.is_match(p) {
                return true;
            }
            at = p.rsplit_once('/').map(|(parent, _)| parent);
        }
        false
    }

    /// The paths of `paths` that match.
    pub fn matching<'a>(&self, paths: &'a [String]) -> Vec<&'a str> {
        paths
            .iter()
            .map(String::as_str)
            .filter(|p| self.matches(p))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn globs(g: &[&str]) -> Globs {
        Globs::new(&g.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>())
    }

    #[test]
    fn a_double_star_crosses_folders_and_a_single_one_does_not() {
        let g = globs(&["tests/**", "src/*.rs"]);
        assert!(g.matches("tests/a.rs"));
        assert!(g.matches("tests/deep/er/a.rs"));
        assert!(g.matches("src/lib.rs"));
        assert!(!g.matches("src/deep/lib.rs"));
        assert!(!g.matches("testsuite/a.rs"));
        assert!(!g.matches("other/tests/a.rs"));
        let any = globs(&["**/fixtures/**"]);
        assert!(any.matches("a/b/fixtures/x.json"));
        assert!(any.matches("fixtures/x.json"));
    }

    #[test]
    fn a_folder_covers_what_is_under_it() {
        let g = globs(&["tests", "ci/"]);
        assert!(g.matches("tests/a/b.rs"));
        assert!(g.matches("tests"));
        assert!(g.matches("ci/x.yml"));
        assert!(!g.matches("tests.rs"));
    }

    #[test]
    fn a_glob_that_leaves_the_project_or_holds_a_space_is_refused() {
        for bad in [
            "", "/etc/**", "../x", "a/../b", "a b", "a\nb", "a\\b", "[z-a",
        ] {
            assert!(check(bad).is_err(), "{bad:?}");
        }
        for good in ["tests/**", "*.md", "./src/a.rs", "{x,y}/**"] {
            assert!(check(good).is_ok(), "{good:?}");
        }
        assert_eq!(list(" a  b\tc "), ["a", "b", "c"]);
        assert_eq!(join(&list("a b")), "a b");
    }
}
