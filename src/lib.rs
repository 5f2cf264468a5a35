//! idem: run a command once per idempotency key.
//!
//! The data path of a run reads top to bottom: `cli` -> `key` -> `ledger`
//! claim -> `process` -> `ledger` record -> `exit`.

pub mod alert;
pub mod cli;
pub mod cmd;
pub mod console;
pub mod control;
pub mod exit;
pub mod host;
pub mod id;
pub mod jobs;
pub mod key;
pub mod ledger;
pub mod period;
pub mod process;
pub mod render;
pub mod report;
pub mod run;
pub mod serve;
pub mod start;
pub mod trace;
pub mod url;
pub mod when;

use anyhow::Result;

use cli::{Cli, Command};
use ledger::Location;

/// Runs a parsed command line; returns the exit code.
pub fn run(cli: Cli) -> Result<u8> {
    let Cli { global, command } = &cli;
    console::start(global.log_format);
    let location = || Location::resolve(global.db.as_deref());
    match command {
        Command::Run(args) => {
            let spinners = args.progress == cli::Progress::Auto;
            let reporter = report::Reporter::new(global.quiet, global.verbose, spinners);
            let location = location()?;
            run::run(&run::Config::from_args(args)?, &location, &reporter)
        }
        Command::Backfill(args) => {
            let spinners = args.run.progress == cli::Progress::Auto;
            let reporter = report::Reporter::new(global.quiet, global.verbose, spinners);
            backfill(args, &location()?, &reporter)
        }
        Command::Ledger(command) => {
            cmd::ledger::run(command, &location()?, global.quiet, global.color)
        }
        Command::Pause(args) => cmd::pause::pause(args, &location()?, global.quiet),
        Command::Resume(args) => cmd::pause::resume(args, &location()?, global.quiet),
        Command::Stop(args) => cmd::stop::run(args, &location()?, global.quiet),
        Command::Doctor(args) => cmd::doctor::run(args, &location()?),
        Command::Status(args) => cmd::status::run(args, &location()?, global.color),
        Command::Serve(args) => serve::run(args, &location()?, global.quiet),
        Command::Completions { shell } => {
            use std::io::Write;
            std::io::stdout().write_all(&cmd::completions::script(*shell))?;
            Ok(exit::SUCCESS)
        }
        Command::Complete { what, prefix } => {
            Ok(cmd::complete::run(*what, prefix, global.db.as_deref()))
        }
    }
}

/// `idem backfill`: its job or template found, its times read, then the
/// run engine's backfill.
fn backfill(
    args: &cli::BackfillArgs,
    location: &Location,
    reporter: &report::Reporter,
) -> Result<u8> {
    use when::parse_time;
    if !args.run.key.is_empty() {
        return Err(exit::Failure::usage(
            "idem backfill takes its job or key template as its first word, not --key",
        )
        .into());
    }
    let now = jiff::Timestamp::now();
    let from = parse_time("--from", &args.from, false)?.at(now);
    let to = match &args.to {
        Some(to) => parse_time("--to", to, true)?.at(now),
        None => now,
    };
    let (template, job) = run::resolve_backfill(&args.target, location)?;
    let job = job.or_else(|| args.run.job.clone());
    let config = run::Config::with_key(&args.run, &template, job.as_deref())?;
    let plan = run::Backfill {
        from,
        to,
        dry_run: args.dry_run,
        all: args.all,
    };
    run::backfill(&config, &plan, location, reporter)
}
