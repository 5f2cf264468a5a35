//! Facts about this machine that a claim records for people to read (who
//! ran a key, where); liveness is never judged by them (see `ledger::runlock`).

use std::sync::OnceLock;

/// This host's name (`{host}` in keys, `host` in the ledger).
pub fn name() -> String {
    static NAME: OnceLock<String> = OnceLock::new();
    NAME.get_or_init(|| {
        nix::unistd::gethostname()
            .ok()
            .and_then(|name| name.into_string().ok())
            .unwrap_or_else(|| "localhost".to_owned())
    })
    .clone()
}

/// This boot's id: tells that a claim recorded by an older idem, which did
/// not lock, cannot still be running (see `ledger::sqlite`).
pub fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|id| id.trim().to_owned())
        .unwrap_or_default()
}
