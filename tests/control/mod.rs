//! Fleet control: holding a job's runs back (`pause`, `resume`), stopping
//! runs wherever they run (`stop`, `run --replace`), on every ledger, with
//! hosts made as UTS namespaces of their own.

mod holders;
mod pause;
mod replace;
mod slots;
mod stop;

use std::process::{Command, Stdio};

use crate::util::{require, Idem};

/// `idem` as if on host `host`: its own UTS namespace, renamed. Needs
/// root; without it the test fails, naming it.
fn on_host(idem: Idem, host: &str) -> Option<Idem> {
    let works = Command::new("unshare")
        .args(["--uts", "true"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    if !require(works, "`unshare --uts` (it needs root)") {
        return None;
    }
    Some(idem.under(&[
        "unshare",
        "--uts",
        "sh",
        "-c",
        "hostname \"$0\" && exec \"$@\"",
        host,
    ]))
}
