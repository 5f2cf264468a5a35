//! Leases: a claim's renewed by its owner's heartbeat, and the named locks
//! (`--lock`), each a row leased to the run that holds it, taken when free
//! or when its holder's lease ran out, fenced by an epoch from the same
//! sequence as keys.

use std::time::Duration;

use uuid::Uuid;

use super::super::{Claim, Locks, Renewal};
use super::client::Client;
use super::tx::RELEASE_LOCKS;
use super::{begin, interval};

/// Renews the claim's lease and those of its named locks, or tells how
/// the claim was lost.
pub(super) fn heartbeat(
    client: &mut Client,
    claim: &Claim,
) -> Result<Renewal, tokio_postgres::Error> {
    // The run's id too, not the epoch alone: after a failover that lost
    // commits, the new primary may hand the same epoch to another run.
    // A stop request for the run is read in the same round trip.
    let row = client.query_typed_one(
        "WITH renewed AS (
             UPDATE idem.keys k SET lease_until = clock_timestamp() + k.lease
             FROM idem.runs r
             WHERE k.key = $1 AND k.epoch = $2 AND r.id = k.head AND r.run_id = $3
                 AND r.status = 'running'
             RETURNING 1)
         SELECT (SELECT count(*) FROM renewed) AS renewed,
             (SELECT signal FROM idem.stops WHERE run_id = $3
              ORDER BY requested_at LIMIT 1) AS stop",
        typed![&claim.key => TEXT, &claim.token => INT8, &claim.run_id => UUID],
    )?;
    if row.try_get::<_, i64>("renewed")? != 1 {
        return lost(client, claim);
    }
    let renewed = match row.try_get::<_, Option<i32>>("stop")? {
        Some(signal) => Renewal::Stop(signal),
        None => Renewal::Renewed,
    };
    if claim.locks.is_empty() {
        return Ok(renewed);
    }
    // A lock whose lease ran out may have gone to another run: then
    // this one has lost it, like a key, and must stop.
    let locks = client.execute_typed(
        "UPDATE idem.locks SET lease_until = clock_timestamp() + lease
         WHERE holder = $1 AND name = ANY($2) AND lease_until IS NOT NULL",
        typed![&claim.run_id => UUID, &claim.locks => TEXT_ARRAY],
    )?;
    Ok(if locks as usize == claim.locks.len() {
        renewed
    } else {
        Renewal::TakenOver
    })
}

/// How the claim was lost: its run is still in the ledger (another run
/// took the key over, or it was marked abandoned), or the ledger has no
/// trace of it, which only a lost commit explains.
fn lost(client: &mut Client, claim: &Claim) -> Result<Renewal, tokio_postgres::Error> {
    let known = client
        .query_typed_opt(
            "SELECT 1 FROM idem.runs WHERE run_id = $1",
            typed![&claim.run_id => UUID],
        )?
        .is_some();
    Ok(if known {
        Renewal::TakenOver
    } else {
        Renewal::Gone
    })
}

/// Takes the named locks for run `run_id`, all or none; the name of one
/// that is held.
pub(super) fn take_locks(
    client: &mut Client,
    names: &[String],
    run_id: Uuid,
    lease: Duration,
) -> Result<Result<Locks, String>, tokio_postgres::Error> {
    let mut tx = begin(client)?;
    for name in names {
        // Taken only when free or when its holder's lease ran out;
        // a new epoch fences the one who lost it.
        let taken = tx.query_typed_opt(
            "INSERT INTO idem.locks (name, holder, epoch, lease, lease_until)
             VALUES ($1, $2, nextval('idem.fences'), $3::text::interval,
                 clock_timestamp() + $3::text::interval)
             ON CONFLICT (name) DO UPDATE SET holder = excluded.holder,
                 epoch = excluded.epoch, lease = excluded.lease,
                 lease_until = excluded.lease_until
             WHERE idem.locks.lease_until IS NULL
                 OR idem.locks.lease_until < clock_timestamp()
             RETURNING epoch",
            typed![&name => TEXT, &run_id => UUID, &interval(lease) => TEXT],
        )?;
        if taken.is_none() {
            tx.rollback()?;
            return Ok(Err(name.clone()));
        }
    }
    tx.commit()?;
    Ok(Ok(Locks {
        holds: Vec::new(),
        names: names.to_vec(),
    }))
}

/// Releases the named locks of run `run_id`.
pub(super) fn release_locks(
    client: &mut Client,
    run_id: Uuid,
) -> Result<(), tokio_postgres::Error> {
    client
        .execute_typed(RELEASE_LOCKS, typed![&run_id => UUID])
        .map(|_| ())
}
