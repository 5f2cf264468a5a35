// idem's own C `main`, which skips Rust's runtime start (see `idem::start`).
#![no_main]

use std::ffi::{c_char, c_int, OsString};

#[no_mangle]
extern "C" fn main(_argc: c_int, _argv: *const *const c_char) -> c_int {
    idem::start::start();
    // glibc hands argv to the standard library before `main` as well.
    let argv: Vec<OsString> = std::env::args_os().collect();
    let code = match idem::cmd::parse(&argv) {
        Ok(cli) => idem::exit::outcome(idem::run(cli)),
        Err(code) => code,
    };
    idem::start::finish();
    c_int::from(code)
}
