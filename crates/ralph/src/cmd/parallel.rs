//! `ralph run --parallel N`, `ralph plan` and `ralph clean`: many loops at
//! once. Each story runs as a child `ralph run` (the same driver, rules,
//! guards and verify gate as a single run) in its own git worktree on
//! `ralph/<story-id>`; ralph's own cost per loop is that one small process.
//! Finished stories are rebased onto the base branch, verified there and
//! merged home one at a time, here; the rules are in `ralph_core::fanout`.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use ralph_core::fanout::{self, MergeMode, Next, Row, Story, StoryRecord, StoryState, valid_id};
use ralph_core::fanout_git as fg;
use ralph_core::outcome::{self as ended, RecordedOutcome};
use ralph_core::process::GroupChild;
use ralph_core::safe_fs;
use ralph_core::state::LoopState;
use ralph_core::store::Project;
use ralph_core::time::format_duration;

use super::{Failure, Outcome};
use crate::cli::{ArmFlags, PlanArgs, RunArgs};

/// How long the child runs get to record their loops after Ctrl-C.
const STOP_GRACE: Duration = Duration::from_secs(30);

/// One loop running now.
struct Slot {
    story: Story,
    child: GroupChild,
    worktree: PathBuf,
    started: Instant,
    last: String,
}

/// What the run needs to know at every step.
struct Fleet {
    project: Project,
    base: String,
    merge: MergeMode,
    verify: Option<String>,
    verify_timeout: Duration,
    /// Stories come from the PRD (so `passes` is written back).
    from_prd: bool,
    live: bool,
    /// Lines on screen in the live display, to redraw over.
    drawn: usize,
    rows: Vec<Row>,
    notes: Vec<String>,
}

pub fn run(args: RunArgs, n: usize) -> Outcome {
    if args.hand_back_after.is_some() || args.force {
        return Err(Failure::usage(
            "--hand-back-after and --force go with a single loop, not with --parallel",
        ));
    }
    // Each child resolves the preset itself; a flag it would refuse is refused here, once.
    super::run::agent_command(&args)?;
    let merge = MergeMode::parse(&args.fanout.merge).unwrap_or(MergeMode::Ff);
    let project = super::project();
    let root = project.root.clone();
    let base = fg::current_branch(&root)?;
    let (stories, from_prd) = select(&root, &args)?;
    fg::ensure_excluded(&root)?;
    let records = project.ensure_dir(fanout::RECORDS)?;
    let promise = args
        .arm
        .completion_promise
        .clone()
        .unwrap_or_else(|| fanout::DEFAULT_PROMISE.to_owned());
    let child_args = child_args(&args, &promise);
    let verify_timeout = args
        .arm
        .guards
        .0
        .get("verify-timeout")
        .and_then(ralph_core::time::parse_duration)
        .unwrap_or(300);
    let mut fleet = Fleet {
        project,
        base,
        merge,
        verify: args.arm.guards.0.get("verify").map(str::to_owned),
        verify_timeout: Duration::from_secs(verify_timeout),
        from_prd,
        live: std::io::stdout().is_terminal(),
        drawn: 0,
        rows: Vec::new(),
        notes: Vec::new(),
    };

    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    let _ = ctrlc::set_handler(move || flag.store(true, Ordering::SeqCst));

    // Stories whose loop completed earlier only come home again.
    let mut queue: VecDeque<Story> = VecDeque::new();
    for story in stories {
        let record = read_record(&records, &story.id);
        match (
            fanout::next(record.as_ref(), merge != MergeMode::None),
            record,
        ) {
            (Next::Skip, record) => say!(
                "{}: {} earlier (branch {}); skipped. To run it again, delete {}/{}.json",
                story.id,
                record.as_ref().map_or("", |r| r.state.as_str()),
                fanout::branch(&story.id),
                fanout::RECORDS,
                story.id
            ),
            (Next::BringHome, Some(record))
                if fg::is_registered(
                    &fleet.project.root,
                    &fg::worktree_path(&fleet.project.root, &story.id),
                    &fanout::branch(&story.id),
                ) =>
            {
                say!(
                    "{}: its loop completed earlier; bringing it home again",
                    story.id
                );
                let worktree = fg::worktree_path(&fleet.project.root, &story.id);
                let record = fleet.bring_home(&story, &worktree, record);
                fleet.finish(&records, &story, record);
            }
            // No worktree of ralph's (after `ralph clean`, say): the loop
            // runs again on the story's branch, which keeps its work.
            (Next::BringHome | Next::RunLoop, _) => queue.push_back(story),
        }
    }

    let (sender, lines) = mpsc::channel::<(String, String)>();
    let mut running: Vec<Slot> = Vec::new();
    let mut interrupted: Option<Instant> = None;
    let mut killed = false;
    loop {
        if stop.load(Ordering::SeqCst) && interrupted.is_none() {
            interrupted = Some(Instant::now());
            fleet.event("⏹ Ctrl-C: stopping every agent; each loop is recorded as cancelled");
            for slot in &mut running {
                fg::interrupt(&mut slot.child.child);
            }
        }
        // A run that does not stop within its grace time is killed (its
        // loop then stays as it was; `ralph cancel` there ends it).
        if !killed && interrupted.is_some_and(|t| t.elapsed() > STOP_GRACE) {
            killed = true;
            for slot in &mut running {
                let _ = ralph_core::process::stop_group(
                    &mut slot.child,
                    ralph_core::process::Stop::Kill,
                );
            }
        }
        while interrupted.is_none() && running.len() < n {
            let Some(story) = queue.pop_front() else {
                break;
            };
            match fleet.start(&story, &child_args, &promise, &sender) {
                Ok(slot) => {
                    fleet.event(&format!(
                        "▶ {}: started in {} on {}",
                        story.id,
                        super::display(&fleet.project, &slot.worktree),
                        fanout::branch(&story.id)
                    ));
                    running.push(slot);
                }
                Err(e) => {
                    let record = StoryRecord {
                        story: story.id.clone(),
                        state: StoryState::Ended,
                        outcome: "not_started".into(),
                        iterations: 0,
                        tokens: 0,
                        seconds: 0,
                        branch: fanout::branch(&story.id),
                        note: e,
                    };
                    fleet.finish(&records, &story, record);
                }
            }
        }
        if running.is_empty() {
            break;
        }
        match lines.recv_timeout(Duration::from_millis(200)) {
            Ok((id, line)) => {
                if let Some(slot) = running.iter_mut().find(|s| s.story.id == id) {
                    slot.last = line.clone();
                }
                if !fleet.live {
                    say!("[{id}] {line}");
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout | mpsc::RecvTimeoutError::Disconnected) => {}
        }
        let mut i = 0;
        while i < running.len() {
            match running[i].child.child.try_wait() {
                Ok(Some(status)) => {
                    let slot = running.remove(i);
                    // Whatever it printed last is still in the channel: drain it.
                    while let Ok((id, line)) = lines.try_recv() {
                        if !fleet.live {
                            say!("[{id}] {line}");
                        }
                    }
                    let record = fleet.ended(&slot, status.code());
                    fleet.finish(&records, &slot.story, record);
                }
                Ok(None) => i += 1,
                Err(_) => i += 1,
            }
        }
        fleet.redraw(&running);
    }
    fleet.redraw(&[]);
    if fleet.rows.is_empty() {
        say!("Nothing open to run: every story passes, or came home earlier.");
        return Ok(());
    }
    say!();
    say!("{}", fanout::table(&fleet.rows));
    for note in &fleet.notes {
        say!("{note}");
    }
    if interrupted.is_some() {
        say!("Run the same command again to resume what was left.");
        return Err(Failure::interrupted());
    }
    let all_done = fleet
        .rows
        .iter()
        .all(|r| r.outcome == "merged" || r.outcome == "ready");
    if all_done {
        Ok(())
    } else {
        Err(Failure::ended())
    }
}

/// The stories this run is about: tasks from the command line, or the open
/// stories of the PRD (only those named with --story, if any).
fn select(root: &Path, args: &RunArgs) -> Result<(Vec<Story>, bool), Failure> {
    if !args.prompt.is_empty() {
        if !args.fanout.story.is_empty() {
            return Err(Failure::usage(
                "--story picks stories of ralph/prd.json; with tasks on the command line, leave it out",
            ));
        }
        return Ok((fanout::tasks(&args.prompt), false));
    }
    let all = read_stories(root)?;
    for id in &args.fanout.story {
        if !valid_id(id) || !all.iter().any(|s| &s.id == id) {
            return Err(Failure::usage(format!(
                "--story {}: no story with that id in {}",
                ralph_core::display::line(id),
                fanout::PRD
            )));
        }
    }
    let open: Vec<Story> = fanout::open(&all)
        .into_iter()
        .filter(|s| args.fanout.story.is_empty() || args.fanout.story.contains(&s.id))
        .collect();
    Ok((open, true))
}

fn read_stories(root: &Path) -> Result<Vec<Story>, Failure> {
    let text = match safe_fs::read_text(&root.join(fanout::PRD), safe_fs::SMALL_FILE_CAP) {
        Ok(t) => t,
        Err(e) if e.is_not_found() => {
            return Err(Failure::usage(format!(
                "no {} here: write one (`ralph init`), or name the tasks: ralph run --parallel 2 \"task one\" \"task two\"",
                fanout::PRD
            )));
        }
        Err(e) => return Err(format!("{}: {e}", fanout::PRD).into()),
    };
    Ok(fanout::stories(&text)?)
}

/// The arguments every child `ralph run` gets: the agent and the loop's
/// settings, as given to this run (the task comes on stdin).
fn child_args(args: &RunArgs, promise: &str) -> Vec<String> {
    let mut out = vec!["--agent".to_owned(), args.agent.clone()];
    if let Some(mode) = &args.permission_mode {
        out.extend(["--permission-mode".to_owned(), mode.clone()]);
    }
    let ArmFlags {
        max_iterations,
        completion_promise: _,
        abort_promise,
        guards,
        fresh_context,
    } = &args.arm;
    out.extend(["--completion-promise".to_owned(), promise.to_owned()]);
    let mut add = |flag: &str, value: Option<String>| {
        if let Some(v) = value {
            out.extend([flag.to_owned(), v]);
        }
    };
    add("--max-iterations", max_iterations.map(|v| v.to_string()));
    add("--abort-promise", abort_promise.clone());
    out.extend(guards.0.args());
    if *fresh_context {
        out.push("--fresh-context".to_owned());
    }
    out
}

fn read_record(dir: &Path, id: &str) -> Option<StoryRecord> {
    let text = safe_fs::read_text(&dir.join(format!("{id}.json")), safe_fs::SMALL_FILE_CAP).ok()?;
    serde_json::from_str(&text).ok()
}

impl Fleet {
    /// Prepares the story's worktree and starts its `ralph run` there.
    fn start(
        &self,
        story: &Story,
        child_args: &[String],
        promise: &str,
        sender: &mpsc::Sender<(String, String)>,
    ) -> Result<Slot, String> {
        let root = &self.project.root;
        self.project
            .ensure_dir(fanout::WORKTREES)
            .map_err(|e| e.to_string())?;
        let worktree = fg::worktree_path(root, &story.id);
        fg::worktree_for(root, &worktree, &fanout::branch(&story.id), &self.base)?;
        // The child's project is the worktree, never the main tree above it.
        safe_fs::ensure_dir(&worktree, ".claude").map_err(|e| e.to_string())?;
        let exe = std::env::current_exe().map_err(|e| format!("cannot find ralph itself: {e}"))?;
        let mut command = Command::new(exe);
        command
            .arg("run")
            .arg("--name")
            .arg(fanout::loop_name(&story.id))
            .args(child_args)
            .current_dir(&worktree)
            .env("CLAUDE_PROJECT_DIR", &worktree)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut group = ralph_core::process::spawn_in_group(&mut command)
            .map_err(|e| format!("could not start `ralph run`: {e}"))?;
        let child = &mut group.child;
        if let Some(mut stdin) = child.stdin.take() {
            let _ = stdin.write_all(fanout::prompt(story, promise).as_bytes());
        }
        for out in [
            child
                .stdout
                .take()
                .map(|o| Box::new(o) as Box<dyn Read + Send>),
            child
                .stderr
                .take()
                .map(|e| Box::new(e) as Box<dyn Read + Send>),
        ]
        .into_iter()
        .flatten()
        {
            let sender = sender.clone();
            let id = story.id.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(out).lines() {
                    let Ok(line) = line else { break };
                    if !line.trim().is_empty() && sender.send((id.clone(), line)).is_err() {
                        break;
                    }
                }
            });
        }
        Ok(Slot {
            story: story.clone(),
            child: group,
            worktree,
            started: Instant::now(),
            last: "starting".into(),
        })
    }

    /// A child run ended: read how its loop ended, keep its history, and
    /// bring a completed story home.
    fn ended(&mut self, slot: &Slot, code: Option<i32>) -> StoryRecord {
        let name = fanout::loop_name(&slot.story.id);
        let (outcome, iterations, tokens) = last_record(&slot.worktree, &name);
        keep_history(&slot.worktree, &self.project);
        let record = StoryRecord {
            story: slot.story.id.clone(),
            state: StoryState::Ended,
            outcome: outcome
                .as_deref()
                .unwrap_or(ended::Outcome::Failed.as_str())
                .to_owned(),
            iterations,
            tokens,
            seconds: slot.started.elapsed().as_secs(),
            branch: fanout::branch(&slot.story.id),
            note: String::new(),
        };
        match code {
            Some(0) if outcome == Some(RecordedOutcome::Known(ended::Outcome::Completed)) => {
                self.bring_home(&slot.story, &slot.worktree, record)
            }
            Some(130) => StoryRecord {
                state: StoryState::Cancelled,
                outcome: "cancelled".into(),
                note: format!(
                    "stopped by Ctrl-C; kept in {}; the next run resumes it",
                    self.shown(&slot.worktree)
                ),
                ..record
            },
            _ => StoryRecord {
                note: format!(
                    "its loop ended as {} ({}); kept for inspection in {} until `ralph clean`; `ralph log --name {name}` there shows why; the next run starts it again",
                    record.outcome,
                    code.map_or("killed".into(), |c| format!("exit {c}")),
                    self.shown(&slot.worktree)
                ),
                ..record
            },
        }
    }

    /// Rebase onto the base, verify there, merge, mark `passes`. Nothing is
    /// forced: each failure leaves the story on its branch with the command
    /// to go on.
    fn bring_home(&mut self, story: &Story, worktree: &Path, record: StoryRecord) -> StoryRecord {
        let root = self.project.root.clone();
        let branch = fanout::branch(&story.id);
        let shown = self.shown(worktree);
        let completed = StoryRecord {
            outcome: "completed".into(),
            ..record
        };
        // An agent that switched branches left its work elsewhere: say so, move nothing.
        let head = fg::current_branch(worktree).unwrap_or_else(|_| "a detached HEAD".into());
        if head != branch {
            return StoryRecord {
                state: StoryState::MergeFailed,
                note: format!(
                    "its worktree {shown} is on {head}, not {branch} (the agent switched branches); nothing was merged. Bring the work onto {branch} there, then run again"
                ),
                ..completed
            };
        }
        let message = format!(
            "{}: {} (left uncommitted by its loop)",
            story.id, story.title
        );
        if let Err(e) = fg::commit_leftovers(worktree, &message) {
            return StoryRecord {
                state: StoryState::MergeFailed,
                note: format!("could not commit the loop's work in {shown}: {e}"),
                ..completed
            };
        }
        match fg::rebase(worktree, &self.base) {
            Ok(true) => {}
            Ok(false) => {
                return StoryRecord {
                    state: StoryState::Conflict,
                    note: format!(
                        "conflicts with {base}; nothing was forced. Resolve: cd {shown} && git rebase {base} (fix, git add, git rebase --continue), then run the same `ralph run --parallel` again",
                        base = self.base
                    ),
                    ..completed
                };
            }
            Err(e) => {
                return StoryRecord {
                    state: StoryState::Conflict,
                    note: format!("the rebase onto {} failed: {e}", self.base),
                    ..completed
                };
            }
        }
        if let Some(verify) = &self.verify {
            let v = ralph_core::verify::run(verify, worktree, self.verify_timeout);
            if !v.passed {
                return StoryRecord {
                    state: StoryState::VerifyFailed,
                    note: format!(
                        "`{verify}` failed ({}) on {branch} rebased onto {}; fix it in {shown}, then run again. Output:\n{}",
                        v.status,
                        self.base,
                        ralph_core::messages::escape_controls(v.output_tail.trim_end())
                    ),
                    ..completed
                };
            }
        }
        if self.merge == MergeMode::None {
            return StoryRecord {
                state: StoryState::Ready,
                note: format!("rebased onto {} and verified; left on {branch}", self.base),
                ..completed
            };
        }
        let merge_message = format!("Merge {branch}: {}", story.title);
        if let Err(e) = fg::merge(&root, &branch, self.merge, &merge_message) {
            return StoryRecord {
                state: StoryState::MergeFailed,
                note: format!(
                    "the merge into {} was refused: {e}; the story stays on {branch}",
                    self.base
                ),
                ..completed
            };
        }
        if self.from_prd
            && let Err(e) = self.mark_passes(&story.id)
        {
            self.notes.push(format!(
                "⚠ {}: merged, but `passes` was not written: {e}",
                story.id
            ));
        }
        if let Err(e) = fg::remove_worktree(&root, worktree) {
            self.notes.push(format!(
                "⚠ {}: merged; its worktree was not removed ({e}); `ralph clean` removes it",
                story.id
            ));
        }
        StoryRecord {
            state: StoryState::Merged,
            note: String::new(),
            ..completed
        }
    }

    fn mark_passes(&self, id: &str) -> Result<(), String> {
        let _lock = self.project.lock().map_err(|e| e.to_string())?;
        let path = self.project.root.join(fanout::PRD);
        let text = safe_fs::read_text(&path, safe_fs::SMALL_FILE_CAP).map_err(|e| e.to_string())?;
        let updated = fanout::set_passes(&text, id)?;
        safe_fs::replace(&path, updated.as_bytes()).map_err(|e| e.to_string())
    }

    /// Records how the story stands, shows it, and adds its summary row.
    fn finish(&mut self, records: &Path, story: &Story, record: StoryRecord) {
        let path = records.join(format!("{}.json", story.id));
        let json = serde_json::to_string_pretty(&record).unwrap_or_default();
        if let Err(e) = safe_fs::replace(&path, json.as_bytes()) {
            self.notes
                .push(format!("⚠ {}: its record was not written: {e}", story.id));
        }
        let mark = match record.state {
            StoryState::Merged | StoryState::Ready => "✓",
            StoryState::Cancelled => "⏹",
            _ => "✗",
        };
        let line = format!(
            "{mark} {}: {} after {} iteration(s), {}",
            story.id,
            record.state.as_str(),
            record.iterations,
            format_duration(record.seconds)
        );
        self.event(&line);
        if !record.note.is_empty() {
            self.notes.push(format!("{}: {}", story.id, record.note));
        }
        self.rows.push(Row {
            story: story.id.clone(),
            outcome: record.state.as_str().to_owned(),
            iterations: record.iterations,
            seconds: record.seconds,
            tokens: record.tokens,
            branch: record.branch,
        });
    }

    fn shown(&self, path: &Path) -> String {
        super::display(&self.project, path)
    }

    /// A line that stays: above the live block on a terminal, plain otherwise.
    fn event(&mut self, line: &str) {
        if self.live {
            self.clear();
        }
        say!("{line}");
    }

    fn clear(&mut self) {
        if self.drawn > 0 {
            print!("\x1b[{}A\x1b[J", self.drawn);
            self.drawn = 0;
        }
    }

    /// The live block: one line per running loop (terminal only).
    fn redraw(&mut self, running: &[Slot]) {
        if !self.live {
            return;
        }
        self.clear();
        let mut out = std::io::stdout();
        for slot in running {
            let last: String = slot.last.chars().take(60).collect();
            let _ = writeln!(
                out,
                "\x1b[2K⠿ {} · {} · {}",
                slot.story.id,
                format_duration(slot.started.elapsed().as_secs()),
                ralph_core::display::line(&last)
            );
        }
        let _ = out.flush();
        self.drawn = running.len();
    }
}

/// The outcome, iterations and tokens of the newest history record of the
/// loop `name` in a worktree.
fn last_record(worktree: &Path, name: &str) -> (Option<RecordedOutcome>, u64, u64) {
    let history = Project {
        root: worktree.to_owned(),
    }
    .history_dir();
    let marker = format!("-{}", ralph_core::store::record_name(name));
    let newest = std::fs::read_dir(&history).ok().and_then(|entries| {
        entries
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|f| f.ends_with(".md") && f.contains(&marker))
            .max()
    });
    let Some(file) = newest else {
        return (None, 0, 0);
    };
    match safe_fs::read_text(&history.join(file), safe_fs::SMALL_FILE_CAP)
        .ok()
        .and_then(|t| LoopState::parse(&t).ok())
    {
        Some(s) => (s.outcome, s.iteration, s.progress.tokens_used),
        None => (None, 0, 0),
    }
}

/// Copies a worktree's loop history into the main tree's, so it outlives
/// the worktree (files already there are left alone).
fn keep_history(worktree: &Path, project: &Project) {
    let from = Project {
        root: worktree.to_owned(),
    }
    .history_dir();
    let Ok(entries) = std::fs::read_dir(&from) else {
        return;
    };
    let Ok(to) = project.ensure_dir(".claude/ralph/history") else {
        return;
    };
    for e in entries.flatten() {
        if e.file_type().is_ok_and(|t| t.is_file()) {
            let _ = safe_fs::copy_new(&e.path(), &to.join(e.file_name()));
        }
    }
}

/// `ralph plan [--matrix]`.
pub fn plan(args: PlanArgs) -> Outcome {
    let project = super::project();
    let open = fanout::open(&read_stories(&project.root)?);
    if args.matrix {
        say_json!("{}", fanout::matrix(&open));
        return Ok(());
    }
    if open.is_empty() {
        say!("No open stories in {}.", fanout::PRD);
    }
    let records = project.root.join(fanout::RECORDS);
    let has_records = safe_fs::check_dir(&project.root, fanout::RECORDS).unwrap_or(false);
    for s in &open {
        // What the last `ralph run --parallel` left it as, if anything.
        let state = has_records
            .then(|| read_record(&records, &s.id))
            .flatten()
            .map_or_else(|| "open".to_owned(), |r| r.state.as_str().to_owned());
        say!("{}  {state}  {}", s.id, s.title);
    }
    Ok(())
}

/// `ralph clean`: removes every worktree `ralph run --parallel` kept.
/// Branches stay: nothing a loop committed is lost.
pub fn clean() -> Outcome {
    let project = super::project();
    let root = &project.root;
    let dir = root.join(fanout::WORKTREES);
    if !safe_fs::check_dir(root, fanout::WORKTREES)? {
        say!("No worktrees to remove.");
        return Ok(());
    }
    let mut names: Vec<String> = std::fs::read_dir(&dir)?
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| valid_id(n))
        .collect();
    names.sort();
    let mut failed = false;
    for name in &names {
        let path = dir.join(name);
        match fg::remove_worktree(root, &path) {
            Ok(()) => say!(
                "Removed {} (its branch {} stays)",
                super::display(&project, &path),
                fanout::branch(name)
            ),
            Err(e) => {
                failed = true;
                say!("⚠ {}: {e}", super::display(&project, &path));
            }
        }
    }
    let _ = fg::prune(root);
    if names.is_empty() {
        say!("No worktrees to remove.");
    }
    if failed {
        return Err("some worktrees were not removed".to_owned().into());
    }
    Ok(())
}
