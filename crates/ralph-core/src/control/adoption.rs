//! `ralph adopt`'s choice: which loop file, not armed on this machine, is
//! the one to adopt (the one named, or the only one), and whether it can be.
//! Showing it, asking and recording it are the CLI's and `commands::adopt`'s.

use crate::control::{Live, LoopError, read_live};
use crate::display;
use crate::loop_file::registry::{self, Arming, Registry};
use crate::loop_file::state::LoopState;
use crate::loop_file::store::Project;

/// What `ralph adopt` found to do.
pub enum Choice {
    /// Every loop here is armed on this machine.
    Nothing,
    /// The loop named is armed on this machine already.
    AlreadyArmed(String),
    /// This loop is not armed here, and why not.
    Candidate {
        live: Box<Live>,
        state: Box<LoopState>,
        arming: Arming,
    },
}

/// The loop to adopt: `name`, or the only loop here not armed on this machine.
pub fn choose(
    project: &Project,
    registry: &Registry,
    name: Option<&str>,
) -> Result<Choice, LoopError> {
    let root = registry::canonical_root(project).ok();
    let mut lives = read_live(project)?;
    let arming = |live: &Live| match &live.state {
        Ok(state) => registry::arming(Some(registry), root.as_deref(), &live.file.name, state),
        Err(_) => Arming::Unarmed(registry::Unarmed::NoRecord),
    };
    let index = match name {
        Some(name) => lives
            .iter()
            .position(|l| l.file.name == name)
            .ok_or_else(|| LoopError::NotHere(name.to_owned()))?,
        None => {
            let unarmed: Vec<usize> = (0..lives.len())
                .filter(|&i| arming(&lives[i]) != Arming::Armed)
                .collect();
            match unarmed.as_slice() {
                [] => return Ok(Choice::Nothing),
                [only] => *only,
                several => {
                    let names = several
                        .iter()
                        .map(|&i| display::line(&lives[i].file.name).into_owned())
                        .collect();
                    return Err(LoopError::SeveralUnarmed(names));
                }
            }
        }
    };
    let status = arming(&lives[index]);
    let live = lives.swap_remove(index);
    let state = match &live.state {
        Ok(state) => state.clone(),
        Err(why) => {
            return Err(LoopError::UnreadableToAdopt {
                path: live.file.path.display().to_string(),
                why: why.clone(),
                name: live.file.name.clone(),
            });
        }
    };
    if status == Arming::Armed {
        return Ok(Choice::AlreadyArmed(live.file.name));
    }
    Ok(Choice::Candidate {
        live: Box::new(live),
        state: Box::new(state),
        arming: status,
    })
}
