//! Fleet control: holding a job's runs back (`pause`, `resume`), stopping
//! runs wherever they run (`stop`, `run --replace`), on every ledger, with
//! hosts made as UTS namespaces of their own.

mod holders;
mod overlap;
mod pause;
mod replace;
mod slots;
mod stop;

use crate::util::{host_prefix, Idem};

/// `idem` as if on host `host`: its own UTS namespace, renamed. Needs
/// root; without it the test fails, naming it.
fn on_host(idem: Idem, host: &str) -> Option<Idem> {
    Some(idem.under(&host_prefix(host)?))
}
