//! The README's tables against the real binary's help (issue 47): every command `ralph --help`
//! lists (and every subcommand under it) is named in the commands table, every option its
//! `--help` shows is named in a row that names the command (or, for `ralph start` and
//! `ralph run`, in the options table), spelled as clap spells it; and neither table names a
//! command or an option the help lacks.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use std::collections::{BTreeMap, BTreeSet};

use crate::support::{ralph_command, repo_root, text};

/// `ralph PATH… --help`, as the user reads it.
fn help(path: &[String]) -> String {
    let out = ralph_command().args(path).arg("--help").output().unwrap();
    assert!(
        out.status.success(),
        "ralph {path:?} --help: {}",
        text(&out)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The lines of the help's `NAME:` section (up to the next unindented line).
fn section<'a>(help: &'a str, name: &str) -> Vec<&'a str> {
    help.lines()
        .skip_while(|l| *l != name)
        .skip(1)
        .take_while(|l| l.is_empty() || l.starts_with(' '))
        .collect()
}

/// The long options a command's help shows, `--help` and `--version` left out (clap's own).
fn options(help: &str) -> BTreeSet<String> {
    section(help, "Options:")
        .into_iter()
        // An option's own line starts with its flag; its description is indented further.
        .filter(|l| l.len() - l.trim_start().len() <= 6 && l.trim_start().starts_with('-'))
        .flat_map(|l| flags(l.split("  ").find(|p| !p.trim().is_empty()).unwrap_or("")))
        .filter(|f| f != "--help" && f != "--version")
        .collect()
}

/// Every command the binary has, as its path of subcommand names (`["hook", "stop"]`), with
/// the long options of its help; a command with subcommands of its own is not listed itself.
fn commands(path: &[String], found: &mut BTreeMap<Vec<String>, BTreeSet<String>>) {
    let help = help(path);
    let subcommands: Vec<String> = section(&help, "Commands:")
        .into_iter()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect();
    if subcommands.is_empty() {
        found.insert(path.to_vec(), options(&help));
    }
    for name in subcommands {
        let mut deeper = path.to_vec();
        deeper.push(name);
        commands(&deeper, found);
    }
}

/// The long options written in `text` (`--name`, `--max-iterations`); a name written as a
/// family (`--add-…`) is left out.
fn flags(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("--") {
        let after = &rest[at + 2..];
        let len = after
            .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'))
            .unwrap_or(after.len());
        let name = &after[..len];
        let family = name.ends_with('-') || after[len..].starts_with('…');
        if !name.is_empty() && !family && name.starts_with(|c: char| c.is_ascii_lowercase()) {
            found.push(format!("--{name}"));
        }
        rest = &after[len..];
    }
    found
}

/// The commands a cell names: each `` `ralph a b` `` span, with alternatives written
/// `a \| b` or `a\|b` (`ralph hook prompt \| session-start` names two), up to the first word
/// that is not a command's name (an option, a placeholder such as `H` or `[TASK…]`).
fn named_commands(cell: &str) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    for span in cell.split('`').skip(1).step_by(2) {
        let Some(words) = span.strip_prefix("ralph ") else {
            continue;
        };
        let (mut prefix, mut choices, mut or) = (Vec::new(), Vec::<String>::new(), false);
        for word in words.split_whitespace() {
            if word == "\\|" {
                or = true;
                continue;
            }
            let names: Vec<&str> = word.split("\\|").collect();
            let is_name = |n: &&str| {
                n.starts_with(|c: char| c.is_ascii_lowercase())
                    && n.chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            };
            if !names.iter().all(is_name) {
                break;
            }
            if !or {
                // One word after another: the previous one was a command with subcommands.
                match choices.as_slice() {
                    [] => {}
                    [one] => prefix.push(one.clone()),
                    _ => break,
                }
                choices.clear();
            }
            choices.extend(names.iter().map(|n| (*n).to_owned()));
            or = false;
        }
        for choice in choices {
            let mut path = prefix.clone();
            path.push(choice);
            found.push(path);
        }
    }
    found
}

/// The README's table that starts with `header`: each row's cells.
fn table(readme: &str, header: &str) -> Vec<Vec<String>> {
    let rows: Vec<Vec<String>> = readme
        .lines()
        .skip_while(|l| !l.starts_with(header))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            // A `\|` inside a cell is text, not a border.
            l.replace("\\|", "\u{1}")
                .split('|')
                .map(|c| c.trim().replace('\u{1}', "\\|"))
                .filter(|c| !c.is_empty())
                .collect()
        })
        .collect();
    assert!(!rows.is_empty(), "README.md has no table headed {header:?}");
    rows
}

/// Compares what the README's tables say with what the binary's help shows; every
/// difference, each named with where to fix it.
fn differences(readme: &str, binary: &BTreeMap<Vec<String>, BTreeSet<String>>) -> Vec<String> {
    let mut wrong = Vec::new();
    let options_table = table(readme, "| option | default | meaning |");
    let commands_table = table(readme, "| slash command | CLI | what it does |");
    // The options table is `ralph start`'s, which `ralph run` shares.
    let (start, run) = (vec!["start".to_owned()], vec!["run".to_owned()]);
    let arming: BTreeSet<&String> = binary[&start].iter().chain(&binary[&run]).collect();
    let mut in_options_table = BTreeSet::new();
    for row in &options_table {
        for flag in flags(&row[0]) {
            if !arming.contains(&flag) {
                wrong.push(format!(
                    "the options table's row `{}` names {flag}, which neither `ralph start --help` nor `ralph run --help` shows",
                    row[0]
                ));
            }
            in_options_table.insert(flag);
        }
    }
    // What each command's rows of the commands table name (the whole row: its slash command,
    // its CLI spelling and what it says).
    let mut told: BTreeMap<Vec<String>, BTreeSet<String>> = BTreeMap::new();
    for row in &commands_table {
        let named = named_commands(&row[1]);
        for path in &named {
            if !binary.contains_key(path) {
                wrong.push(format!(
                    "the commands table names `ralph {}`, which `ralph --help` does not list",
                    path.join(" ")
                ));
            }
        }
        let row_flags: BTreeSet<String> = row.iter().flat_map(|c| flags(c)).collect();
        // An option written in a CLI spelling belongs to the commands that spelling names; one
        // in the slash command, to a command the row names.
        let help_of = |paths: &[Vec<String>]| -> BTreeSet<String> {
            paths
                .iter()
                .filter_map(|p| binary.get(p))
                .flatten()
                .cloned()
                .collect()
        };
        let spellings = row[1].split('`').skip(1).step_by(2);
        let written = spellings
            .map(|span| (named_commands(&format!("`{span}`")), flags(span)))
            .chain([(named.clone(), flags(&row[0]))]);
        for (paths, written_flags) in written {
            let known = help_of(&paths);
            for flag in written_flags.into_iter().filter(|f| !known.contains(f)) {
                if !paths.is_empty() {
                    wrong.push(format!(
                        "the commands table's row for {} names {flag}, which its help does not show",
                        row[1]
                    ));
                }
            }
        }
        for path in named {
            told.entry(path)
                .or_default()
                .extend(row_flags.iter().cloned());
        }
    }
    for (path, shown) in binary {
        let command = format!("ralph {}", path.join(" "));
        let Some(said) = told.get(path) else {
            wrong.push(format!(
                "`{command}` has no row in the README's commands table"
            ));
            continue;
        };
        let covered_by_options_table = *path == start || *path == run;
        for flag in shown {
            if !said.contains(flag)
                && !(covered_by_options_table && in_options_table.contains(flag))
            {
                wrong.push(format!(
                    "`{command} --help` shows {flag}, which the README's {} does not name",
                    if covered_by_options_table {
                        "options table (or the command's row)"
                    } else {
                        "row for the command"
                    }
                ));
            }
        }
    }
    wrong
}

#[test]
fn the_readme_tables_name_every_command_and_option_of_the_help_and_nothing_else() {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let mut binary = BTreeMap::new();
    commands(&[], &mut binary);
    assert!(
        binary.len() > 20 && binary[&vec!["start".to_owned()]].contains("--max-iterations"),
        "the help was not read: {binary:?}"
    );
    let wrong = differences(&readme, &binary);
    assert!(
        wrong.is_empty(),
        "README.md against the help:\n{}",
        wrong.join("\n")
    );
}

/// The comparison catches each kind of drift: a row whose option the help lacks, an option
/// of the help no row names, a command no row names, a command the binary lacks.
#[test]
fn a_readme_that_drifted_from_the_help_is_caught() {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let mut binary = BTreeMap::new();
    commands(&[], &mut binary);
    for (from, to, says) in [
        (
            "| `--stuck-after K` |",
            "| `--stuck-afterwards K` |",
            "names --stuck-afterwards",
        ),
        (
            "| `--stuck-after K` |",
            "| `stuck after K` |",
            "shows --stuck-after",
        ),
        (
            "`ralph status [--json]",
            "`ralph status [--jsonl]",
            "names --jsonl",
        ),
        (
            "`ralph fleet-budget spent --ledger DIR --story ID`",
            "`ralph fleet-budget spent --ledger DIR --jobs N`",
            "names --jobs",
        ),
        ("`ralph clean`", "`ralph clear`", "`ralph clean` has no row"),
        (
            "`ralph clean`",
            "`ralph clean`, `ralph sweep`",
            "names `ralph sweep`",
        ),
    ] {
        assert!(readme.contains(from), "README.md no longer has {from:?}");
        let drifted = readme.replacen(from, to, 1);
        let wrong = differences(&drifted, &binary);
        assert!(
            wrong.iter().any(|w| w.contains(says)),
            "{from:?} → {to:?} was not caught ({says:?}): {wrong:?}"
        );
    }
}
