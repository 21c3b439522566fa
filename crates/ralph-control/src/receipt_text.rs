//! What `ralph receipt` prints: what the gate proved when a loop completed
//! and, after `--recheck`, whether it still holds. Text only.

use ralph_state::storage::receipt::{Receipt, Recheck, seconds};

/// The receipt, one fact a line.
pub fn receipt(r: &Receipt) -> Vec<String> {
    let mut out = vec![
        format!(
            "Loop `{}` completed at iteration {} ({})",
            r.name, r.iteration, r.passed_at
        ),
        format!("  gate:     `{}`", r.command),
        format!("  exit:     {} in {}", r.exit_code, seconds(r.duration_ms)),
        format!(
            "  output:   sha256 {} ({})",
            r.output_sha256,
            ralph_state::plural::count(r.output_bytes, "byte", "bytes")
        ),
    ];
    if !r.gate_sandbox.is_empty() {
        out.push(format!("  ran:      {}", r.gate_sandbox));
    }
    if let Some(file) = &r.output_file {
        out.push(format!("            kept in {file}"));
    }
    out.push(match (&r.commit, r.clean) {
        (Some(c), Some(clean)) => format!(
            "  commit:   {c} ({})",
            if clean {
                "clean tree"
            } else {
                "uncommitted changes"
            }
        ),
        (None, Some(_)) => "  commit:   none yet".to_owned(),
        _ => "  commit:   not a git repository (or git did not answer)".to_owned(),
    });
    if let Some(p) = &r.paths {
        let globs = |g: &[String]| {
            if g.is_empty() {
                "(none)".to_owned()
            } else {
                g.join(" ")
            }
        };
        out.push(format!(
            "  protect:  {} ({}) · scope: {} ({})",
            globs(&p.protect),
            if p.protect_held { "held" } else { "broken" },
            globs(&p.scope),
            if p.scope_held { "held" } else { "broken" }
        ));
        out.push(format!(
            "  changed:  {} since the tree {} at arming: {}",
            p.changed.len(),
            p.armed_tree,
            ralph_core::decide::path_words::listed(&p.changed)
        ));
    }
    out.extend(r.gate.as_ref().map(gate_lines).unwrap_or_default());
    out.push(format!("  record:   {}", r.record));
    out
}

/// Where and how the gate ran: its snapshot, setup step, held-out set.
fn gate_lines(g: &ralph_state::storage::receipt::GateRan) -> Vec<String> {
    let mut out = vec![match &g.tree {
        Some(tree) if g.restored.is_empty() => format!("  ran in:   a snapshot of tree {tree}"),
        Some(tree) => format!(
            "  ran in:   a snapshot of tree {tree}, with {} as at arming: {}",
            ralph_state::plural::count(
                g.restored.len() as u64,
                "protected path",
                "protected paths"
            ),
            ralph_core::decide::path_words::listed(&g.restored)
        ),
        None => "  ran in:   the project folder (not a git work tree: no snapshot)".to_owned(),
    }];
    if let Some(setup) = &g.setup {
        out.push(format!(
            "  setup:    `{setup}` ({})",
            if g.setup_ran {
                "ran before this gate"
            } else {
                "not run: the snapshot had not changed since it last passed there"
            }
        ));
    }
    if let Some(dir) = &g.held_out {
        out.push(format!(
            "  held out: {dir}, sha256 {}",
            g.held_out_sha256.as_deref().unwrap_or("(none)")
        ));
    }
    out
}

/// What the gate said when it ran again, after a blank line.
pub fn recheck(r: &Receipt, c: &Recheck) -> Vec<String> {
    let mut out = vec![String::new()];
    if c.holds {
        out.push(format!(
            "Recheck: `{}` passes again ({} in {}): done still holds.",
            r.command,
            c.status,
            seconds(c.duration_ms)
        ));
    } else {
        out.push(format!(
            "Recheck: `{}` fails now ({}): done no longer holds.",
            r.command, c.status
        ));
        if !c.output_tail.is_empty() {
            out.push(c.output_tail.clone());
        }
    }
    out.push(format!(
        "  output {} · commit {}",
        if c.same_output {
            "identical"
        } else {
            "differs"
        },
        if c.same_commit {
            "unchanged"
        } else {
            "changed since"
        }
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn receipt_of(commit: Option<&str>, clean: Option<bool>) -> Receipt {
        Receipt {
            version: 1,
            name: "l".into(),
            project: "/p".into(),
            command: "cargo test".into(),
            exit_code: 0,
            duration_ms: 1500,
            output_sha256: "ab".into(),
            output_bytes: 10,
            output_cut: false,
            commit: commit.map(str::to_owned),
            clean,
            passed_at: "T".into(),
            iteration: 3,
            record: "r.md".into(),
            output_file: None,
            paths: None,
            gate_sandbox: String::new(),
            gate: None,
        }
    }

    #[test]
    fn a_receipt_tells_its_gate_output_and_commit() {
        assert_eq!(
            receipt(&receipt_of(Some("abc"), Some(false))),
            [
                "Loop `l` completed at iteration 3 (T)",
                "  gate:     `cargo test`",
                "  exit:     0 in 1.5s",
                "  output:   sha256 ab (10 bytes)",
                "  commit:   abc (uncommitted changes)",
                "  record:   r.md",
            ]
        );
        assert_eq!(
            receipt(&receipt_of(None, Some(true)))[4],
            "  commit:   none yet"
        );
        assert_eq!(
            receipt(&receipt_of(None, None))[4],
            "  commit:   not a git repository (or git did not answer)"
        );
    }

    #[test]
    fn a_recheck_says_whether_done_still_holds() {
        let r = receipt_of(None, None);
        let c = Recheck {
            holds: false,
            status: "exit 1".into(),
            duration_ms: 200,
            output_sha256: "cd".into(),
            same_output: false,
            commit: None,
            same_commit: true,
            output_tail: "1 failed".into(),
        };
        assert_eq!(
            recheck(&r, &c),
            [
                "",
                "Recheck: `cargo test` fails now (exit 1): done no longer holds.",
                "1 failed",
                "  output differs · commit unchanged",
            ]
        );
        let passes = Recheck { holds: true, ..c };
        assert_eq!(
            recheck(&r, &passes)[1],
            "Recheck: `cargo test` passes again (exit 1 in 0.2s): done still holds."
        );
    }
}
