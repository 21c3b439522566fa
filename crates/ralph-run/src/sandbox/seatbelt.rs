//! macOS: the `sandbox-exec` profile (Seatbelt's SBPL) for a [`Reach`].
//! Seatbelt applies the last rule that matches, so the profile goes from
//! wide to narrow: everything allowed, then no write anywhere, writes
//! allowed in the temporary folders, HOME closed for reading and writing,
//! toolchains and the agent's own folder opened for reading, the agent's
//! settings and the project for writing, then git's configuration and
//! hooks, ralph's folder in the project and ralph's state folder closed
//! again. What is outside HOME stays readable (macOS needs much of it to
//! start a process at all). Not run in this project's tests: no Mac here;
//! only the text is checked.

use std::fmt::Write;
use std::path::Path;

use super::reach::Reach;
use ralph_state::fields::confinement::Network;

/// macOS's temporary folders, written (`/var/folders` is `$TMPDIR`).
const TEMP: &[&str] = &["/private/tmp", "/private/var/folders", "/dev"];

/// The profile for `sandbox-exec -p PROFILE -- sh -c COMMAND`.
pub(crate) fn profile(reach: &Reach, network: Network) -> String {
    let mut p = String::from("(version 1)\n(allow default)\n(deny file-write*)\n");
    rule(&mut p, "allow file-write*", TEMP.iter().map(Path::new));
    rule(
        &mut p,
        "allow file-write*",
        reach.temp.iter().map(std::path::PathBuf::as_path),
    );
    rule(
        &mut p,
        "deny file-read* file-write*",
        std::iter::once(reach.home.as_path()),
    );
    rule(
        &mut p,
        "allow file-read*",
        reach.read_only.iter().map(std::path::PathBuf::as_path),
    );
    let written = reach
        .writable
        .iter()
        .map(std::path::PathBuf::as_path)
        .chain(std::iter::once(reach.project.as_path()))
        .chain(reach.agent_git.as_deref());
    rule(&mut p, "allow file-read* file-write*", written);
    rule(
        &mut p,
        "deny file-write*",
        reach.kept.iter().map(std::path::PathBuf::as_path),
    );
    rule(
        &mut p,
        "deny file-read* file-write*",
        reach.hidden.iter().map(std::path::PathBuf::as_path),
    );
    if network == Network::None {
        p.push_str("(deny network*)\n");
    }
    p
}

/// One rule over `paths`, each as a `subpath` (a folder and all below it).
fn rule<'a>(out: &mut String, what: &str, paths: impl Iterator<Item = &'a Path>) {
    let items: Vec<String> = paths.map(|p| format!("(subpath {})", string(p))).collect();
    if !items.is_empty() {
        let _ = writeln!(out, "({what} {})", items.join(" "));
    }
}

/// A path as an SBPL string: in double quotes, `\` and `"` escaped.
fn string(path: &Path) -> String {
    let text = path.to_string_lossy();
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn the_profile_closes_home_then_opens_the_project_and_settings_and_closes_git_and_state() {
        let p = PathBuf::from;
        let reach = Reach {
            project: p("/Users/u/pro\"j"),
            home: p("/Users/u"),
            read_only: vec![p("/Users/u/.cargo")],
            writable: vec![p("/Users/u/.claude")],
            kept: vec![p("/Users/u/pro\"j/.git/hooks")],
            agent_git: None,
            hidden: vec![p("/Users/u/pro\"j/state")],
            temp: vec![p("/tmp")],
            ..Reach::default()
        };
        assert_eq!(
            profile(&reach, Network::None),
            "(version 1)\n(allow default)\n(deny file-write*)\n\
             (allow file-write* (subpath \"/private/tmp\") (subpath \"/private/var/folders\") (subpath \"/dev\"))\n\
             (allow file-write* (subpath \"/tmp\"))\n\
             (deny file-read* file-write* (subpath \"/Users/u\"))\n\
             (allow file-read* (subpath \"/Users/u/.cargo\"))\n\
             (allow file-read* file-write* (subpath \"/Users/u/.claude\") (subpath \"/Users/u/pro\\\"j\"))\n\
             (deny file-write* (subpath \"/Users/u/pro\\\"j/.git/hooks\"))\n\
             (deny file-read* file-write* (subpath \"/Users/u/pro\\\"j/state\"))\n\
             (deny network*)\n"
        );
        assert!(!profile(&reach, Network::Internet).contains("network"));
    }
}
