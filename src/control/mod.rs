//! Fleet control: what people do to runs and jobs from outside a run
//! (pause and resume, stop). `idem pause`, `idem stop` and `idem serve`'s
//! buttons call it; a run asks it only through the ledger's values.

pub mod pause;
pub mod stop;
