//! Which filter drivers git's configuration may define, found without
//! starting git, so that the no-progress breaker's working-tree read is one
//! process (`git status`), not two.
//!
//! Only the repository's own configuration (`.git/config`) can come from a
//! stranger, and any doubt about it sends the caller back to asking git
//! (`git config --get-regexp`), which follows includes exactly. The user's
//! and the system's files are the user's own: their drivers are read by a
//! plain scan of section headers and blanked too, best effort (a driver
//! missed there is one the user installed, as git would run it anyway).

use std::path::{Path, PathBuf};

use crate::safe_fs;

/// The most of a configuration file read; a larger one is a reason to ask git.
const CONFIG_CAP: u64 = 1024 * 1024;

/// The filter drivers to blank, when they can be known without git: `None`
/// when the repository's configuration may define one (it mentions a
/// filter, an include, or a per-worktree file, or cannot be read plainly,
/// or `.git` is not a plain folder), so the caller must ask git.
pub(crate) fn drivers_without_git(root: &Path) -> Option<Vec<String>> {
    let dot_git = root.join(".git");
    if !std::fs::symlink_metadata(&dot_git).ok()?.is_dir() {
        return None; // a worktree or submodule: its config lives elsewhere
    }
    if std::fs::symlink_metadata(dot_git.join("commondir")).is_ok() {
        return None; // the configuration is read from another folder
    }
    match safe_fs::read_capped(&dot_git.join("config"), CONFIG_CAP) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes).to_ascii_lowercase();
            if ["filter", "include", "worktreeconfig"]
                .iter()
                .any(|word| text.contains(word))
            {
                return None;
            }
        }
        Err(e) if e.is_not_found() => {}
        Err(_) => return None,
    }
    let mut drivers: Vec<String> = user_config_files()
        .iter()
        .filter_map(|path| std::fs::read(path).ok())
        .flat_map(|bytes| filter_sections(&String::from_utf8_lossy(&bytes)))
        .collect();
    drivers.sort_unstable();
    drivers.dedup();
    Some(drivers)
}

/// Whether no configuration file git reads for `root` can set
/// `core.excludesFile` ([`silent_on`]).
pub(crate) fn excludes_file_unset(root: &Path) -> bool {
    silent_on(root, "excludesfile")
}

/// Whether no configuration file git reads for `root` can set a key whose
/// name holds `word` (in lower case), known without starting git: the
/// repository's `.git/config` (a plain folder's, no linked worktree) and
/// the user's and the system's files neither name it nor include another
/// file, and no setting comes from the environment. `false` whenever in doubt.
pub(crate) fn silent_on(root: &Path, word: &str) -> bool {
    let dot_git = root.join(".git");
    let plain = std::fs::symlink_metadata(&dot_git).is_ok_and(|m| m.is_dir())
        && std::fs::symlink_metadata(dot_git.join("commondir")).is_err();
    let from_environment = ["GIT_CONFIG_COUNT", "GIT_CONFIG_PARAMETERS"]
        .iter()
        .any(|name| std::env::var_os(name).is_some());
    if !plain || from_environment {
        return false;
    }
    let silent = |text: &[u8]| {
        let text = String::from_utf8_lossy(text).to_ascii_lowercase();
        !text.contains(word) && !text.contains("include")
    };
    let repository = match safe_fs::read_capped(&dot_git.join("config"), CONFIG_CAP) {
        Ok(bytes) => silent(&bytes),
        Err(e) => e.is_not_found(),
    };
    repository
        && user_config_files()
            .iter()
            .all(|path| match std::fs::read(path) {
                Ok(bytes) => silent(&bytes),
                Err(e) => e.kind() == std::io::ErrorKind::NotFound,
            })
}

/// The user's and the system's configuration files, where git looks for
/// them (`GIT_CONFIG_GLOBAL`/`GIT_CONFIG_SYSTEM` win, as in git).
fn user_config_files() -> Vec<PathBuf> {
    let env = |name| std::env::var_os(name).filter(|v| !v.is_empty());
    let mut files = Vec::new();
    if let Some(global) = env("GIT_CONFIG_GLOBAL") {
        files.push(PathBuf::from(global));
    } else {
        let home = env("HOME").map(PathBuf::from);
        let xdg = env("XDG_CONFIG_HOME")
            .map(PathBuf::from)
            .or_else(|| home.as_ref().map(|h| h.join(".config")));
        files.extend(xdg.map(|x| x.join("git/config")));
        files.extend(home.map(|h| h.join(".gitconfig")));
    }
    if env("GIT_CONFIG_NOSYSTEM").is_none() {
        files.push(env("GIT_CONFIG_SYSTEM").map_or_else(|| "/etc/gitconfig".into(), PathBuf::from));
    }
    files
}

/// The driver names of `[filter "name"]` and `[filter.name]` headers.
fn filter_sections(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|line| {
            let header = line.trim_start().strip_prefix('[')?;
            let header = &header[..header.find(']')?];
            if let Some((section, quoted)) = header.split_once('"') {
                let section = section.trim();
                if !section.eq_ignore_ascii_case("filter") {
                    return None;
                }
                let inner = quoted.strip_suffix('"')?;
                let mut name = String::new();
                let mut chars = inner.chars();
                while let Some(c) = chars.next() {
                    name.push(if c == '\\' { chars.next()? } else { c });
                }
                Some(name)
            } else {
                let (section, name) = header.trim().split_once('.')?;
                section
                    .eq_ignore_ascii_case("filter")
                    .then(|| name.to_ascii_lowercase())
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_drivers_in_both_header_spellings() {
        let text = "[core]\n\tbare = false\n[filter \"lfs\"]\n\tclean = git-lfs clean -- %f\n [Filter \"a\\\"b\"]\n[filter.Old]\n[filters \"x\"]\n";
        assert_eq!(filter_sections(text), ["lfs", "a\"b", "old"]);
    }

    #[cfg(unix)]
    #[test]
    fn a_repository_config_that_may_define_a_filter_sends_the_caller_to_git() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        assert_eq!(drivers_without_git(root), None, "no .git: ask git");
        std::fs::create_dir(root.join(".git")).unwrap();
        let config = root.join(".git/config");
        for (text, plain) in [
            ("[core]\n\tbare = false\n", true),
            ("[FILTER \"x\"]\n\tclean = touch pwned\n", false),
            ("[include]\n\tpath = ../evil\n", false),
            ("[includeIf \"gitdir:/\"]\n\tpath = x\n", false),
            ("[extensions]\n\tworktreeConfig = true\n", false),
        ] {
            std::fs::write(&config, text).unwrap();
            assert_eq!(drivers_without_git(root).is_some(), plain, "{text}");
        }
        std::fs::write(&config, "[core]\n").unwrap();
        std::fs::write(root.join(".git/commondir"), "../elsewhere\n").unwrap();
        assert_eq!(drivers_without_git(root), None, "a commondir: ask git");
        std::fs::remove_file(root.join(".git/commondir")).unwrap();
        std::fs::remove_file(&config).unwrap();
        assert!(drivers_without_git(root).is_some(), "no config at all");
        std::os::unix::fs::symlink("/etc/hostname", &config).unwrap();
        assert_eq!(drivers_without_git(root), None, "a link: ask git");
    }
}
