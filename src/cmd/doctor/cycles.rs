//! `idem doctor`: jobs that wait for each other in a circle (`a --after b`,
//! `b --after a`), found in the upstreams the ledger keeps per job. Such
//! jobs never deadlock (a blocked run holds nothing) but never run either.

use std::collections::{BTreeMap, BTreeSet};

use crate::ledger::Inspect;
use crate::render::doctor::Level;

use super::Report;

/// Reports the circles of upstreams the ledger keeps, once its schema is
/// current (an older one keeps none yet).
pub(super) fn check(ledger: &mut dyn Inspect, report: &mut Report) {
    let current = report
        .checks
        .iter()
        .any(|check| check.name == "schema" && check.level == Level::Ok);
    if !current {
        return;
    }
    let graph: BTreeMap<String, Vec<String>> = match ledger.upstreams() {
        Ok(rows) => rows.into_iter().collect(),
        Err(why) => {
            report.push(
                "upstreams",
                Level::Problem,
                format!("cannot be read: {why}"),
                None::<String>,
            );
            return;
        }
    };
    let cycles = cycles(&graph);
    report
        .facts
        .insert("upstream_cycles".into(), serde_json::json!(cycles));
    if cycles.is_empty() {
        report.ok(
            "upstreams",
            format!("{} job(s) wait for others, in no circle", graph.len()),
        );
        return;
    }
    let shown: Vec<String> = cycles.iter().map(|cycle| cycle.join(" -> ")).collect();
    report.push(
        "upstreams",
        Level::Problem,
        format!(
            "jobs wait for each other in a circle, so none of them will run: {}",
            shown.join("; ")
        ),
        Some("drop one --after of each circle; a blocked run holds nothing, so nothing is stuck meanwhile"),
    );
}

/// Every circle of the graph once, each from its smallest template and
/// back to it: `a -> b -> a`.
fn cycles(graph: &BTreeMap<String, Vec<String>>) -> Vec<Vec<String>> {
    let mut found = BTreeSet::new();
    for start in graph.keys() {
        let mut path = vec![start.clone()];
        walk(graph, start, &mut path, &mut found);
    }
    found.into_iter().collect()
}

/// Follows the upstreams of the path's last template; a path that comes
/// back to its start is a circle, kept when it starts at its smallest.
fn walk(
    graph: &BTreeMap<String, Vec<String>>,
    start: &str,
    path: &mut Vec<String>,
    found: &mut BTreeSet<Vec<String>>,
) {
    let Some(last) = path.last().cloned() else {
        return;
    };
    for next in graph.get(&last).into_iter().flatten() {
        if next == start {
            if path.iter().all(|template| template.as_str() >= start) {
                let mut cycle = path.clone();
                cycle.push(start.to_owned());
                found.insert(cycle);
            }
        } else if !path.contains(next) && graph.contains_key(next) {
            path.push(next.clone());
            walk(graph, start, path, found);
            path.pop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_circle_is_found_once_from_its_smallest_job() {
        let graph: BTreeMap<String, Vec<String>> = [
            ("b", vec!["a"]),
            ("a", vec!["b"]),
            ("x", vec!["y"]),
            ("y", vec!["z"]),
            ("z", vec!["x", "a"]),
            ("report", vec!["extract"]),
        ]
        .into_iter()
        .map(|(job, up)| (job.to_owned(), up.into_iter().map(str::to_owned).collect()))
        .collect();
        let shown: Vec<String> = cycles(&graph).iter().map(|c| c.join(" -> ")).collect();
        assert_eq!(shown, ["a -> b -> a", "x -> y -> z -> x"]);
    }
}
