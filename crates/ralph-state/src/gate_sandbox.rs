//! How a loop's gate is confined: its settings (`--gate-sandbox`,
//! `--gate-network`) and whether its agent runs sandboxed, turned into the
//! `GateConfinement` every gate of the loop runs with (`ralph_fs::gate_jail`),
//! and the words that say, at arming and in `ralph status`, what that means
//! on this machine.

use ralph_fs::gate_jail::{GateConfinement, GateNetwork, Sandboxing};

use crate::fields::guards::Guards;
use crate::storage::environment::Environment;

/// The confinement of a loop's gates: always sandboxed when the agent is
/// (`agent_sandboxed`, whatever `--gate-sandbox` says), off only when the
/// loop asked, otherwise wherever bubblewrap works. ralph's state folder
/// is covered wherever the sandbox would show it.
pub fn confinement(guards: &Guards, agent_sandboxed: bool) -> GateConfinement {
    let sandboxing = if agent_sandboxed {
        Sandboxing::Required
    } else if guards.gate_sandbox_off {
        Sandboxing::Off
    } else {
        Sandboxing::Auto
    };
    let network = if guards.gate_network_open {
        GateNetwork::Open
    } else {
        GateNetwork::None
    };
    let hidden = Environment::from_env()
        .registry()
        .map(|r| r.dir().to_path_buf())
        .into_iter()
        .collect();
    GateConfinement {
        sandboxing,
        network,
        hidden,
    }
}

/// A recheck's sandbox, as the gate that passed ran: always sandboxed
/// when it was, with the host's network when it had it, unsandboxed when
/// the loop asked (`--gate-sandbox off`); otherwise (an older receipt) the
/// default, sandboxed wherever bubblewrap works.
pub fn of_receipt(r: &crate::storage::receipt::Receipt) -> GateConfinement {
    let guards = Guards {
        gate_network_open: r.gate_sandbox.contains("the host's network"),
        gate_sandbox_off: r.gate_sandbox.contains("--gate-sandbox off"),
        ..Guards::default()
    };
    confinement(&guards, r.gate_sandbox.starts_with("sandboxed"))
}

/// What the gate's confinement is on this machine, for the guards' summary
/// and `ralph run`'s arming: `None` for a loop without a gate (no
/// `--verify`, `--check` or PRD story checks).
pub fn words(guards: &Guards, has_prd: bool, agent_sandboxed: bool) -> Option<String> {
    let gated = guards.verify.is_some() || guards.check.is_some() || has_prd;
    gated.then(|| ralph_fs::gate_jail::describe(&confinement(guards, agent_sandboxed)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sandboxed_agent_always_gets_a_sandboxed_gate_and_off_is_off_only_without_it() {
        let off = Guards {
            gate_sandbox_off: true,
            gate_network_open: true,
            ..Guards::default()
        };
        assert_eq!(confinement(&off, true).sandboxing, Sandboxing::Required);
        assert_eq!(confinement(&off, false).sandboxing, Sandboxing::Off);
        assert_eq!(confinement(&off, false).network, GateNetwork::Open);
        let default = Guards::default();
        assert_eq!(confinement(&default, false).sandboxing, Sandboxing::Auto);
        assert_eq!(confinement(&default, false).network, GateNetwork::None);
        // No gate, no words (and no probe of bubblewrap).
        assert_eq!(words(&default, false, false), None);
    }
}
