//! Why a step of the fleet failed: one error type for the driver and its
//! git side, below both (the rules in `fleet` name it too).

use std::path::PathBuf;

use ralph_fs::safe_fs::FsError;
use ralph_state::fields::stories::PrdError;
use ralph_state::storage::store::StoreError;

/// Why a step of `--parallel` failed. A story's step failing ends up in
/// that story's note (the run goes on); the run's own steps fail the run.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    #[error("could not run git: {0}")]
    NoGit(std::io::Error),
    /// git ran and refused: its command, status and own message (escaped).
    #[error("`git {command}` failed ({status}){}", said(.stderr))]
    Git {
        command: String,
        status: std::process::ExitStatus,
        stderr: String,
    },
    #[error(
        "the main tree is not on a branch (detached HEAD); check out the branch the stories should be merged into"
    )]
    DetachedHead,
    /// The checked-out branch's name could be read by git as an option.
    #[error(
        "the main tree's branch {0:?} is not a name ralph passes to git (it starts with `-` or holds characters git refuses in a branch name); check out a branch with a plain name"
    )]
    UnsafeBranch(String),
    /// git refused to commit for want of a name and email.
    #[error(
        "`git {command}` could not commit: git knows no name and email to commit with. Set them (`git config --global user.name \"Your Name\"` and `git config --global user.email you@example.com`, or without --global for this repository only), then run the same `ralph run --parallel` again"
    )]
    NoIdentity { command: String },
    #[error("{} exists but is not a worktree on {branch}; remove it with `ralph clean`", .path.display())]
    NotAWorktree { path: PathBuf, branch: String },
    #[error("cannot find ralph itself: {0}")]
    NoSelf(std::io::Error),
    #[error("could not start `ralph run`: {0}")]
    NotStarted(std::io::Error),
    #[error("some worktrees were not removed")]
    NotAllRemoved,
    /// The worktrees' folder could not be listed.
    #[error(transparent)]
    ListWorktrees(std::io::Error),
    #[error("--hand-back-after and --force go with a single loop, not with --parallel")]
    SingleLoopFlags,
    #[error(
        "--parallel runs the stories of {}; another PRD (--prd=PATH) is for a single loop",
        ralph_state::fields::stories::DEFAULT_PRD
    )]
    OtherPrd,
    #[error(
        "--story picks stories of ralph/prd.json; with tasks on the command line, leave it out"
    )]
    StoryWithTasks,
    #[error("--story {}: no story with that id in {}", ralph_fs::display::line(.0), ralph_state::fields::stories::DEFAULT_PRD)]
    NoSuchStory(String),
    #[error(
        "no {} here: write one (`ralph init`), or name the tasks: ralph run --parallel 2 \"task one\" \"task two\"",
        ralph_state::fields::stories::DEFAULT_PRD
    )]
    NoPrd,
    /// The PRD's story commands the user has not approved (`given`: a code that does
    /// not match them); the text lists them and says how to approve.
    #[error("{}", .list.fleet_refusal(.given.as_deref()))]
    CommandsUnapproved {
        list: Box<ralph_control::approval::StoryCommands>,
        given: Option<String>,
    },
    /// The PRD has findings `ralph prd lint` counts as errors (one a line).
    #[error(
        "{prd} does not pass `ralph prd lint`; nothing was started. Fix these, then run again:\n{0}",
        prd = ralph_state::fields::stories::DEFAULT_PRD
    )]
    PrdLint(String),
    /// A story whose prerequisites (`dependsOn`) were not merged in this run.
    #[error(
        "not started: it depends on {}, which {} not merged; it starts in a run once {} merged (or marked passing)",
        .0, .1, .2
    )]
    Waiting(String, &'static str, &'static str),
    /// A fleet budget's ledger file that does not hold a dollar amount.
    #[error(
        "the fleet budget's ledger file {file} does not hold a dollar amount ({why}); every job's share counts, so nothing starts until it does: remove the file only if that job never ran"
    )]
    Ledger { file: String, why: String },
    /// A job that finds the fleet's whole budget spent or taken.
    #[error(
        "the fleet's budget of {total} is spent or taken by the other jobs ({committed}); this job does not start"
    )]
    FleetBudgetSpent { total: String, committed: String },
    #[error(transparent)]
    Prd(#[from] PrdError),
    #[error(transparent)]
    Fs(#[from] FsError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A flag or a story the user named is wrong: a usage error; the rest fail.
impl ralph_fs::error::Exit for FleetError {
    fn exit_class(&self) -> ralph_fs::error::ExitClass {
        match self {
            Self::SingleLoopFlags
            | Self::OtherPrd
            | Self::StoryWithTasks
            | Self::NoSuchStory(_)
            | Self::NoPrd
            | Self::PrdLint(_)
            | Self::CommandsUnapproved { .. } => ralph_fs::error::ExitClass::Usage,
            _ => ralph_fs::error::ExitClass::Failure,
        }
    }
}

/// git's own message after a colon, when it said anything.
fn said(stderr: &str) -> String {
    if stderr.is_empty() {
        String::new()
    } else {
        format!(": {stderr}")
    }
}
