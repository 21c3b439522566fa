//! `--prd` stories at a stop: the stories that turned to passing have their
//! commands run (without the lock) in the gate's place; a refused one is set
//! back in the file. Reached only through the seam (`mod.rs`), and only for
//! an active loop with a PRD.

use std::time::Duration;

use super::Extras;
use crate::decide::stepped::{Relocked, unlocked};
use crate::decide::{self, Observation, Verification, gate_place, prd_turn};
use ralph_state::error::LoopFileError;
use ralph_state::fields::state::PrdLoop;
use ralph_state::fields::stories::{PrdSeen, Story, StoryRefusal};
use ralph_state::lifecycle::VerificationEntry;
use ralph_state::storage::receipt::GateRan;
use ralph_state::storage::store::ProjectLock;

/// The stories at this stop, read into the observation (`seen.prd`), with
/// the verdict of the checks that ran.
pub(super) fn at_stop(
    extras: &Extras<'_>,
    mut seen: Observation,
    lock: ProjectLock,
) -> Result<Relocked<Observation>, LoopFileError> {
    let Extras { project, live, .. } = *extras;
    let state = &live.state;
    let Some(prd) = state.prd.as_ref().filter(|_| state.active) else {
        return Ok(Relocked::Same(lock, seen));
    };
    let stories = prd_turn::read(&project.root, prd)?;
    let turned = prd_turn::turned(&state.progress.prd_passed, &stories);
    let mut found = PrdSeen {
        file: prd.path.clone(),
        stories: stories.clone(),
        refused: Vec::new(),
        checked: Vec::new(),
        changed: prd
            .criteria
            .as_deref()
            .map(|armed| ralph_state::fields::stories::changed_criteria(armed, &stories))
            .unwrap_or_default(),
    };
    let mut lock = lock;
    let paths_refusal = prd_turn::paths_refusal(
        decide::path_violations_but(state, &seen.changed_paths, &seen.dependency_only),
        &turned,
    )
    .or_else(|| prd_turn::criteria_refusal(prd, &stories, &turned));
    if let Some(refused) = paths_refusal {
        // `--protect`/`--scope`, or criteria changed since arming, refuse
        // the stories before any check runs.
        found.stories = prd_turn::set_back(&project.root, &prd.path, &refused)?;
        found.refused = refused;
    } else if !turned.is_empty() {
        let checks = || story_checks(extras, prd, &turned);
        let (relocked, (refused, gate, ran)) =
            match unlocked(lock, project, live, "the story checks", checks)? {
                Relocked::Same(relocked, out) => (relocked, out),
                Relocked::Changed(step) => return Ok(Relocked::Changed(step)),
            };
        lock = relocked;
        if !refused.is_empty() {
            found.stories = prd_turn::set_back(&project.root, &prd.path, &refused)?;
        }
        found.checked = prd_turn::passed_checks(&turned, &refused);
        found.refused = refused;
        if gate.is_some() {
            seen.gate_ran = ran;
        }
        seen.verification = gate;
    }
    seen.prd = Some(found);
    Ok(Relocked::Same(lock, seen))
}

/// What [`story_checks`] found: who was refused, the gate's verdict, and
/// how it ran.
type StoryChecks = (Vec<StoryRefusal>, Option<Verification>, Option<GateRan>);

/// The commands of the stories that turned to passing, and the loop's
/// `--verify`, run in the gate's place.
fn story_checks(extras: &Extras<'_>, prd: &PrdLoop, turned: &[&Story]) -> StoryChecks {
    let Extras {
        project,
        live,
        registry,
        ..
    } = *extras;
    let state = &live.state;
    let verify = state.guards.verify.as_deref();
    if !prd_turn::any_check(turned, verify) {
        return (Vec::new(), None, None);
    }
    let place = gate_place::Place::of_loop(&project.root, registry, live);
    let timeout = Duration::from_secs(state.guards.verify_timeout_secs);
    let prepared = gate_place::prepare(&place, timeout);
    let ran = Some(prepared.ran);
    let (refused, gate) = match prepared.dir {
        Ok(dir) => prd_turn::run_checks(&dir, prd, turned, verify, (timeout, &place.confinement)),
        Err(failed) => prd_turn::none_run(turned, verify, &failed),
    };
    (refused, gate, ran)
}

/// The story commands that ran at this stop, as one logged verdict:
/// `US-001 passed; US-002 failed (exit 1)`; `None` when none ran. (A
/// refusal by `--protect`/`--scope`, changed criteria or the loop's own
/// `--verify` ran no story command.)
pub(crate) fn story_verdicts(
    prd: &PrdSeen,
    loop_verify: Option<&str>,
) -> Option<VerificationEntry> {
    let mut passed = true;
    let mut said: Vec<String> = prd
        .checked
        .iter()
        .map(|id| format!("{id} passed"))
        .collect();
    for refusal in &prd.refused {
        match refusal {
            StoryRefusal::Failed {
                id,
                command,
                verification,
            } if command != decide::PATHS_CHECK
                && command != decide::CRITERIA_CHECK
                && Some(command.as_str()) != loop_verify =>
            {
                passed = false;
                said.push(format!("{id} failed ({})", verification.status));
            }
            _ => {}
        }
    }
    (!said.is_empty()).then(|| VerificationEntry {
        passed,
        status: said.join("; "),
        failures: None,
        exit_code: None,
        tail: None,
    })
}
