//! Fleet control: stopping runs wherever they run, and `run --replace`.

mod replace;
mod stop;
