//! Leases: a claim's renewed by its owner's heartbeat, and the named locks
//! (`--lock NAME:N`), each slot a row leased to the run that holds it,
//! taken when free or when its holder's lease ran out, fenced by an epoch
//! from the same sequence as keys.

use std::time::Duration;

use uuid::Uuid;

use super::super::{Claim, Locks, NamedLock, Renewal};
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

/// Takes a slot of each named lock for run `run_id`, all or none; the
/// name of one whose slots are all held.
pub(super) fn take_locks(
    client: &mut Client,
    locks: &[NamedLock],
    run_id: Uuid,
    lease: Duration,
) -> Result<Result<Locks, String>, tokio_postgres::Error> {
    let mut tx = begin(client)?;
    for lock in locks {
        if !take_slot(&mut tx, lock, run_id, lease)? {
            tx.rollback()?;
            return Ok(Err(lock.name.clone()));
        }
    }
    tx.commit()?;
    Ok(Ok(Locks {
        holds: Vec::new(),
        names: locks.iter().map(|lock| lock.name.clone()).collect(),
    }))
}

/// Takes the first free slot of `lock` while fewer than its slots are
/// held (runs that gave it more slots may hold rows past its own); false
/// when it is full. Each slot is a row; a free one has no holder or a
/// holder whose lease ran out, and a new epoch fences the run that lost it.
fn take_slot(
    tx: &mut Client,
    lock: &NamedLock,
    run_id: Uuid,
    lease: Duration,
) -> Result<bool, tokio_postgres::Error> {
    // Slot 0's row, made once and locked to the commit, orders the takes
    // of one name, so that two never count the same free slots; names
    // are taken in one order, so they cannot deadlock.
    tx.execute_typed(
        "INSERT INTO idem.locks (name, slot) VALUES ($1, 0)
         ON CONFLICT (name, slot) DO UPDATE SET holder = idem.locks.holder",
        typed![&lock.name => TEXT],
    )?;
    let held = tx
        .query_typed(
            "SELECT slot FROM idem.locks WHERE name = $1
                 AND lease_until IS NOT NULL AND lease_until >= clock_timestamp()",
            typed![&lock.name => TEXT],
        )?
        .iter()
        .map(|row| row.try_get(0))
        .collect::<Result<Vec<i32>, _>>()?;
    let Some(free) = (0..i32::try_from(lock.slots).unwrap_or(i32::MAX))
        .find(|slot| !held.contains(slot))
        .filter(|_| held.len() < lock.slots as usize)
    else {
        return Ok(false);
    };
    // Still free when written: a heartbeat may have renewed a lapsed
    // lease since it was read.
    let taken = tx.query_typed_opt(
        "INSERT INTO idem.locks (name, slot, holder, epoch, lease, lease_until)
         VALUES ($1, $4, $2, nextval('idem.fences'), $3::text::interval,
             clock_timestamp() + $3::text::interval)
         ON CONFLICT (name, slot) DO UPDATE SET holder = excluded.holder,
             epoch = excluded.epoch, lease = excluded.lease,
             lease_until = excluded.lease_until
         WHERE idem.locks.lease_until IS NULL
             OR idem.locks.lease_until < clock_timestamp()
         RETURNING epoch",
        typed![&lock.name => TEXT, &run_id => UUID, &interval(lease) => TEXT, &free => INT4],
    )?;
    Ok(taken.is_some())
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

/// Renews the leases of `holder`'s locks `names`; false when one lapsed
/// (and may have gone to another run).
pub(super) fn renew_locks(
    client: &mut Client,
    holder: Uuid,
    names: &[String],
) -> Result<bool, tokio_postgres::Error> {
    let names = names.to_vec();
    let renewed = client.execute_typed(
        "UPDATE idem.locks SET lease_until = clock_timestamp() + lease
         WHERE holder = $1 AND name = ANY($2) AND lease_until >= clock_timestamp()",
        typed![&holder => UUID, &names => TEXT_ARRAY],
    )?;
    Ok(renewed as usize == names.len())
}
