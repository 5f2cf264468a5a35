//! `idem ledger deliver`: delivers the pings and hooks the ledger's runs
//! still owe (see `ledger::outbox`), for a timer to run while no `idem
//! run` comes to deliver them.

use anyhow::Result;

use crate::alert::{sweep, Swept};
use crate::cli::DeliverArgs;
use crate::exit;
use crate::ledger::{self, Location};
use crate::report::Reporter;

/// What `deliver` did, and what is still owed.
#[derive(Debug, serde::Serialize)]
struct Delivered {
    /// Events delivered now.
    delivered: u64,
    /// Events tried now and not delivered: owed again after their backoff.
    failed: u64,
    /// Events neither delivered nor lost, after this.
    owed: u64,
    /// Events given up, a day old and never delivered.
    lost: u64,
    /// Events found overtaken now by a newer run's outcome to their
    /// target: never sent (the monitor holds a newer state).
    superseded: u64,
}

/// Delivers every due event, hooks included, for at most `--for`; exit 1
/// when a delivery failed (its event stays owed).
pub fn run(args: &DeliverArgs, location: &Location, quiet: bool) -> Result<u8> {
    let Some(mut ledger) = ledger::open_existing(location)? else {
        // Nothing has run with this ledger: nothing can be owed.
        return print(args, quiet, Swept::default(), 0, 0);
    };
    let reporter = Reporter::new(quiet, false, false);
    let swept = sweep(
        ledger.as_mut(),
        args.within.into(),
        true,
        true,
        &[],
        &reporter,
    )?;
    let owed = ledger.owed()?.iter().map(|(_, owed)| owed).sum();
    let lost = ledger.lost(u32::MAX)?.len() as u64;
    ledger.leave();
    print(args, quiet, swept, owed, lost)
}

fn print(args: &DeliverArgs, quiet: bool, swept: Swept, owed: u64, lost: u64) -> Result<u8> {
    let delivered = Delivered {
        delivered: swept.delivered,
        failed: swept.failed,
        owed,
        lost,
        superseded: swept.superseded,
    };
    if args.json {
        println!("{}", serde_json::to_string(&delivered)?);
    } else if !quiet {
        println!(
            "delivered {}, failed {}; {} still owed, {} lost, {} superseded",
            delivered.delivered,
            delivered.failed,
            delivered.owed,
            delivered.lost,
            delivered.superseded
        );
    }
    Ok(if swept.failed > 0 {
        exit::NOT_FOUND
    } else {
        exit::SUCCESS
    })
}
