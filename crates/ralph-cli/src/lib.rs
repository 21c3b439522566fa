//! The `ralph` command line, declared with clap: every command, its options and its help
//! text, and the flags turned into the libraries' requests. The binary parses with it and
//! calls the crates (as uv keeps its clap tree in `uv-cli`, so the binary stays the few
//! files that call and print).
//!
//! Internal to ralph: its API is the `ralph` command and the plugin, not this
//! crate; `pub` here names only what another of ralph's crates uses.

use clap::{Args, Parser, Subcommand};
use ralph_control::arguments::OptionKind;
use ralph_state::fields::guards::{self, GuardSettings};

#[derive(Debug, Parser)]
#[command(
    name = "ralph",
    version,
    about = "Keep a coding agent working on one task until it is really done",
    long_about = "ralph runs a \"Ralph loop\" inside Claude Code: its Stop hook feeds the same prompt back \
turn after turn until the agent gives the completion promise, a limit or a guard ends the loop, or you cancel it.\n\n\
Exit codes: 0 success (including \"nothing to do\"); 1 the command failed (message on stderr); 2 bad usage.\n\
The Stop hook (`ralph hook stop`) always exits 0 with a valid answer.",
    after_help = "Examples:\n  ralph start --max-iterations 20 --completion-promise DONE \"Make the tests pass\"\n  ralph status\n  ralph cancel\n  ralph init --template marketing"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Claude Code hook entry points (reads the event JSON on stdin)
    #[command(subcommand, after_help = HOOK_EXAMPLES)]
    Hook(HookCommand),
    /// Arm a loop for this session
    #[command(after_help = ralph_control::arguments::start_help())]
    Start(Box<StartArgs>),
    /// End a loop now (recorded as cancelled)
    #[command(
        after_help = "Examples:\n  ralph cancel                 # this session's loop, or the only one\n  ralph cancel --name docs\n  ralph cancel --all"
    )]
    Cancel(SelectArgs),
    /// Take over a loop file this user did not arm here (cloned, copied or edited), after reading it
    #[command(after_help = ADOPT_EXAMPLES)]
    Adopt(AdoptArgs),
    /// Pause a loop: stops go through and are not counted until `ralph resume`
    #[command(after_help = "Examples:\n  ralph pause\n  ralph pause --name docs")]
    Pause(SelectArgs),
    /// Resume a paused loop; with --add-*, raise a loop's bounds, arming again one that ended at
    /// its iteration limit or a budget (its count, spend and log kept)
    #[command(
        after_help = "Examples:\n  ralph resume\n  ralph resume --name docs\n  ralph resume --name docs --add-iterations 5 --add-cost 2"
    )]
    Resume(ResumeArgs),
    /// Put back the work tree of a loop's checkpoint (paused or ended loops only); the tree it
    /// replaces is kept as a checkpoint first
    #[command(
        after_help = "Examples:\n  ralph rollback --to 3\n  ralph rollback --to 3 --name docs\n  ralph rollback --to undo-1 --name docs   # undo the last rollback\n\nA checkpoint is kept at every counted stop of a loop in a git project, as refs/ralph/<loop>/<arming>/<iteration>;\nignored files and .claude/ are never touched."
    )]
    Rollback(RollbackArgs),
    /// Guidance for a loop's next iteration (the next continuation, the next agent's prompt);
    /// answers the question a loop paused on and resumes it
    #[command(after_help = SAY_EXAMPLES)]
    Say(SayArgs),
    /// Watch the project's loops (and a --parallel run's stories) on a full screen, as they run;
    /// say, pause, resume, add iterations, cancel and report from it. Quitting never stops a loop
    #[command(after_help = WATCH_EXAMPLES)]
    Watch(WatchArgs),
    /// Drive a loop from outside: every iteration is a fresh agent process
    #[command(after_help = RUN_EXAMPLES)]
    Run(Box<RunArgs>),
    /// Print this session's loop in one short line, for Claude Code's statusLine setting
    #[command(after_help = STATUSLINE_EXAMPLES)]
    Statusline,
    /// Report every loop of the project, active and ended
    #[command(after_help = "Examples:\n  ralph status\n  ralph status --json | jq '.loops[0]'")]
    Status(StatusArgs),
    /// Show a loop's decision log
    #[command(after_help = "Examples:\n  ralph log\n  ralph log --name docs --json")]
    Log(LogArgs),
    /// Write one self-contained HTML page of a loop (or of every loop): outcome, timeline, tokens, checks, breakers
    #[command(after_help = REPORT_EXAMPLES)]
    Report(ReportArgs),
    /// Show what the --verify gate proved when a loop completed; --recheck runs it again
    #[command(
        after_help = "Examples:\n  ralph receipt\n  ralph receipt --name docs --json\n  ralph receipt --recheck      # exit 1 when the gate fails now"
    )]
    Receipt(ReceiptArgs),
    /// Add ralph's turn-end hook (and a /ralph-loop command where the host has them) to Codex, Gemini or Copilot
    #[command(after_help = INSTALL_EXAMPLES)]
    Install(InstallArgs),
    /// Remove what `ralph install` added, and nothing else
    #[command(after_help = INSTALL_EXAMPLES)]
    Uninstall(InstallArgs),
    /// List the open stories of ralph/prd.json in waves (`--matrix`: the first wave as a GitHub Actions matrix)
    #[command(after_help = PLAN_EXAMPLES)]
    Plan(PlanArgs),
    /// Check a PRD's stories (`ralph prd lint`) or import a Markdown PRD (`ralph prd import`)
    #[command(subcommand)]
    Prd(PrdCommand),
    /// One dollar budget for a fleet of jobs: a job's share of what is left, what it spent, the sum
    #[command(subcommand)]
    FleetBudget(FleetBudgetCommand),
    /// Remove the worktrees `ralph run --parallel` kept (uncommitted work is committed to their branches, which stay)
    #[command(after_help = "Examples:\n  ralph clean")]
    Clean,
    /// Write a PRD, progress log and prompt into ./ralph/ to start a project right
    #[command(
        after_help = "Examples:\n  ralph init\n  ralph init --template marketing\n  ralph init --force            # overwrite existing files"
    )]
    Init(InitArgs),
}

#[derive(Debug, Subcommand)]
pub enum FleetBudgetCommand {
    /// Reserve this job's share of what is left (printed in dollars); refused when nothing is left
    #[command(after_help = FLEET_BUDGET_EXAMPLES)]
    Share(FleetShareArgs),
    /// Write what this job's story spent (its record under .claude/ralph/stories) into the ledger
    #[command(after_help = FLEET_BUDGET_EXAMPLES)]
    Spent(FleetSpentArgs),
    /// What every job of the fleet spent, summed
    #[command(after_help = FLEET_BUDGET_EXAMPLES)]
    Sum(FleetSumArgs),
}

const FLEET_BUDGET_EXAMPLES: &str = "Examples:
  ralph fleet-budget share --total 20 --jobs 4 --ledger ledger --story US-001   # prints e.g. 5
  ralph fleet-budget spent --ledger ledger --story US-001
  ralph fleet-budget sum --total 20 --ledger ledger

A job takes what is left (the total less what the other jobs spent or reserved) divided by the
jobs not started yet; docs/fleet.md, \"One budget for the whole fleet\".";

#[derive(Debug, Args)]
pub struct FleetShareArgs {
    /// The fleet's budget in US dollars
    #[arg(long, value_name = "USD")]
    pub total: String,
    /// How many jobs the fleet has
    #[arg(long, value_name = "N")]
    pub jobs: usize,
    /// The ledger folder the jobs share
    #[arg(long, value_name = "DIR")]
    pub ledger: std::path::PathBuf,
    /// This job's story id
    #[arg(long, value_name = "ID")]
    pub story: String,
}

#[derive(Debug, Args)]
pub struct FleetSpentArgs {
    /// The ledger folder the jobs share
    #[arg(long, value_name = "DIR")]
    pub ledger: std::path::PathBuf,
    /// This job's story id
    #[arg(long, value_name = "ID")]
    pub story: String,
}

#[derive(Debug, Args)]
pub struct FleetSumArgs {
    /// The fleet's budget in US dollars
    #[arg(long, value_name = "USD")]
    pub total: String,
    /// The ledger folder the jobs share
    #[arg(long, value_name = "DIR")]
    pub ledger: std::path::PathBuf,
}

#[derive(Debug, Subcommand)]
pub enum PrdCommand {
    /// Find what makes stories impossible to check: no check, a check that cannot fail,
    /// vague criteria, a story too large, ids missing or used twice, bad dependsOn
    #[command(after_help = PRD_LINT_EXAMPLES)]
    Lint(PrdLintArgs),
    /// Turn a Markdown PRD (one `## US-001: Title` heading a story) into ralph/prd.json
    #[command(after_help = PRD_IMPORT_EXAMPLES)]
    Import(PrdImportArgs),
}

const PRD_LINT_EXAMPLES: &str = "Examples:
  ralph prd lint                   # ralph/prd.json
  ralph prd lint docs/stories.json

Exits 2 when a finding is an error (arming a --prd loop and ralph run --parallel refuse the PRD
then), 0 with warnings only. docs/prd.md lists the rules; a PRD adds vague words of its own
with a top-level \"vagueWords\": [\"snappy\"] list.";

const PRD_IMPORT_EXAMPLES: &str = "Examples:
  ralph prd import tasks/prd-tags.md
  ralph prd import PRD.md --output ralph/prd.json --force";

#[derive(Debug, Args)]
pub struct PrdLintArgs {
    /// The PRD, relative to the project root
    #[arg(value_name = "FILE", default_value = ralph_state::fields::stories::DEFAULT_PRD)]
    pub file: String,
}

#[derive(Debug, Args)]
pub struct PrdImportArgs {
    /// The Markdown PRD, relative to the project root
    #[arg(value_name = "FILE.md")]
    pub file: String,
    /// Where the stories are written
    #[arg(long, value_name = "FILE", default_value = ralph_state::fields::stories::DEFAULT_PRD)]
    pub output: String,
    /// Replace the output file when it exists
    #[arg(long)]
    pub force: bool,
}

#[derive(Debug, Subcommand)]
pub enum HookCommand {
    /// The Stop hook: decide whether the session may stop
    #[command(after_help = HOOK_EXAMPLES)]
    Stop(HookStopArgs),
    /// The UserPromptSubmit hook: answer ralph's own commands (/ralph-status, /ralph-cancel,
    /// …) with no model turn, arm /ralph-loop from the typed text (never through a shell);
    /// tell the user when a message goes into an armed loop
    #[command(after_help = SESSION_HOOK_EXAMPLES)]
    Prompt,
    /// The SessionStart hook: report this session's paused or kept loop
    #[command(after_help = SESSION_HOOK_EXAMPLES)]
    SessionStart,
    /// The SessionEnd hook: pause this session's loop so it never runs on by surprise
    #[command(after_help = SESSION_HOOK_EXAMPLES)]
    SessionEnd,
    /// The StopFailure hook: a rate or usage limit that ended the turn pauses this
    /// session's loop (uncounted); other API errors are logged
    #[command(after_help = SESSION_HOOK_EXAMPLES)]
    StopFailure,
    /// The PostCompact hook: log that the client compacted this session's context, so
    /// `ralph log` and the report show where the agent's context became a summary
    #[command(after_help = SESSION_HOOK_EXAMPLES)]
    PostCompact,
}

#[derive(Debug, Args)]
pub struct HookStopArgs {
    /// The host that runs the hook: claude, codex, gemini or copilot [default: recognised from the event]
    #[arg(long, value_parser = parse_host)]
    pub host: Option<ralph_core::hook::host::Host>,
}

fn parse_host(value: &str) -> Result<ralph_core::hook::host::Host, String> {
    ralph_core::hook::host::Host::from_name(value)
        .ok_or_else(|| format!("`{value}` is not a host; use claude, codex, gemini or copilot"))
}

const SESSION_HOOK_EXAMPLES: &str = "They read the event JSON on stdin, print nothing or one JSON answer, and always exit 0.
The prompt hook answers ralph's own commands itself (/ralph-status, /ralph-cancel, … as a block
whose reason the user reads, with no model turn; /ralph-loop and /ralph-resume act, then the
prompt goes on with the task as context); every other prompt goes through. Examples:
  echo '{\"session_id\":\"s1\",\"cwd\":\".\",\"prompt\":\"/ralph-status\"}' | ralph hook prompt
  echo '{\"session_id\":\"s1\",\"cwd\":\".\",\"prompt\":\"stop\"}' | ralph hook prompt
  echo '{\"session_id\":\"s1\",\"cwd\":\".\",\"reason\":\"prompt_input_exit\"}' | ralph hook session-end
  echo '{\"session_id\":\"s1\",\"cwd\":\".\",\"source\":\"resume\"}' | ralph hook session-start";

const HOOK_EXAMPLES: &str = "Examples:
  # hooks/hooks.json runs, for every Stop of every session:
  \"${CLAUDE_PLUGIN_ROOT}\"/bin/ralph hook stop
  # and, for every prompt the user submits:
  \"${CLAUDE_PLUGIN_ROOT}\"/bin/ralph hook prompt
  # by hand, to see the answer for one event:
  echo '{\"session_id\":\"s1\",\"cwd\":\".\",\"last_assistant_message\":\"working\"}' | ralph hook stop";

const ADOPT_EXAMPLES: &str = "Examples:
  ralph adopt                    # the only loop here that is not armed on this machine
  ralph adopt --name docs        # shows its prompt, promise and verify command, then asks
  ralph adopt --name docs --yes  # after reading the file yourself, without a terminal

The Stop hook drives only loops armed by this user on this machine (`ralph start`, /ralph-loop,
`ralph run`); a loop file that came with a repository, was copied from elsewhere, or whose
prompt, promise or verify command changed since it was armed stays inert. Adopting records it as
yours: from then on it runs like any loop you armed, verify command included.";

const RUN_EXAMPLES: &str = "Examples:
  ralph run --max-iterations 20 --completion-promise COMPLETE < ralph/PROMPT.md
  ralph run --agent ./examples/fake-agent.sh --completion-promise DONE --max-iterations 5 \"Write three haiku\"
  ralph run --name ralph                  # take over the loop /ralph-loop armed, fresh context from now on
  ralph run --name ralph --hand-back-after 3
  ralph run --parallel 4 --agent codex --max-iterations 20 --verify 'cargo test'
  ralph run --sandbox --agent claude --verify 'cargo test' < ralph/PROMPT.md   # confined (bubblewrap, sandbox-exec)

Many loops (--parallel N): each open story of ralph/prd.json (or each task given as an argument)
runs as its own `ralph run` in a git worktree (.ralph/worktrees/<id>, branch ralph/<id>),
at most N at once. A story is done when its loop completed and --verify passes on its branch
rebased onto the current branch; then it is merged (--merge ff|merge|none) and `passes: true`
is written to ralph/prd.json. A conflict is never forced: the story stays on its branch and the
command to resolve it is printed. Run the same command again to resume; `ralph clean` removes
the worktrees kept. Exit codes: 0 every story came home, 3 some did not, 130 interrupted.

Every iteration starts the agent afresh (default: `claude -p --output-format json`), gives it the
prompt on stdin and reads its reply (Claude Code's JSON `result`, or plain stdout).

Permissions: the default agent runs in print mode, where nobody can approve a tool, so Claude Code
refuses every edit or command that would need approval. ralph shows each refusal on the iteration
line and ends the run (as denied) when the same one comes twice. For unattended runs in a project
you trust, give `--permission-mode acceptEdits` (file edits in the project without asking; shell
commands that need approval are still refused), or allow tools in .claude/settings.json
(\"permissions\": {\"allow\": [\"Bash(cargo test:*)\"]}). `--agent claude` allows everything. The decision is
the Stop hook's, rule for rule: promise, limit, budgets, breakers, --verify gate, abort promise,
decision log, history. Ctrl-C stops the agent and pauses the loop (exit 130): `ralph run --name NAME`
goes on, `ralph cancel` ends it.
Exit codes: 0 completed (or handed back), 3 ended otherwise (limit, budget, breaker, abort, denied),
130 interrupted, 1 failure, 2 bad usage. All guard flags are as for `ralph start`.

Agent presets (--agent NAME), each unattended; what its flags allow the agent to do without asking:
  claude   claude -p --output-format json --dangerously-skip-permissions
           every tool (shell, file edits, web), inside and outside the project
  codex    codex exec --skip-git-repo-check --sandbox workspace-write
           shell commands and edits inside Codex's sandbox: writes only in the project and temp, no network
  gemini   gemini --approval-mode=yolo -p \"$(cat)\"
           every tool (shell, file edits, web): YOLO mode
  copilot  copilot --allow-all --no-auto-update --silent -p \"$(cat)\"
           every tool, path and URL
Run them only where that is acceptable (a container, a throwaway checkout).";

const STATUSLINE_EXAMPLES: &str =
    "Claude Code runs it with the status JSON on stdin. In .claude/settings.json:
  { \"statusLine\": { \"type\": \"command\", \"command\": \"ralph statusline\" } }
Prints e.g. `🔄 ralph 3/20 · 12m · DONE · Fix the parser` (the task's first line last), or nothing when this session drives no loop.";

#[derive(Debug, Args)]
pub struct StartArgs {
    /// Loop name: the state file is .claude/<NAME>-loop.local.md
    #[arg(long, default_value = "ralph")]
    pub name: String,
    #[command(flatten)]
    pub arm: ArmFlags,
    /// The owning session [default: $CLAUDE_CODE_SESSION_ID, $CODEX_THREAD_ID, $GEMINI_SESSION_ID or $COPILOT_AGENT_SESSION_ID]
    #[arg(long)]
    pub session_id: Option<String>,
    /// Replace an active loop of the same name or session
    #[arg(long)]
    pub force: bool,
    /// Read stdin as a slash command's raw $ARGUMENTS: options and prompt mixed, nothing expanded
    #[arg(long, conflicts_with = "prompt")]
    pub raw_arguments: bool,
    /// The task; read from stdin when absent. Options may come before or after it; words
    /// after `--` are task, even when they look like options
    pub prompt: Vec<String>,
}

/// How a loop is armed: its limit, promises and guards. Shared by `start` and `run`.
#[derive(Debug, Args)]
pub struct ArmFlags {
    /// Turns in all, the first included; 0 means unlimited [default: 50]
    #[arg(long, allow_negative_numbers = true)]
    pub max_iterations: Option<u64>,
    /// The text the agent must output inside <promise>…</promise> to finish
    #[arg(long)]
    pub completion_promise: Option<String>,
    /// The text the agent outputs inside <promise>…</promise> when only a person can unblock it
    #[arg(long)]
    pub abort_promise: Option<String>,
    /// The guards: one option each, from `ralph_state::fields::guards::OPTIONS`.
    #[command(flatten)]
    pub guards: GuardFlags,
    /// Gemini CLI: clear the model's history before every iteration (files and git stay)
    #[arg(long)]
    pub fresh_context: bool,
    /// In a session: once the context the last request sent reaches this share of the window
    /// (60) or these tokens (150k), one wrap-up turn, then the loop pauses until you type
    /// /clear and any message; it goes on in the fresh conversation
    #[arg(long, value_name = "PCT|TOKENS", value_parser = fresh_at)]
    pub fresh_at: Option<ralph_state::context::Threshold>,
    /// With --fresh-at: `run` hands the loop, after the wrap-up turn, to a detached `ralph run`
    /// (API-priced `claude -p` usage) instead of waiting for your /clear [default: clear]
    #[arg(long, value_name = "clear|run", value_parser = fresh_via)]
    pub fresh_via: Option<ralph_state::context::FreshVia>,
    /// Work through a PRD's stories: the current one is named at every turn, each story's
    /// "verify" runs when it turns to passing, and the loop completes when every story passes
    /// [default: ralph/prd.json; another: --prd=PATH]
    #[arg(long, value_name = "PATH", num_args = 0..=1, require_equals = true, default_missing_value = ralph_state::fields::stories::DEFAULT_PRD)]
    pub prd: Option<String>,
    /// When the loop ends: a desktop notification (notify-send, osascript, a Windows toast; else the terminal bell)
    #[arg(long)]
    pub notify: bool,
    /// When the loop ends: POST a JSON summary here (http:// or https://); ntfy- and Slack-compatible
    #[arg(long, value_name = "URL")]
    pub notify_url: Option<String>,
    /// With --prd or --parallel: approve the PRD's story commands whose list has this code
    /// (ralph shows the commands and their code, and asks in a terminal); a changed list
    /// gives another code
    #[arg(long, value_name = "CODE")]
    pub approve_commands: Option<String>,
    /// A path the agent must not change, as a glob relative to the project root (`**` crosses
    /// folders; repeatable): while one differs from the work tree at arming, the promise, a
    /// story's passes and the gate are refused
    #[arg(long, value_name = "GLOB", value_parser = glob)]
    pub protect: Vec<String>,
    /// Every path the loop changes must match one of these globs (repeatable): a promise with
    /// changes outside is refused with the list
    #[arg(long, value_name = "GLOB", value_parser = glob)]
    pub scope: Vec<String>,
    /// Leave out a default protection (repeatable): with a gate, ralph protects the test
    /// layouts and test-runner configuration of the ecosystems it finds; a glob given here
    /// removes the defaults equal to it or that it matches
    #[arg(long, value_name = "GLOB", value_parser = glob)]
    pub unprotect: Vec<String>,
    /// With a gate, protect nothing by default (only --protect's globs)
    #[arg(long)]
    pub no_default_protect: bool,
}

/// A `--fresh-at` value, checked as arming checks it.
fn fresh_at(value: &str) -> Result<ralph_state::context::Threshold, String> {
    ralph_state::context::Threshold::parse(value)
}

/// A `--fresh-via` value: whether `ralph run` takes over.
fn fresh_via(value: &str) -> Result<ralph_state::context::FreshVia, String> {
    ralph_control::arming::fresh_via(value).map_err(|e| e.to_string())
}

/// A `--protect`/`--scope` value, checked as arming checks it.
fn glob(value: &str) -> Result<String, String> {
    ralph_state::globs::check(value).map(|()| value.to_owned())
}

impl ArmFlags {
    /// The flags as the core's arming options, with the loop's name, owner and `--force`.
    pub fn into_options(
        self,
        name: String,
        session_id: Option<String>,
        force: bool,
    ) -> ralph_control::arming::ArmOptions {
        ralph_control::arming::ArmOptions {
            name,
            session_id,
            force,
            max_iterations: self.max_iterations,
            completion_promise: self.completion_promise,
            abort_promise: self.abort_promise,
            guards: self.guards.0,
            fresh_context: self.fresh_context,
            fresh_at: self.fresh_at,
            fresh_via: self.fresh_via.unwrap_or_default(),
            prd: self.prd,
            notify: self.notify,
            notify_url: self.notify_url,
            approve_commands: self.approve_commands,
            sandbox: None,
            protect: self.protect,
            scope: self.scope,
            unprotect: self.unprotect,
            no_default_protect: self.no_default_protect,
        }
    }

    /// Whether any flag was given (a loop being resumed keeps its own settings).
    pub fn any(&self) -> bool {
        self.max_iterations.is_some()
            || self.completion_promise.is_some()
            || self.abort_promise.is_some()
            || !self.guards.0.is_empty()
            || self.fresh_context
            || self.fresh_at.is_some()
            || self.fresh_via.is_some()
            || self.prd.is_some()
            || self.notify
            || self.notify_url.is_some()
            || self.approve_commands.is_some()
            || !self.protect.is_empty()
            || !self.scope.is_empty()
            || !self.unprotect.is_empty()
            || self.no_default_protect
    }
}

/// The guard options, built from the core's table rather than written out
/// here, so a new guard needs no change to the command line.
#[derive(Debug, Clone, Default)]
pub struct GuardFlags(pub GuardSettings);

impl clap::FromArgMatches for GuardFlags {
    fn from_arg_matches(matches: &clap::ArgMatches) -> Result<Self, clap::Error> {
        let mut settings = GuardSettings::default();
        for guard in guards::OPTIONS {
            let value = match guard.kind {
                OptionKind::Number => matches.get_one::<u64>(guard.field).map(u64::to_string),
                _ => matches.get_one::<String>(guard.field).cloned(),
            };
            if let Some(value) = value {
                settings
                    .set(guard, &value)
                    .map_err(|e| clap::Error::raw(clap::error::ErrorKind::InvalidValue, e))?;
            }
        }
        Ok(Self(settings))
    }

    fn update_from_arg_matches(&mut self, matches: &clap::ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(matches)?;
        Ok(())
    }
}

impl Args for GuardFlags {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        guards::OPTIONS.iter().fold(cmd, |cmd, guard| {
            let arg = clap::Arg::new(guard.field)
                .long(guard.flag)
                .value_name(guard.value_name)
                .help(guard.help);
            cmd.arg(match guard.kind {
                OptionKind::Number => arg
                    .value_parser(clap::value_parser!(u64))
                    .allow_negative_numbers(true),
                OptionKind::Duration => arg.value_parser(parse_duration_arg),
                OptionKind::Money => arg.value_parser(parse_money_arg),
                OptionKind::Text | OptionKind::Flag | OptionKind::OptionalValue => arg,
            })
        })
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

// Each switch of `ralph run` is its own clap flag, read where it is used.
#[allow(clippy::struct_excessive_bools)]
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The loop to run: a new one (when a task is given) or one armed earlier, e.g. by /ralph-loop
    #[arg(long, default_value = "ralph")]
    pub name: String,
    /// The agent command: reads the prompt on stdin, prints its reply (run by `sh -c`);
    /// or a preset: claude, codex, gemini, copilot (see below)
    #[arg(long, default_value = ralph_run::presets::DEFAULT_AGENT)]
    pub agent: String,
    /// Claude Code's permission mode for the default agent (passed as `--permission-mode`):
    /// acceptEdits lets it edit files in the project without asking (shell commands that
    /// change files are still refused); bypassPermissions allows every tool; manual (the
    /// default) asks, which in print mode means refused
    #[arg(long, value_name = "MODE", value_parser = ["acceptEdits", "auto", "bypassPermissions", "dontAsk", "manual", "plan"])]
    pub permission_mode: Option<String>,
    #[command(flatten)]
    pub arm: ArmFlags,
    /// Hand the loop back (to its session, or to the first session that stops) after N iterations
    #[arg(long, value_name = "N")]
    pub hand_back_after: Option<u64>,
    /// Replace an active loop of the same name when a task is given
    #[arg(long)]
    pub force: bool,
    /// When the agent stops on a rate or usage limit, sleep until the reset (the 5-hour window
    /// the status line last saw, else 5 min, 10, 20… up to 1 h) and go on, instead of exiting
    /// with code 4; bounded by --max-duration, stopped by Ctrl-C or `ralph cancel`
    #[arg(long)]
    pub wait_for_reset: bool,
    /// Run every agent process confined: it writes only the project (a --parallel story: its
    /// worktree) and its own settings, reads the system and toolchains, and cannot see the rest
    /// of your home or ralph's records (bubblewrap on Linux, sandbox-exec on macOS); the gate
    /// runs in a sandbox of its own (never --gate-sandbox off). A setting of the loop: resuming it runs sandboxed too
    #[arg(long)]
    pub sandbox: bool,
    /// With --sandbox: `internet` (the default) reaches its model and the internet but not this
    /// machine's loopback, ports or abstract sockets (bubblewrap: through pasta, when
    /// installed, with the one port of ralph's meter of its model's API forwarded;
    /// containers: the engine's bridge); `none` cuts the agent off the network;
    /// `host` shares this machine's network, its local services too (`open`: `internet`)
    #[arg(long, value_name = "internet|none|host", value_parser = ["internet", "none", "host", "open"], requires = "sandbox")]
    pub sandbox_network: Option<String>,
    /// With --sandbox: run the agent in a container of IMAGE (Docker, else Podman) instead;
    /// the agent must be installed in the image
    #[arg(long, value_name = "IMAGE", requires = "sandbox", value_parser = parse_image_arg)]
    pub sandbox_image: Option<String>,
    /// A fleet's child: Ctrl-C ends the loop as cancelled (the fleet's rule) instead of
    /// pausing it
    #[arg(long, hide = true)]
    pub cancel_on_interrupt: bool,
    #[command(flatten)]
    pub fanout: FanoutArgs,
    /// The task (for a new loop); read from stdin when it is not a terminal. Options may
    /// come before or after it; words after `--` are task
    pub prompt: Vec<String>,
}

/// The slash command's own check, so both paths accept the same durations
/// (a unit is required: `2` alone would silently mean seconds).
fn parse_money_arg(value: &str) -> Result<String, String> {
    ralph_state::money::Money::parse(value)
        .map(ralph_state::money::Money::decimal)
        .map_err(|e| format!("`{value}`: {e}"))
}

fn parse_image_arg(value: &str) -> Result<String, String> {
    if ralph_state::fields::confinement::valid_image(value) {
        Ok(value.to_owned())
    } else {
        Err(format!(
            "`{value}` is not an image name: letters, digits and ._/:@- only, not starting with -"
        ))
    }
}

impl RunArgs {
    /// `--sandbox` and its settings, as the loop records them.
    pub fn confinement(&self) -> Option<ralph_state::fields::confinement::Confinement> {
        use ralph_state::fields::confinement::{Confinement, Network};
        self.sandbox.then(|| Confinement {
            network: self
                .sandbox_network
                .as_deref()
                .and_then(Network::parse)
                .unwrap_or_default(),
            image: self.sandbox_image.clone(),
        })
    }

    /// `--sandbox` with `--gate-sandbox off`: the sandboxed agent's gate is
    /// always confined, so the two together are refused.
    pub fn refuse_unconfined_gate(&self) -> Result<(), ralph_run::sandbox::SandboxError> {
        let off = self.arm.guards.0.get("gate-sandbox").map(str::trim) == Some("off");
        if self.sandbox && off {
            return Err(ralph_run::sandbox::SandboxError {
                problem: "--gate-sandbox off would run the gate over the sandboxed agent's work unconfined".to_owned(),
                fix: "Drop --gate-sandbox off: under --sandbox the gate always runs in its own sandbox.".to_owned(),
            });
        }
        Ok(())
    }
}

fn parse_duration_arg(value: &str) -> Result<String, String> {
    ralph_control::arguments::check_duration("…", value).map_err(|e| match e {
        ralph_control::arguments::ArgumentsError::DurationUnit { value, .. } => {
            format!("`{value}` has no unit; write e.g. {value}m (minutes) or {value}h (hours); units: s, m, h, d")
        }
        _ => format!("`{value}` is not a duration; use e.g. 90m, 2h, 1h30m or 45s"),
    })
}

const SAY_EXAMPLES: &str = "Examples:\n  ralph say \"check auth.rs, not auth_old.rs\"\n  ralph say --name docs \"keep the intro short\"\n  ralph say --gate \"run the migration tests before you say done\"\n  ralph say --story US-002 \"the API is /v2\"     # one story of ralph run --parallel\n  ralph say --all \"stop touching the lockfile\"     # every loop and story\n\nThe guidance goes into the next iteration's prompt once, and is kept in the decision log\nwith the iteration that carried it. With --gate, the first promise after it is refused once,\nthe guidance repeated, counted like a gate's refusal.";

const WATCH_EXAMPLES: &str = "Examples:\n  ralph watch                 # every loop here, and every story of ralph run --parallel\n  ralph watch --name docs\n\nKeys: ↑↓ select · s say (type, Enter) · p pause/resume · + add iterations · c cancel (y confirms)\n· r write the report · q quit (the loops go on). Without a terminal, use `ralph status --json`.";

#[derive(Debug, Args)]
pub struct WatchArgs {
    /// Only this loop
    #[arg(long)]
    pub name: Option<String>,
}

#[derive(Debug, Args)]
pub struct SayArgs {
    /// The guidance, in a sentence or a paragraph
    pub text: String,
    /// The loop's name [default: this session's loop, or the only one]
    #[arg(long, conflicts_with_all = ["all", "story"])]
    pub name: Option<String>,
    /// One story of a `ralph run --parallel` fleet, by its id
    #[arg(long, conflicts_with = "all")]
    pub story: Option<String>,
    /// Every loop armed here and every story of the fleet
    #[arg(long)]
    pub all: bool,
    /// The first promise after this guidance is refused once, the guidance repeated
    #[arg(long)]
    pub gate: bool,
}

#[derive(Debug, Args)]
pub struct SelectArgs {
    /// The loop's name [default: this session's loop, or the only one]
    #[arg(long, conflicts_with = "all")]
    pub name: Option<String>,
    /// Every active loop of the project
    #[arg(long)]
    pub all: bool,
    /// Read stdin as a slash command's raw $ARGUMENTS: `NAME`, `--name NAME` or `--all`
    #[arg(long, conflicts_with_all = ["name", "all"])]
    pub raw_arguments: bool,
}

#[derive(Debug, Args)]
pub struct ResumeArgs {
    #[command(flatten)]
    pub select: SelectArgs,
    /// Raise the iteration limit by K (a loop that ended at it goes on from the next one)
    #[arg(long, value_name = "K", conflicts_with = "all")]
    pub add_iterations: Option<String>,
    /// Raise the dollar budget by USD
    #[arg(long, value_name = "USD", conflicts_with = "all")]
    pub add_cost: Option<String>,
    /// Raise the time budget by D (`30m`, `2h`)
    #[arg(long, value_name = "D", conflicts_with = "all")]
    pub add_time: Option<String>,
    /// Raise the token budget by N
    #[arg(long, value_name = "N", conflicts_with = "all")]
    pub add_tokens: Option<String>,
}

#[derive(Debug, Args)]
pub struct RollbackArgs {
    /// The checkpoint: an iteration number, or `undo-K` (a tree a rollback replaced)
    #[arg(long, value_name = "N", required_unless_present = "list")]
    pub to: Option<String>,
    /// List the loop's checkpoints (iterations, then `undo-K`) and put nothing back
    #[arg(long, conflicts_with = "to")]
    pub list: bool,
    /// The loop's name [default: the only live loop, else the one that ended last]
    #[arg(long)]
    pub name: Option<String>,
}

#[derive(Debug, Args)]
pub struct AdoptArgs {
    /// The loop's name [default: the only loop here that is not armed on this machine]
    #[arg(long)]
    pub name: Option<String>,
    /// On a terminal, adopt without asking (read the loop file first: its verify command runs as you); never without a terminal
    #[arg(long)]
    pub yes: bool,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Machine-readable output
    #[arg(long)]
    pub json: bool,
    /// How many ended loops to list
    #[arg(long, default_value_t = 5)]
    pub history: usize,
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// The loop's name [default: this session's loop, or the most recent one]
    #[arg(long, conflicts_with = "all")]
    pub name: Option<String>,
    /// Every loop of the project, live and ended, and the stories of a `--parallel` run
    #[arg(long)]
    pub all: bool,
    /// Where to write the page [default: .claude/ralph/reports/<name>.html, `all.html` with --all]
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<std::path::PathBuf>,
    /// Open the page in the default browser (xdg-open, open, start); ralph does not wait for it
    #[arg(long)]
    pub open: bool,
}

const REPORT_EXAMPLES: &str = "Examples:
  ralph report                      # this session's loop, or the most recent one
  ralph report --name docs --open
  ralph report --all -o /tmp/loops.html";

#[derive(Debug, Args)]
pub struct LogArgs {
    /// The loop's name [default: this session's loop, or the most recent one]
    #[arg(long)]
    pub name: Option<String>,
    /// One JSON object per line, as stored
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ReceiptArgs {
    /// The loop's name [default: this session's loop, or the most recently ended one]
    #[arg(long)]
    pub name: Option<String>,
    /// Machine-readable output
    #[arg(long)]
    pub json: bool,
    /// Run the gate again in the project root and say whether "done" still holds
    #[arg(long)]
    pub recheck: bool,
    /// The recheck's time limit in seconds [default: 300]
    #[arg(long, value_name = "SECS")]
    pub timeout: Option<u64>,
}

const INSTALL_EXAMPLES: &str = "Examples:
  ralph install codex              # ~/.codex/hooks.json and ~/.codex/prompts/ralph-loop.md
  ralph install gemini --project   # .gemini/settings.json and .gemini/commands/ralph-loop.toml
  ralph install copilot            # ~/.copilot/hooks/ralph.json
  ralph uninstall gemini --project

Claude Code needs no install: it loads ralph as a plugin. Every change is printed; other hooks and
settings in those files are kept as they are. Running install twice changes nothing the second time.";

#[derive(Debug, Args)]
pub struct InstallArgs {
    /// codex, gemini or copilot
    #[arg(value_parser = parse_host)]
    pub host: ralph_core::hook::host::Host,
    /// The project's configuration (in the current git root) instead of the user's
    #[arg(long)]
    pub project: bool,
    /// The command the hook runs [default: this ralph binary's absolute path]
    #[arg(long)]
    pub command: Option<String>,
}

#[derive(Debug, Args)]
pub struct InitArgs {
    /// software (default) or marketing
    #[arg(long, default_value = "software")]
    pub template: String,
    /// Overwrite files that exist
    #[arg(long)]
    pub force: bool,
}

/// `ralph run --parallel N`: many loops at once, one worktree per story.
#[derive(Debug, Args, Default)]
pub struct FanoutArgs {
    /// Run the open stories of ralph/prd.json (or each task given as an argument), at
    /// most N at once, each in its own worktree on the branch ralph/<story-id>
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=64))]
    pub parallel: Option<u16>,
    /// With --parallel: only these stories (repeatable)
    #[arg(long, value_name = "ID", requires = "parallel")]
    pub story: Vec<String>,
    /// With --parallel: how a finished story comes home: ff (fast-forward after the
    /// rebase; a merge commit if the base moved), merge (always a merge commit), or
    /// none (leave it on its branch, e.g. for a pull request)
    #[arg(long, value_name = "HOW", default_value = "ff", value_parser = ["ff", "merge", "none"], requires = "parallel")]
    pub merge: String,
}

const PLAN_EXAMPLES: &str = "Examples:
  ralph plan                       # the open stories in waves, with what the last --parallel run left
  ralph plan --matrix              # {\"include\":[{\"story\":\"US-001\",\"title\":…,\"branch\":\"ralph/US-001\"}]}
  echo \"matrix=$(ralph plan --matrix)\" >> \"$GITHUB_OUTPUT\"

Open stories are those of ralph/prd.json whose `passes` is false, by priority. Wave 1 can start
now; a story with `dependsOn` is in the wave after the last of the stories it names that do not
pass yet. --matrix lists wave 1 only: the fleet runs one wave at a time.";

#[derive(Debug, Args)]
pub struct PlanArgs {
    /// Print a GitHub Actions matrix (one line of JSON) for a fleet of jobs
    #[arg(long)]
    pub matrix: bool,
}
