//! `ralph fleet-budget share|spent|sum`: one dollar budget for a fleet of
//! jobs, decided by `ralph_run::fleet::budget`; here the amounts are read
//! from the command line and the answers printed.

use ralph_run::fleet::budget;
use ralph_state::money::Money;

use crate::exit::{CmdResult, Failure};
use ralph_cli::FleetBudgetCommand;

fn total(text: &str) -> Result<Money, Failure> {
    Money::parse(text).map_err(|e| Failure::usage(format!("--total {text:?}: {e}")))
}

pub(super) fn fleet_budget(command: FleetBudgetCommand) -> CmdResult {
    match command {
        FleetBudgetCommand::Share(args) => {
            let granted =
                budget::reserve(&args.ledger, total(&args.total)?, args.jobs, &args.story)?;
            // One line, the amount alone: what the job passes as --max-cost.
            say!("{}", granted.decimal());
        }
        FleetBudgetCommand::Spent(args) => {
            let spent = budget::record_spent(&crate::env::project(), &args.ledger, &args.story)?;
            say!(
                "{}: spent {}",
                ralph_fs::display::line(&args.story),
                spent.dollars()
            );
        }
        FleetBudgetCommand::Sum(args) => {
            say!("{}", budget::summary(&args.ledger, total(&args.total)?)?);
        }
    }
    Ok(())
}
