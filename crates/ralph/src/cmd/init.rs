//! `ralph init`: write a template's PRD, progress log and prompt into ralph/.

use ralph_core::control::templates::{self, TEMPLATES};
use ralph_core::fs::safe_fs;

use crate::cli::InitArgs;

const GITIGNORE_LINES: [&str; 2] = [".claude/*.local.md", ".claude/ralph/"];

pub fn init(mut args: InitArgs) -> crate::exit::Outcome {
    if args.typed_arguments {
        let typed = super::loops::typed_text(
            crate::env::session_from_env().as_deref(),
            ralph_core::hook::typed::SlashCommand::Init,
        )?;
        apply_typed(&mut args, &typed)?;
    }
    let template = templates::find(&args.template).ok_or_else(|| {
        let names: Vec<String> = TEMPLATES
            .iter()
            .map(|t| format!("  {}: {}", t.name, t.summary))
            .collect();
        crate::exit::Failure::usage(format!(
            "no template named `{}`; choose one of:\n{}",
            args.template,
            names.join("\n")
        ))
    })?;
    let project = crate::env::project();
    crate::env::ensure_claude_dir(&project)?;
    let dir = project.root.join("ralph");
    // Anything already there counts, a link included (it is never written through).
    let existing: Vec<String> = template
        .files
        .iter()
        .filter(|(f, _)| safe_fs::kind_at(&dir.join(f)).is_some())
        .map(|(f, _)| format!("ralph/{f}"))
        .collect();
    if !existing.is_empty() && !args.force {
        return Err(format!(
            "{} already exist(s); nothing was written. Use --force to overwrite.",
            existing.join(", ")
        )
        .into());
    }
    safe_fs::ensure_dir(&project.root, "ralph")?;
    for (file, contents) in template.files {
        let path = dir.join(file);
        safe_fs::replace(&path, contents.as_bytes())
            .map_err(|e| format!("could not write ralph/{file}: {e}"))?;
        say!("wrote ralph/{file}");
    }
    if let Some(added) = ignore_loop_files(&project.root)? {
        say!("added {added} to .gitignore (loop state is per machine)");
    }
    say!(
        "\nNext: replace the example stories in ralph/prd.json with yours (a story's \"verify\" is the command that must pass before it counts), then arm the loop:\n  /ralph-loop --prd \"Follow ralph/PROMPT.md\" --max-iterations 30\n(or: ralph start --prd --max-iterations 30 < ralph/PROMPT.md)"
    );
    Ok(())
}

/// `/ralph-init ARGS`, answered by the UserPromptSubmit hook: `raw` as the event carries it.
pub fn init_typed(raw: &str) -> crate::exit::Outcome {
    let mut args = InitArgs {
        template: "software".to_owned(),
        force: false,
        typed_arguments: false,
    };
    apply_typed(&mut args, raw)?;
    init(args)
}

/// `/ralph-init [TEMPLATE] [--template TEMPLATE] [--force]`, split on whitespace: a template
/// name has no spaces, and anything else is refused rather than guessed.
fn apply_typed(args: &mut InitArgs, typed: &str) -> crate::exit::Outcome {
    let mut words = typed.split_whitespace();
    while let Some(word) = words.next() {
        match word {
            "--force" => args.force = true,
            "--template" => {
                args.template = words
                    .next()
                    .ok_or_else(|| crate::exit::Failure::usage("`--template` needs a value"))?
                    .to_owned()
            }
            w if w.starts_with("--template=") => {
                args.template = w["--template=".len()..].to_owned()
            }
            w if !w.starts_with('-') => args.template = w.to_owned(),
            other => {
                return Err(crate::exit::Failure::usage(format!(
                    "`{other}` is not an option of /ralph-init; use `[software|marketing] [--force]`"
                )));
            }
        }
    }
    Ok(())
}

/// Adds ralph's state files to `.gitignore` in a git project, once.
fn ignore_loop_files(root: &std::path::Path) -> Result<Option<String>, String> {
    if !root.join(".git").exists() {
        return Ok(None);
    }
    let path = root.join(".gitignore");
    let current = match safe_fs::read_text(&path, safe_fs::SMALL_FILE_CAP) {
        Ok(text) => text,
        Err(e) if e.is_not_found() => String::new(),
        Err(e) => {
            return Err(format!(
                "{e}; .gitignore was not edited (add {} yourself)",
                GITIGNORE_LINES.join(" and ")
            ));
        }
    };
    let missing: Vec<&str> = GITIGNORE_LINES
        .iter()
        .copied()
        .filter(|l| !current.lines().any(|c| c.trim() == *l))
        .collect();
    if missing.is_empty() {
        return Ok(None);
    }
    let mut text = current;
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    for line in &missing {
        text.push_str(line);
        text.push('\n');
    }
    safe_fs::replace(&path, text.as_bytes())
        .map_err(|e| format!("could not update .gitignore: {e}"))?;
    Ok(Some(missing.join(" and ")))
}
