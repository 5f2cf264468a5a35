//! One integration-test binary: every module runs the real `idem`.

#![allow(clippy::unwrap_used)]

mod util;

mod ledger;
mod run;
