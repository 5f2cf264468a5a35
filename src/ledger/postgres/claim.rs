//! A claim of a key, in one short transaction: the key's row locked (made
//! if need be), its head read, the run logic's plan applied, and the new
//! run started under a new epoch and lease; then the record of each
//! attempt's start, fenced by that epoch.

use futures_util::future::{try_join3, try_join5};

use super::super::rules;
use super::super::{encode_command, Claim, Head, NewRun, Plan, Status};
use super::client::{Client, Transaction, READ_COMMITTED};
use super::interval;
use super::rows::query_head;
use super::tx::Tx;
use crate::process::Containment;

/// Claims `key` if `plan` asks for it. `seen`: its head as read just
/// before, with its row id, when there was such a read.
pub(super) fn claim(
    client: &mut Client,
    key: &str,
    seen: Option<Option<(i64, Head)>>,
    plan: &mut dyn FnMut(Option<&Head>, bool) -> Plan,
) -> Result<Option<Claim>, tokio_postgres::Error> {
    if let Some(seen) = seen {
        if let Some(claim) = claim_as_seen(client, key, &seen, plan)? {
            return Ok(Some(claim));
        }
    }
    // Begins; creates the key's row, or locks it without writing (a
    // conflicting row is locked even when WHERE is false); reads the
    // head: one round trip. Every claimer of the key queues at the
    // lock. The server runs a pipeline's statements one after the
    // other, so the head's statement starts after the lock is taken
    // and sees the last commit.
    let mut tx = Transaction::pipelined(client);
    let head = tx.pipeline(async |db| {
        let ((), (), head) = try_join3(
            db.batch_execute(READ_COMMITTED),
            lock_key(db, key),
            query_head(db, key),
        )
        .await?;
        Ok(head)
    })?;
    // A shared ledger's liveness is the lease alone: nothing lingers.
    let plan = plan(head.as_ref().map(|(_, head)| head), false);
    if let (true, Some((id, _))) = (plan.abandon_head, &head) {
        rules::Tx::mark_abandoned(&mut Tx::new(&mut tx), *id)?;
    }
    let Some(new) = plan.claim else {
        tx.commit()?;
        return Ok(None);
    };
    // The run and the commit: one round trip.
    let epoch = tx.pipeline(async |db| {
        let (epoch, (), ()) = try_join3(
            start_run(db, key, &new, None),
            super::outbox::owe(db, &new.owed),
            db.batch_execute("COMMIT"),
        )
        .await?;
        Ok(epoch)
    })?;
    tx.committed();
    Ok(epoch.map(|epoch| claimed(key, &new, epoch)))
}

/// The claim in one round trip, when the plan made on the head read just
/// before is to start a run: begin, lock the key's row, start the run
/// only if the head is still the one seen, commit. The head read is safe
/// to act on when unchanged: only a running head changes in place (its
/// outcome, its lease), and that case goes the long way, as does any plan
/// that abandons a head. None: nothing was claimed, claim the long way.
fn claim_as_seen(
    client: &mut Client,
    key: &str,
    seen: &Option<(i64, Head)>,
    plan: &mut dyn FnMut(Option<&Head>, bool) -> Plan,
) -> Result<Option<Claim>, tokio_postgres::Error> {
    if let Some((_, head)) = seen {
        if head.run.status == Status::Running {
            return Ok(None);
        }
    }
    let plan = plan(seen.as_ref().map(|(_, head)| head), false);
    let (false, Some(new)) = (plan.abandon_head, plan.claim) else {
        return Ok(None);
    };
    let expected = seen.as_ref().map(|(id, _)| *id);
    let mut tx = Transaction::pipelined(client);
    let epoch = tx.pipeline(async |db| {
        let ((), (), epoch, (), ()) = try_join5(
            db.batch_execute(READ_COMMITTED),
            lock_key(db, key),
            start_run(db, key, &new, Some(expected)),
            super::outbox::owe(db, &new.owed),
            db.batch_execute("COMMIT"),
        )
        .await?;
        Ok(epoch)
    })?;
    tx.committed();
    Ok(epoch.map(|epoch| claimed(key, &new, epoch)))
}

/// Creates the key's row, or locks it without writing (a conflicting row
/// is locked even when WHERE is false).
async fn lock_key(db: &tokio_postgres::Client, key: &str) -> Result<(), tokio_postgres::Error> {
    db.execute_typed(
        "INSERT INTO idem.keys (key) VALUES ($1)
         ON CONFLICT (key) DO UPDATE SET epoch = idem.keys.epoch WHERE false",
        typed![&key => TEXT],
    )
    .await?;
    Ok(())
}

/// The claim of `new`, made under `epoch`.
fn claimed(key: &str, new: &NewRun, epoch: i64) -> Claim {
    Claim {
        key: key.to_owned(),
        run_id: new.run_id,
        token: epoch,
        fence: epoch,
        hold: None,
        locks: Vec::new(),
        pause_after: None,
    }
}

/// Records that attempt `number` of the claimed run starts, its command in
/// process group `pgid`, held together by `contained`; false when the
/// claim's epoch no longer holds the key.
pub(super) fn attempt_started(
    client: &mut Client,
    claim: &Claim,
    number: u32,
    pgid: u32,
    contained: Containment,
) -> Result<bool, tokio_postgres::Error> {
    // One statement, fenced by the epoch: the key's row is updated
    // (and locked) only while the claim is still this run's. It is
    // bookkeeping that matters only while this host stays up, so
    // its commit does not wait for the server's disk. The run's id too:
    // after a failover that lost commits, an epoch may be handed out again.
    let row = client.query_typed_one(
        "WITH k AS (
             UPDATE idem.keys SET owner_pgid = $3
             WHERE key = $1 AND epoch = $2
                 AND head = (SELECT id FROM idem.runs WHERE run_id = $5)
             RETURNING head
         ), r AS (
             UPDATE idem.runs SET attempts = $4
             WHERE id = (SELECT head FROM k) AND status = 'running'
             RETURNING id
         ), a AS (
             INSERT INTO idem.attempts (run, n, started_at, containment)
             SELECT id, $4, now(), $6 FROM r
             ON CONFLICT (run, n) DO NOTHING
         )
         SELECT (SELECT count(*) FROM r) AS started,
                set_config('synchronous_commit', 'off', true)",
        typed![
            &claim.key => TEXT,
            &claim.token => INT8,
            &i64::from(pgid) => INT8,
            &(number as i32) => INT4,
            &claim.run_id => UUID,
            &contained.name() => TEXT,
        ],
    )?;
    Ok(row.try_get::<_, i64>("started")? == 1)
}

/// Starts the new run of `key` (its row locked) and makes it the key's
/// head under a new epoch and lease: the epoch. With `head`, only if the
/// key's head is still that run (or still none): None, nothing written,
/// if not.
async fn start_run(
    db: &tokio_postgres::Client,
    key: &str,
    new: &NewRun,
    head: Option<Option<i64>>,
) -> Result<Option<i64>, tokio_postgres::Error> {
    // One statement, one round trip. The key's row is locked already, so
    // the job's row is the only lock it takes: every writer takes them in
    // that order (key, then job), so none waits on another in a circle.
    let sql = start_run_sql();
    let params = typed![
        &key => TEXT,
        &new.run_id => UUID,
        &new.host => TEXT,
        &i64::from(new.pid) => INT8,
        &encode_command(&new.command) => BYTEA,
        &new.shell => BOOL,
        &new.recovered => BOOL,
        &interval(new.lease) => TEXT,
        &new.job.name => TEXT,
        &new.job.template => TEXT,
        &new.job.zone => TEXT,
        &head.is_some() => BOOL,
        &head.flatten() => INT8,
        &crate::host::boot_id() => TEXT,
    ];
    let row = match head {
        Some(_) => db.query_typed_opt(&sql, params).await?,
        None => Some(db.query_typed_one(&sql, params).await?),
    };
    row.map(|row| row.try_get("epoch")).transpose()
}

/// The statement of [`start_run`]: `$12`, whether the key's head must
/// still be `$13` for anything to be written; `$14`, this boot, so that a
/// head whose lease passed is asked of this host's processes only in the
/// boot that claimed it.
fn start_run_sql() -> String {
    "WITH ok AS (
             SELECT 1 WHERE NOT $12
                 OR (SELECT head FROM idem.keys WHERE key = $1) IS NOT DISTINCT FROM $13
         ), job AS (
             INSERT INTO idem.jobs (job, template, zone, host, command, shell, first_run,
                 last_run, last_status, checked_at, running)
             SELECT $9, $10, $11, $3, $5, $6, now(), now(), 'running', now(), 1 FROM ok
             ON CONFLICT (job) DO UPDATE SET template = excluded.template,
                 zone = excluded.zone, host = excluded.host, command = excluded.command,
                 shell = excluded.shell,
                 first_run = coalesce(idem.jobs.first_run, now()), last_run = now(),
                 last_status = 'running', last_exit = NULL, checked_at = now(),
                 running = idem.jobs.running + 1
         ), run AS (
             INSERT INTO idem.runs (run_id, key, status, started_at, host, pid,
                 command, shell, recovered, job)
             SELECT $2, $1, 'running', now(), $3, $4, $5, $6, $7, $9 FROM ok
             RETURNING id
         )
         UPDATE idem.keys SET head = run.id, epoch = nextval('idem.fences'),
             owner_boot = nullif($14, ''), owner_pid_start = NULL, owner_pgid = NULL,
             owner_pgid_start = NULL, lease = $8::text::interval,
             lease_until = clock_timestamp() + $8::text::interval
         FROM run WHERE idem.keys.key = $1
         RETURNING idem.keys.epoch"
        .to_owned()
}
