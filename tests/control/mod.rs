//! Fleet control: what bounds and steers the runs that share a ledger.

mod holders;
mod slots;
