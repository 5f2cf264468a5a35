//! Claims on a shared ledger: one runner among many, owners judged by
//! their leases alone (another host, another PID namespace), a run that
//! lost its claim, a frozen or killed idem, a stuck row lock.

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use super::{guarded, wait_for_attempt, wait_for_start, Pg};
use crate::util::{assert_code, text};

#[test]
fn postgres_thirty_racers_run_one_command() {
    let Some(pg) = Pg::new("postgres_thirty_racers_run_one_command") else {
        return;
    };
    // Claims keep to READ COMMITTED whatever the database's default.
    pg.server.sql(
        "postgres",
        "ALTER DATABASE idem SET default_transaction_isolation = 'serializable'",
    );
    // The command holds a lock file while it runs and notes an overlap if
    // it cannot take it at once.
    let lock = pg.env.path("lock");
    let script = format!(
        "flock -n '{}' -c \"{}; sleep 0.3\" || echo overlap >> '{}'",
        lock.display(),
        pg.count_cmd("count"),
        pg.env.path("overlaps").display()
    );
    let racers: Vec<Child> = (0..30)
        .map(|_| {
            pg.idem(["run", "--key", "race", "--shell", "--", &script])
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("idem starts")
        })
        .collect();
    for racer in racers {
        let output = racer.wait_with_output().unwrap();
        let code = output.status.code();
        assert!(
            code == Some(0) || code == Some(75),
            "a racer exited {code:?}: {}",
            text(&output.stderr)
        );
    }
    assert_eq!(pg.count("count"), 1, "the command ran more than once");
    assert_eq!(pg.count("overlaps"), 0, "two runs overlapped");
    let runs = pg.list_json();
    assert_eq!(runs.as_array().unwrap().len(), 1);
    assert_eq!(runs[0]["status"], "succeeded");
}

#[test]
fn postgres_heartbeat_keeps_a_run_past_its_lease() {
    let Some(pg) = Pg::new("postgres_heartbeat_keeps_a_run_past_its_lease") else {
        return;
    };
    let then = format!("sleep 4; {}", pg.count_cmd("count"));
    // The owner is on another host, so only its lease tells it is alive.
    let Some(mut owner) = pg.owner_on_another_host("long", "1s", &then, Stdio::piped()) else {
        return;
    };
    let script = format!("touch '{}'; {then}", pg.env.path("started").display());
    // Four leases long: every try from this host meets a live claim.
    let mut tries = 0;
    while owner.try_wait().unwrap().is_none() && tries < 100 {
        let output = pg.run(["run", "--key", "long", "--shell", "--", &script]);
        if owner.try_wait().unwrap().is_some() {
            break;
        }
        assert_code(&output, 75);
        tries += 1;
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        tries >= 3,
        "the owner ended too soon to tell ({tries} tries)"
    );
    let output = owner.wait_with_output().unwrap();
    assert_code(&output, 0);
    assert_eq!(pg.count("count"), 1);
    let runs = pg.list_json();
    assert_eq!(runs.as_array().unwrap().len(), 1);
    assert_eq!(runs[0]["status"], "succeeded");
    assert_eq!(runs[0]["host"], "host-a");
}

#[test]
fn postgres_takeover_after_the_owner_vanished() {
    let Some(pg) = Pg::new("postgres_takeover_after_the_owner_vanished") else {
        return;
    };
    let Some(mut owner) = pg.owner_on_another_host("job", "2s", "exec sleep 600", Stdio::null())
    else {
        return;
    };
    // The owner (and with it its command) vanishes without a word.
    owner.kill().unwrap();
    owner.wait().unwrap();

    let second = format!(
        "echo \"recovered=$IDEM_RECOVERED\" >> '{}'",
        pg.env.path("count").display()
    );
    let output = pg.run([
        "run", "--key", "job", "--wait", "60s", "--lease", "2s", "--shell", "--", &second,
    ]);
    assert_code(&output, 0);
    assert_eq!(
        std::fs::read_to_string(pg.env.path("count")).unwrap(),
        "recovered=1\n"
    );
    let runs = pg.list_json();
    let runs = runs.as_array().unwrap();
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[0]["status"], "succeeded");
    assert_eq!(runs[1]["status"], "abandoned");
    assert_eq!(runs[1]["host"], "host-a");
}

#[test]
fn postgres_an_owner_on_this_host_is_judged_by_its_lease_alone() {
    // A pid says nothing across PID namespaces (two containers with one
    // host name): a shared ledger judges every owner by its lease.
    let Some(pg) = Pg::new("postgres_an_owner_on_this_host_is_judged_by_its_lease_alone") else {
        return;
    };
    if !crate::liveness::require_root_namespaces() {
        return;
    }
    let started = pg.env.path("started");
    let first = format!("touch '{}'; exec sleep 600", started.display());
    let template = pg.idem([
        "run", "--key", "job", "--lease", "3s", "--shell", "--", &first,
    ]);
    let mut owner = crate::liveness::in_pid_namespace(&template)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_start(&started, &mut owner);
    wait_for_attempt(&pg);
    let count = pg.count_cmd("count");
    let busy = pg.run(["run", "--key", "job", "--shell", "--", &count]);
    assert_code(&busy, 75);
    // Killed with everything it ran, its lease runs out and the key is
    // taken over, told that the last run was abandoned.
    owner.kill().unwrap();
    owner.wait().unwrap();
    let began = Instant::now();
    let second = format!(
        "echo \"recovered=$IDEM_RECOVERED\" >> '{}'",
        pg.env.path("count").display()
    );
    let output = pg.run([
        "run", "--key", "job", "--wait", "60s", "--shell", "--", &second,
    ]);
    assert_code(&output, 0);
    eprintln!("takeover after {:?}", began.elapsed());
    assert_eq!(
        std::fs::read_to_string(pg.env.path("count")).unwrap(),
        "recovered=1\n"
    );
    assert_eq!(pg.list_json()[1]["status"], "abandoned");
}

#[test]
fn postgres_a_run_that_lost_its_claim_never_overwrites_the_newer_one() {
    let Some(pg) = Pg::new("postgres_a_run_that_lost_its_claim_never_overwrites_the_newer_one")
    else {
        return;
    };
    let Some(owner) = pg.owner_on_another_host("k", "1s", "exec sleep 600", Stdio::piped()) else {
        return;
    };
    wait_for_attempt(&pg);
    // The owner freezes (a paused VM, a stalled host): no heartbeat, and
    // its lease runs out; a run on this host takes the key over.
    let frozen = nix::unistd::Pid::from_raw(owner.id() as i32);
    nix::sys::signal::kill(frozen, nix::sys::signal::Signal::SIGSTOP).unwrap();
    let second = format!("echo second >> '{}'", pg.env.path("count").display());
    let output = pg.run([
        "run", "--key", "k", "--wait", "60s", "--shell", "--", &second,
    ]);
    nix::sys::signal::kill(frozen, nix::sys::signal::Signal::SIGCONT).unwrap();
    assert_code(&output, 0);

    // Thawed, the old owner stops its command and records nothing.
    let thawed = owner.wait_with_output().unwrap();
    assert_code(&thawed, 125);
    let stderr = text(&thawed.stderr);
    assert!(stderr.contains("does not run unowned"), "{stderr}");
    assert!(
        stderr.contains("the command exited 143, but idem could not record it"),
        "{stderr}"
    );
    let runs = pg.list_json();
    assert_eq!(runs[0]["status"], "succeeded");
    assert_ne!(runs[0]["host"], "host-a");
    assert_eq!(runs[1]["status"], "abandoned");
    assert_eq!(runs[1]["host"], "host-a");
    assert_eq!(pg.count("count"), 1);
}

#[test]
fn postgres_a_stuck_lock_holder_makes_a_claim_give_up() {
    let Some(pg) = Pg::new("postgres_a_stuck_lock_holder_makes_a_claim_give_up") else {
        return;
    };
    pg.cmd(["run", "--key", "k", "--force", "--", "true"])
        .succeeds();
    // A session that took the key's row and went quiet mid-transaction.
    let mut stuck = postgres::Client::connect(&pg.url(), postgres::NoTls).unwrap();
    let mut tx = stuck.transaction().unwrap();
    tx.execute("SELECT 1 FROM idem.keys WHERE key = 'k' FOR UPDATE", &[])
        .unwrap();
    let count = pg.count_cmd("count");
    let run = || pg.cmd(["run", "--key", "k", "--force", "--shell", "--", &count]);
    run()
        .expect_code(125)
        .stderr_has("another session held its row for 10s");
    assert_eq!(pg.count("count"), 0);
    tx.rollback().unwrap();
    run().succeeds();
    assert_eq!(pg.count("count"), 1);
}

#[test]
fn postgres_a_frozen_idem_has_its_run_stopped_before_the_lease_ends() {
    let Some(pg) = Pg::new("postgres_a_frozen_idem_has_its_run_stopped_before_the_lease_ends")
    else {
        return;
    };
    let first = guarded(&pg, 600);
    let mut owner = pg
        .idem([
            "run", "--key", "k", "--lease", "3s", "--shell", "--", &first,
        ])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    crate::util::wait_for_count(&pg.env, 1, &mut owner);
    wait_for_attempt(&pg);
    // idem alone is frozen: its guardian must stop the command by itself,
    // before another host may take the key over.
    let frozen = nix::unistd::Pid::from_raw(owner.id() as i32);
    nix::sys::signal::kill(frozen, nix::sys::signal::Signal::SIGSTOP).unwrap();
    let began = Instant::now();
    let second = guarded(&pg, 0);
    let output = pg.run([
        "run", "--key", "k", "--wait", "60s", "--shell", "--", &second,
    ]);
    eprintln!("taken over {:?} after the freeze", began.elapsed());
    nix::sys::signal::kill(frozen, nix::sys::signal::Signal::SIGCONT).unwrap();
    assert_code(&output, 0);
    let _ = owner.wait();
    assert_eq!(pg.count("count"), 2);
    assert_eq!(pg.count("overlaps"), 0, "the frozen run's command ran on");
}

#[test]
fn postgres_a_killed_idem_takes_its_whole_run_with_it() {
    let Some(pg) = Pg::new("postgres_a_killed_idem_takes_its_whole_run_with_it") else {
        return;
    };
    // A grandchild in a session of its own, then idem alone is SIGKILLed.
    let first = format!("setsid sh -c \"{}\" & sleep 600", guarded(&pg, 600));
    let mut owner = pg
        .idem([
            "run", "--key", "k", "--lease", "3s", "--shell", "--", &first,
        ])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    crate::util::wait_for_count(&pg.env, 1, &mut owner);
    wait_for_attempt(&pg);
    owner.kill().unwrap();
    owner.wait().unwrap();
    let began = Instant::now();
    let output = pg.run([
        "run",
        "--key",
        "k",
        "--wait",
        "60s",
        "--shell",
        "--",
        &guarded(&pg, 0),
    ]);
    eprintln!("taken over {:?} after the SIGKILL", began.elapsed());
    assert_code(&output, 0);
    assert_eq!(pg.count("count"), 2);
    assert_eq!(pg.count("overlaps"), 0, "the grandchild ran on");
}

#[test]
fn postgres_a_lease_counts_from_when_the_claim_is_written() {
    let Some(pg) = Pg::new("postgres_a_lease_counts_from_when_the_claim_is_written") else {
        return;
    };
    assert_code(&pg.run(["run", "--key", "k", "--", "true"]), 0);
    // Another session holds the key's row for longer than the lease, so
    // the claim waits for it; its lease must not be spent when it commits.
    let mut session = postgres::Client::connect(&pg.url(), postgres::NoTls).unwrap();
    let mut tx = session.transaction().unwrap();
    tx.execute("SELECT 1 FROM idem.keys WHERE key = 'k' FOR UPDATE", &[])
        .unwrap();
    let first = guarded(&pg, 3);
    let mut owner = pg
        .idem([
            "run", "--key", "k", "--force", "--lease", "2s", "--shell", "--", &first,
        ])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(3));
    tx.commit().unwrap();
    crate::util::wait_for_count(&pg.env, 1, &mut owner);
    let second = guarded(&pg, 0);
    let output = pg.run(["run", "--key", "k", "--force", "--shell", "--", &second]);
    assert_code(&output, 75);
    assert!(owner.wait().unwrap().success());
    assert_eq!(pg.count("overlaps"), 0);
}
