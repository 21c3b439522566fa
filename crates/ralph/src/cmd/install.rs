//! `ralph install | uninstall codex|gemini|copilot [--project]`: the work
//! (which files, what goes in them, how they are written) is
//! `ralph_install`'s; here its lines are printed.

use crate::exit::CmdResult;
use ralph_cli::InstallArgs;

pub(super) fn install(args: InstallArgs) -> CmdResult {
    ralph_install::install(args.host, args.project, args.command, &mut |line| {
        say!("{line}");
    })?;
    Ok(())
}

pub(super) fn uninstall(args: InstallArgs) -> CmdResult {
    ralph_install::uninstall(args.host, args.project, &mut |line| say!("{line}"))?;
    Ok(())
}
