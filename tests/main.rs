//! One integration-test binary: every module runs the real `idem`.

#![allow(clippy::unwrap_used)]

mod util;

mod after;
mod alerts;
mod attempts;
mod causes;
mod completions;
mod concurrency;
mod containment;
mod containment_cgroup;
mod containment_scan;
mod control;
mod delivery;
mod docs;
mod env_defaults;
mod examples;
mod failures;
mod faults;
mod generated;
mod guardian_steps;
mod hardening;
mod hooks;
mod jobs;
mod ledger;
mod ledger_rules;
mod limits;
mod liveness;
mod logs;
mod output;
mod pg;
mod postgres;
mod priority;
mod recipes;
mod run;
mod run_engine;
mod serve;
mod serve_actions;
mod serve_states;
mod traces;
mod truth;
mod wrapper;
mod wrapper_ux;
