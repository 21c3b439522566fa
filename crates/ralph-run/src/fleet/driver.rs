//! The fleet's driver (`ralph run --parallel N`, `ralph plan`, `ralph
//! clean`): each story runs as a child `ralph run` (the same driver, rules,
//! guards and verify gate as a single run) in its own git worktree on
//! `ralph/<story-id>`. Finished stories are rebased onto the base branch,
//! verified there and merged home one at a time. What each step means is
//! decided in `fleet`, the repository is touched through `fleet::git`; here
//! are the child processes and the order of the steps. What happens is told
//! as [`FleetEvent`]s: `screen.rs` words them, the binary owns the terminal.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::fleet::child::{ChildFlags, StoryGate};
use crate::fleet::git::{self as fg, FleetError};
use crate::fleet::{
    self, AfterRun, Homecoming, MergeMode, Next, PrdError, Story, SummaryRow, Trip,
};
use ralph_control::approval::{Secret, StoryCommands};
use ralph_core::decide::gate_place;
use ralph_fs::process::GroupChild;
use ralph_fs::safe_fs;
use ralph_state::fields::outcome::{self as ended, RecordedOutcome};
use ralph_state::fields::stories::valid_id;
use ralph_state::storage::fleet::{
    self as story_records, RECORDS, StoryRecord, WORKTREES, branch, loop_name,
};
use ralph_state::storage::store::Project;
use ralph_state::time::format_duration;

/// How long the child runs get to record their loops after Ctrl-C.
const STOP_GRACE: Duration = Duration::from_secs(30);
/// How long an ended child's last lines get to reach the channel: its
/// pipes close as it exits, unless a process it left behind holds them.
const OUTPUT_GRACE: Duration = Duration::from_secs(2);

/// A line a child run printed, with its story's id.
type Line = (String, String);

/// What the fleet tells as it goes.
pub enum FleetEvent<'a> {
    /// A line that stays (above the live block on a terminal).
    Said(String),
    /// A line a child run printed, with its story's id.
    Output { id: &'a str, line: &'a str },
    /// The loops running now, for a live block (empty at the end).
    Running(&'a [Running]),
}

/// One running loop, as a live block shows it.
pub struct Running {
    pub id: String,
    pub seconds: u64,
    /// The last line its run printed.
    pub last: String,
}

/// What a fleet run is asked to do, as the command line gave it.
pub struct FleetRequest<'a> {
    pub merge: &'a str,
    pub prd: Option<&'a str>,
    /// Tasks on the command line (else the PRD's stories).
    pub tasks: &'a [String],
    /// `--story` ids.
    pub only: &'a [String],
    pub promise: String,
    /// The guards the command line arms, read once (defaults and caps as
    /// every loop has them): the fleet's own gate runs `verify` with them.
    pub guards: ralph_state::fields::guards::Guards,
    /// Every child `ralph run`'s settings (the task comes on stdin).
    pub child: ChildFlags,
    /// `--approve-commands`: the code of the PRD's story commands the user approved.
    pub approve_commands: Option<&'a str>,
}

/// How the run ended: the summary rows, the notes, whether Ctrl-C stopped it.
pub struct Summary {
    pub rows: Vec<SummaryRow>,
    pub notes: Vec<String>,
    pub interrupted: bool,
}

/// The promise each story's loop gives: the one chosen, or the default.
pub fn promise(chosen: Option<&str>) -> String {
    chosen.map_or_else(|| fleet::DEFAULT_PROMISE.to_owned(), str::to_owned)
}

/// One loop running now.
struct Slot {
    story: Story,
    child: GroupChild,
    worktree: PathBuf,
    started: Instant,
    last: String,
    /// The threads that forward its stdout and stderr, done at their EOF.
    readers: Vec<std::thread::JoinHandle<()>>,
}

/// The child runs going on now, and the lines they print.
struct Pool {
    running: Vec<Slot>,
    sender: mpsc::Sender<Line>,
    lines: mpsc::Receiver<Line>,
    /// When Ctrl-C came, if it did.
    interrupted: Option<Instant>,
    killed: bool,
}

/// What the run needs to know at every step.
struct Fleet<'e> {
    project: Project,
    base: String,
    merge: MergeMode,
    verify: Option<String>,
    verify_timeout: Duration,
    /// How the fleet's own gate is confined (always, when the agents run sandboxed).
    gate_confinement: ralph_fs::gate_jail::GateConfinement,
    /// The gate's setup step and held-out set (its digest taken at start).
    gate: ralph_state::fields::guards::Guards,
    /// Stories come from the PRD (so `passes` is written back).
    from_prd: bool,
    /// The stories that pass or were merged in this run: a story whose
    /// `dependsOn` are all here may start (its worktree then holds their work).
    done: std::collections::HashSet<String>,
    /// Where each story's record is kept.
    records: PathBuf,
    /// The promise each story's loop gives, and every child's settings.
    promise: String,
    child: ChildFlags,
    rows: Vec<SummaryRow>,
    notes: Vec<String>,
    tell: &'e mut dyn FnMut(FleetEvent),
}

/// Runs the fleet: everything is checked before anything runs (the flags,
/// the base branch, the stories), then the stories run `n` at a time until
/// none is left or `stop` is set (Ctrl-C).
pub fn run(
    project: Project,
    request: FleetRequest,
    n: usize,
    stop: &AtomicBool,
    tell: &mut dyn FnMut(FleetEvent),
) -> Result<Summary, FleetError> {
    let merge = MergeMode::parse(request.merge).unwrap_or(MergeMode::Ff);
    let root = project.root.clone();
    let base = fg::current_branch(&root)?;
    let (stories, from_prd, done) = select(&root, &request, tell)?;
    fg::ensure_excluded(&root)?;
    let records = project.ensure_dir(RECORDS)?;
    let gate_confinement =
        ralph_state::gate_sandbox::confinement(&request.guards, request.child.sandbox.is_some());
    let mut gate = request.guards.clone();
    // The held-out set as it is now is the one every homecoming gate
    // runs; a set changed during the run is refused there.
    gate.holdout_digest = gate
        .holdout
        .as_deref()
        .and_then(|dir| ralph_fs::gate_tree::held_out_digest(Path::new(dir)).ok());
    let mut fleet = Fleet {
        gate,
        project,
        base,
        merge,
        verify: request.guards.verify,
        verify_timeout: Duration::from_secs(request.guards.verify_timeout_secs),
        gate_confinement,
        from_prd,
        done,
        records,
        child: request.child,
        promise: request.promise,
        rows: Vec::new(),
        notes: Vec::new(),
        tell,
    };
    let queue = fleet.triage(stories);
    let interrupted = fleet.drive(queue, n, stop);
    Ok(Summary {
        rows: fleet.rows,
        notes: fleet.notes,
        interrupted,
    })
}

/// The stories this run is about: tasks from the command line, or the open
/// stories of the PRD (only those named with --story, if any); whether they
/// come from the PRD; the ids of the stories that pass already.
fn select(
    root: &Path,
    request: &FleetRequest,
    tell: &mut dyn FnMut(FleetEvent),
) -> Result<(Vec<Story>, bool, std::collections::HashSet<String>), FleetError> {
    if request
        .prd
        .is_some_and(|p| p != ralph_state::fields::stories::DEFAULT_PRD)
    {
        return Err(FleetError::OtherPrd);
    }
    if !request.tasks.is_empty() {
        if !request.only.is_empty() {
            return Err(FleetError::StoryWithTasks);
        }
        return Ok((
            fleet::tasks(request.tasks),
            false,
            std::collections::HashSet::new(),
        ));
    }
    let all = read_stories(root)?;
    lint_before_start(root, tell)?;
    for id in request.only {
        if !valid_id(id) || !all.iter().any(|s| &s.id == id) {
            return Err(FleetError::NoSuchStory(id.clone()));
        }
    }
    // The story commands run in each child's gate and at the trip home: only the list
    // the user approved (read once, here; every story below is taken from this read).
    let list = StoryCommands::of(fleet::PRD, &all, &Secret::of_user());
    if !list.approved_by(request.approve_commands) {
        return Err(FleetError::CommandsUnapproved {
            list: Box::new(list),
            given: request.approve_commands.map(str::to_owned),
        });
    }
    let open: Vec<Story> = fleet::open(&all)
        .into_iter()
        .filter(|s| request.only.is_empty() || request.only.contains(&s.id))
        .collect();
    for story in all.iter().filter(|s| !s.passes) {
        let line = match (&story.blocked, &story.verify) {
            (Some(why), _) => format!(
                "{}: blocked ({}); skipped",
                ralph_fs::display::line(&story.id),
                ralph_fs::display::line(why)
            ),
            (None, Some(command)) => format!(
                "{}: its check `{}` runs before it comes home",
                ralph_fs::display::line(&story.id),
                ralph_fs::display::line(command)
            ),
            (None, None) => continue,
        };
        tell(FleetEvent::Said(line));
    }
    let passed = all
        .iter()
        .filter(|s| s.passes)
        .map(|s| s.id.clone())
        .collect();
    Ok((open, true, passed))
}

/// `ralph prd lint` on the PRD before anything starts: its errors refuse the
/// run, its warnings are told.
fn lint_before_start(root: &Path, tell: &mut dyn FnMut(FleetEvent)) -> Result<(), FleetError> {
    use ralph_state::fields::prd_lint::{self, Severity};
    let text = safe_fs::read_text(&root.join(fleet::PRD), safe_fs::SMALL_FILE_CAP)?;
    let findings = prd_lint::lint(fleet::PRD, &text);
    if prd_lint::has_errors(&findings) {
        let errors: Vec<String> = findings
            .iter()
            .filter(|f| f.severity == Severity::Error)
            .map(prd_lint::Finding::line)
            .collect();
        return Err(FleetError::PrdLint(errors.join("\n")));
    }
    for warning in &findings {
        tell(FleetEvent::Said(format!(
            "`ralph prd lint`: {}",
            warning.line()
        )));
    }
    Ok(())
}

/// The stories of the project's PRD.
pub(crate) fn read_stories(root: &Path) -> Result<Vec<Story>, FleetError> {
    let text = match safe_fs::read_text(&root.join(fleet::PRD), safe_fs::SMALL_FILE_CAP) {
        Ok(t) => t,
        Err(e) if e.is_not_found() => return Err(FleetError::NoPrd),
        Err(source) => {
            let file = fleet::PRD.to_owned();
            return Err(PrdError::Unreadable { file, source }.into());
        }
    };
    Ok(fleet::stories(&text)?)
}

/// The story commands of the project's PRD and the code that approves them: the
/// same list and code as `ralph start --prd` (every story's command, so the code stays
/// as stories pass and changes only when a command does).
pub fn story_commands(root: &Path) -> Result<StoryCommands, FleetError> {
    Ok(StoryCommands::of(
        fleet::PRD,
        &read_stories(root)?,
        &Secret::of_user(),
    ))
}

impl Fleet<'_> {
    /// Stories whose loop completed earlier only come home again (from
    /// ralph's own worktree); stories merged or left ready are skipped; the
    /// rest are queued to run.
    fn triage(&mut self, stories: Vec<Story>) -> VecDeque<Story> {
        let mut queue = VecDeque::new();
        for story in stories {
            let record = story_records::read_record(&self.records, &story.id);
            let merging = self.merge != MergeMode::None;
            match (fleet::next(record.as_ref(), merging), record) {
                (Next::Skip, record) => self.event(&format!(
                    "{}: {} earlier (branch {}); skipped. To run it again, delete {}/{}.json",
                    story.id,
                    record.as_ref().map_or("", |r| r.state.as_str()),
                    branch(&story.id),
                    RECORDS,
                    story.id
                )),
                (Next::BringHome, Some(record)) if self.has_own_worktree(&story.id) => {
                    self.event(&format!(
                        "{}: its loop completed earlier; bringing it home again",
                        story.id
                    ));
                    let worktree = fg::worktree_path(&self.project.root, &story.id);
                    let record = self.bring_home(&story, &worktree, record);
                    self.finish(&story, record);
                }
                // No worktree of ralph's (after `ralph clean`, say): the loop
                // runs again on the story's branch, which keeps its work.
                (Next::BringHome | Next::RunLoop, _) => queue.push_back(story),
            }
        }
        queue
    }

    /// Whether git lists ralph's worktree for the story, on its branch.
    fn has_own_worktree(&self, id: &str) -> bool {
        let root = &self.project.root;
        fg::is_registered(root, &fg::worktree_path(root, id), &branch(id))
    }

    /// Runs the queued stories, `n` at a time, until none is left running;
    /// whether Ctrl-C stopped the run.
    fn drive(&mut self, mut queue: VecDeque<Story>, n: usize, stop: &AtomicBool) -> bool {
        let (sender, lines) = mpsc::channel::<Line>();
        let mut pool = Pool {
            running: Vec::new(),
            sender,
            lines,
            interrupted: None,
            killed: false,
        };
        loop {
            if stop.load(Ordering::SeqCst) && pool.interrupted.is_none() {
                self.event("⏹ Ctrl-C: stopping every agent; each loop is recorded as cancelled");
                pool.interrupt();
            }
            pool.kill_after_grace();
            while pool.interrupted.is_none() && pool.running.len() < n {
                let Some(story) = self.next_startable(&mut queue) else {
                    break;
                };
                self.launch(&mut pool, story);
            }
            if pool.running.is_empty() {
                self.never_started(queue, pool.interrupted.is_some());
                break;
            }
            self.take_line(&mut pool);
            self.reap(&mut pool);
            let running: Vec<Running> = pool.running.iter().map(Slot::shown).collect();
            (self.tell)(FleetEvent::Running(&running));
        }
        (self.tell)(FleetEvent::Running(&[]));
        pool.interrupted.is_some()
    }

    /// The first queued story whose prerequisites have all been merged (or
    /// passed before the run), taken out of the queue.
    fn next_startable(&self, queue: &mut VecDeque<Story>) -> Option<Story> {
        let at = queue
            .iter()
            .position(|s| s.depends_on.iter().all(|d| self.done.contains(d)))?;
        queue.remove(at)
    }

    /// The stories left queued when nothing runs any more: each waits for a
    /// prerequisite that was not merged (or Ctrl-C came first), and is
    /// recorded as not started, with what it waits for.
    fn never_started(&mut self, queue: VecDeque<Story>, interrupted: bool) {
        if interrupted {
            return;
        }
        for story in queue {
            let waits: Vec<&str> = story
                .depends_on
                .iter()
                .map(String::as_str)
                .filter(|d| !self.done.contains(*d))
                .collect();
            let (was, are) = if waits.len() == 1 {
                ("was", "it is")
            } else {
                ("were", "they are")
            };
            let why = FleetError::Waiting(waits.join(", "), was, are);
            self.finish(&story, StoryRecord::not_started(&story.id, &why));
        }
    }

    /// Starts the story's child run, or records why it could not start.
    fn launch(&mut self, pool: &mut Pool, story: Story) {
        match self.start(&story, &pool.sender) {
            Ok(slot) => {
                self.event(&format!(
                    "▶ {}: started in {} on {}",
                    story.id,
                    self.shown(&slot.worktree),
                    branch(&story.id)
                ));
                pool.running.push(slot);
            }
            Err(e) => self.finish(&story, StoryRecord::not_started(&story.id, &e)),
        }
    }

    /// Waits a little for a line from a child run: told as it comes, and
    /// kept as its story's last word for the live block.
    fn take_line(&mut self, pool: &mut Pool) {
        if let Ok((id, line)) = pool.lines.recv_timeout(Duration::from_millis(200)) {
            if let Some(slot) = pool.running.iter_mut().find(|s| s.story.id == id) {
                slot.last.clone_from(&line);
            }
            (self.tell)(FleetEvent::Output {
                id: &id,
                line: &line,
            });
        }
    }

    /// Every child run that has ended: its story is recorded (and brought
    /// home when its loop completed).
    fn reap(&mut self, pool: &mut Pool) {
        let mut i = 0;
        while i < pool.running.len() {
            match pool.running[i].child.child.try_wait() {
                Ok(Some(status)) => {
                    let slot = pool.running.remove(i);
                    slot.wait_for_output();
                    // Whatever it printed last is still in the channel: drain it.
                    while let Ok((id, line)) = pool.lines.try_recv() {
                        (self.tell)(FleetEvent::Output {
                            id: &id,
                            line: &line,
                        });
                    }
                    let record = self.ended(&slot, status.code());
                    self.finish(&slot.story, record);
                }
                Ok(None) | Err(_) => i += 1,
            }
        }
    }

    /// Prepares the story's worktree and starts its `ralph run` there.
    fn start(&self, story: &Story, sender: &mpsc::Sender<Line>) -> Result<Slot, FleetError> {
        let worktree = fg::prepare_worktree(&self.project, &story.id, &self.base)?;
        let mut command = ralph_fs::process::this_program().map_err(FleetError::NoSelf)?;
        command
            .arg("run")
            .arg("--name")
            .arg(loop_name(&story.id))
            .args(self.child.args(&self.promise, StoryGate::from(story)))
            .current_dir(&worktree)
            .env("CLAUDE_PROJECT_DIR", &worktree)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut group =
            ralph_fs::process::spawn_in_group(&mut command).map_err(FleetError::NotStarted)?;
        let child = &mut group.child;
        if let Some(mut stdin) = child.stdin.take() {
            let _ = stdin.write_all(fleet::prompt(story, &self.promise).as_bytes());
        }
        let readers = forward_lines(child, &story.id, sender);
        Ok(Slot {
            story: story.clone(),
            child: group,
            worktree,
            started: Instant::now(),
            last: "starting".into(),
            readers,
        })
    }

    /// A child run ended: read how its loop ended, keep its history, and
    /// bring a completed story home.
    fn ended(&mut self, slot: &Slot, code: Option<i32>) -> StoryRecord {
        let name = loop_name(&slot.story.id);
        let last = fg::last_run(&slot.worktree, &name);
        fg::keep_history(&slot.worktree, &self.project);
        let completed = last.outcome == Some(RecordedOutcome::Known(ended::Outcome::Completed));
        let record = StoryRecord {
            cost_usd: last.cost_usd,
            ..StoryRecord::ended(
                &slot.story.id,
                last.outcome
                    .as_deref()
                    .unwrap_or(ended::Outcome::Failed.as_str()),
                last.iterations,
                last.tokens,
                slot.started.elapsed().as_secs(),
            )
        };
        match fleet::after_run(record, code, completed, &self.shown(&slot.worktree)) {
            AfterRun::BringHome(record) => self.bring_home(&slot.story, &slot.worktree, record),
            AfterRun::Stays(record) => record,
        }
    }

    /// Brings a completed story home and records how that went.
    fn bring_home(&mut self, story: &Story, worktree: &Path, record: StoryRecord) -> StoryRecord {
        let branch = branch(&story.id);
        let home = self.homecoming(story, worktree, &branch);
        if matches!(home, Homecoming::Merged) {
            self.after_merge(story, worktree);
        }
        let shown = self.shown(worktree);
        let trip = Trip {
            branch: &branch,
            base: &self.base,
            shown: &shown,
        };
        home.record(record, trip)
    }

    /// Rebase onto the base, verify there, merge. Nothing is forced: the
    /// first step that fails leaves the story on its branch.
    fn homecoming(&self, story: &Story, worktree: &Path, branch: &str) -> Homecoming {
        // An agent that switched branches left its work elsewhere: move nothing.
        let head = fg::current_branch(worktree).unwrap_or_else(|_| "a detached HEAD".into());
        if head != branch {
            return Homecoming::SwitchedBranch { head };
        }
        let message = format!(
            "{}: {} (left uncommitted by its loop)",
            story.id, story.title
        );
        if let Err(e) = fg::commit_leftovers(worktree, &message) {
            return Homecoming::NotCommitted(e);
        }
        match fg::rebase(worktree, &self.base) {
            Ok(true) => {}
            Ok(false) => return Homecoming::Conflict,
            Err(e) => return Homecoming::RebaseFailed(e),
        }
        // The story's own check, as read from the PRD when this run began
        // (an edit on the story's branch changes nothing), then the run's.
        // In the gate's snapshot of the worktree (ignored files the agent
        // left there never reach it), prepared once for both commands.
        let registry = ralph_state::storage::registry::from_env();
        let paths = ralph_state::fields::state::PathRules::default();
        let place = gate_place::Place::of(
            worktree,
            registry.as_ref(),
            &story.id,
            &self.gate,
            &paths,
            self.gate_confinement.clone(),
        );
        let prepared = gate_place::prepare(&place, self.verify_timeout);
        for command in story.verify.iter().chain(self.verify.iter()) {
            let (verification, _, _) =
                gate_place::run_keeping(prepared.clone(), command, self.verify_timeout);
            if !verification.passed {
                let command = command.clone();
                return Homecoming::VerifyFailed {
                    command,
                    verification,
                };
            }
        }
        if self.merge == MergeMode::None {
            return Homecoming::Ready;
        }
        let merge_message = format!("Merge {branch}: {}", story.title);
        match fg::merge(&self.project.root, branch, self.merge, &merge_message) {
            Ok(()) => Homecoming::Merged,
            Err(e) => Homecoming::MergeRefused(e),
        }
    }

    /// After a merge: `passes` written back, the worktree removed. What
    /// fails here is told in a note; the merge stands.
    fn after_merge(&mut self, story: &Story, worktree: &Path) {
        let id = story.id.as_str();
        self.done.insert(id.to_owned());
        if let Err(e) = fg::merge_notes(&self.project, story) {
            self.notes.push(format!(
                "⚠ {id}: merged, but its notes were not added to {}: {e}",
                fleet::PROGRESS
            ));
        }
        if self.from_prd
            && let Err(e) = fg::mark_passes(&self.project, id)
        {
            self.notes
                .push(format!("⚠ {id}: merged, but `passes` was not written: {e}"));
        }
        if let Err(e) = fg::remove_worktree(&self.project.root, worktree) {
            self.notes.push(format!(
                "⚠ {id}: merged; its worktree was not removed ({e}); `ralph clean` removes it"
            ));
        }
    }

    /// Records how the story stands, tells it, and adds its summary row.
    fn finish(&mut self, story: &Story, record: StoryRecord) {
        if let Err(e) = story_records::write_record(&self.records, &story.id, &record) {
            self.notes
                .push(format!("⚠ {}: its record was not written: {e}", story.id));
        }
        let line = format!(
            "{} {}: {} after {}, {}",
            fleet::mark(record.state),
            story.id,
            record.state.as_str(),
            ralph_state::plural::iterations(record.iterations),
            format_duration(record.seconds)
        );
        self.event(&line);
        if !record.note.is_empty() {
            self.notes.push(format!("{}: {}", story.id, record.note));
        }
        self.rows.push(SummaryRow::of(&story.id, &record));
    }

    fn shown(&self, path: &Path) -> String {
        self.project.shown(path)
    }

    fn event(&mut self, line: &str) {
        (self.tell)(FleetEvent::Said(line.to_owned()));
    }
}

impl Slot {
    /// Waits (at most [`OUTPUT_GRACE`]) until everything the child printed
    /// is in the channel: it may have exited before its readers read it all.
    fn wait_for_output(&self) {
        let deadline = Instant::now() + OUTPUT_GRACE;
        while !self
            .readers
            .iter()
            .all(std::thread::JoinHandle::is_finished)
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn shown(&self) -> Running {
        Running {
            id: self.story.id.clone(),
            seconds: self.started.elapsed().as_secs(),
            last: self.last.clone(),
        }
    }
}

impl Pool {
    /// Ctrl-C: SIGINT to every child run, so each records its loop as cancelled.
    fn interrupt(&mut self) {
        self.interrupted = Some(Instant::now());
        for slot in &mut self.running {
            fg::interrupt(&mut slot.child.child);
        }
    }

    /// A run that does not stop within its grace time is killed (its loop
    /// then stays as it was; `ralph cancel` there ends it).
    fn kill_after_grace(&mut self) {
        let overdue = self.interrupted.is_some_and(|t| t.elapsed() > STOP_GRACE);
        if self.killed || !overdue {
            return;
        }
        self.killed = true;
        for slot in &mut self.running {
            let _ = ralph_fs::process::stop_group(&mut slot.child, ralph_fs::process::Stop::Kill);
        }
    }
}

/// Sends each non-blank line the child prints (stdout and stderr) to the
/// run, tagged with the story's id, from a thread of its own; the threads.
fn forward_lines(
    child: &mut Child,
    id: &str,
    sender: &mpsc::Sender<Line>,
) -> Vec<std::thread::JoinHandle<()>> {
    let outputs = [
        child
            .stdout
            .take()
            .map(|o| Box::new(o) as Box<dyn Read + Send>),
        child
            .stderr
            .take()
            .map(|e| Box::new(e) as Box<dyn Read + Send>),
    ];
    let forward = |out: Box<dyn Read + Send>| {
        let sender = sender.clone();
        let id = id.to_owned();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if !line.trim().is_empty() && sender.send((id.clone(), line)).is_err() {
                    break;
                }
            }
        })
    };
    outputs.into_iter().flatten().map(forward).collect()
}

/// One story of `ralph plan`, with what the last `ralph run --parallel`
/// left it as ("open" when nothing).
pub struct Planned {
    pub story: Story,
    pub state: String,
}

/// `ralph plan`: the stories still to do in waves (`stories::waves`: wave 1
/// can start now, each later one once the one before is merged), and apart
/// those that wait for a person (blocked, or after a blocked story).
pub struct StoryPlan {
    pub waves: Vec<Vec<Planned>>,
    pub held: Vec<Planned>,
}

/// `ralph plan`: the PRD's stories still to do, in waves.
pub fn plan(project: &Project) -> Result<StoryPlan, FleetError> {
    let all = read_stories(&project.root)?;
    let records = project.root.join(RECORDS);
    let has_records = safe_fs::check_dir(&project.root, RECORDS).unwrap_or(false);
    let planned = |s: &Story| {
        let state = has_records
            .then(|| story_records::read_record(&records, &s.id))
            .flatten()
            .map_or_else(|| "open".to_owned(), |r| r.state.as_str().to_owned());
        Planned {
            story: s.clone(),
            state,
        }
    };
    let (waves, held) = ralph_state::fields::stories::waves(&all);
    Ok(StoryPlan {
        waves: waves
            .iter()
            .map(|w| w.iter().map(|s| planned(s)).collect())
            .collect(),
        held: held.iter().map(|s| planned(s)).collect(),
    })
}

/// `ralph clean`: removes every worktree `ralph run --parallel` kept, each
/// step told. Branches stay, and what a worktree holds uncommitted is
/// committed to its branch first: nothing a loop (or the user) did there is
/// lost.
pub fn clean(project: &Project, tell: &mut dyn FnMut(String)) -> Result<(), FleetError> {
    let root = &project.root;
    let dir = root.join(WORKTREES);
    if !safe_fs::check_dir(root, WORKTREES)? {
        tell("No worktrees to remove.".to_owned());
        return Ok(());
    }
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .map_err(FleetError::ListWorktrees)?
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| valid_id(n))
        .collect();
    names.sort();
    let mut failed = false;
    for name in &names {
        let path = dir.join(name);
        let shown = project.shown(&path);
        let branch = branch(name);
        // What the loop left uncommitted goes onto its branch first: the
        // branch staying is only true of work that is on it.
        match keep_uncommitted(root, &path, name, &branch) {
            Ok(true) => tell(format!(
                "Committed the uncommitted work in {shown} to {branch}"
            )),
            Ok(false) => {}
            Err(e) => {
                failed = true;
                tell(format!(
                    "⚠ {shown}: not removed: it holds uncommitted work that could not be committed ({e}). Commit it there (cd {shown} && git add -A && git commit) or move it away, then run `ralph clean` again"
                ));
                continue;
            }
        }
        match fg::remove_worktree(root, &path) {
            Ok(()) => tell(format!("Removed {shown} (its branch {branch} stays)")),
            Err(e) => {
                failed = true;
                tell(format!("⚠ {shown}: {e}"));
            }
        }
    }
    let _ = fg::prune(root);
    if names.is_empty() {
        tell("No worktrees to remove.".to_owned());
    }
    if failed {
        return Err(FleetError::NotAllRemoved);
    }
    Ok(())
}

/// Commits what a kept worktree holds uncommitted to its own branch, only
/// when git itself lists it as a worktree on that branch (a planted folder
/// is never committed from); `false` when there was nothing.
fn keep_uncommitted(root: &Path, path: &Path, id: &str, branch: &str) -> Result<bool, FleetError> {
    if !fg::is_registered(root, path, branch) {
        return Ok(false);
    }
    fg::commit_leftovers(
        path,
        &format!("{id}: left uncommitted in its worktree, kept by `ralph clean`"),
    )
}
