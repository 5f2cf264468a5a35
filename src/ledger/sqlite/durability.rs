//! When a SQLite ledger's writes reach the disk, and the writers' lock
//! they are made under.

use std::fs::File;
use std::sync::{mpsc, Arc};
use std::time::Duration;

use anyhow::Result;

use super::super::error::{LedgerError, Why};
use super::path::{open_wal, sync_folder};
use super::tx::Tx;
use super::SqliteLedger;
use crate::exit::io_words;

/// How long idem waits for another writer before giving up (exit 125).
pub(super) const LOCK_WAIT: Duration = Duration::from_secs(10);

/// When a write transaction reaches the disk.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Sync {
    /// In its commit, under the writers' lock (`synchronous=FULL`). An
    /// outcome: no one may read a success that a power cut could take back
    /// (a skip standing on it would be reported, then lost).
    InCommit,
    /// Committed unsynced (`synchronous=NORMAL`), and owed to the disk
    /// before its command starts: the write that lets the command in
    /// ([`Sync::LetsIn`]) pays it, while the guardian forked in between
    /// starts on another CPU. A claim: others may see it before it is
    /// durable, which costs them only a refusal (the key is busy), and one
    /// lost to a power cut ran nothing.
    Owed,
    /// The write that lets a command in (an attempt's start): committed
    /// unsynced and, when a claim is owed, synced with it once the writers'
    /// lock is released, before the write returns (one sync for both; the
    /// next writer's transaction goes on while this one waits for the
    /// disk). Otherwise as [`Sync::Later`].
    LetsIn,
    /// With the next synced commit, whoever makes it: bookkeeping that
    /// matters only while the host stays up. NORMAL, not OFF: OFF also
    /// drops the syncs of a checkpoint the commit may run, which would copy
    /// the unsynced frames into the ledger file, where a power cut could
    /// leave half a transaction.
    Later,
}

impl SqliteLedger {
    /// Takes the writers' lock, waiting at most [`LOCK_WAIT`].
    pub(super) fn write_lock(&self) -> Result<LockGuard> {
        self.write_lock_preparing(&[])
    }

    /// Takes the writers' lock, waiting at most [`LOCK_WAIT`], and
    /// prepares the statements `ahead` while it waits (see [`Ahead`]).
    fn write_lock_preparing(&self, ahead: &[&str]) -> Result<LockGuard> {
        match self.lock.try_lock() {
            Ok(()) => return Ok(LockGuard(Arc::clone(&self.lock))),
            Err(std::fs::TryLockError::WouldBlock) => {}
            Err(std::fs::TryLockError::Error(error)) => return Err(self.lock_error(&error)),
        }
        // Block in the kernel's queue on a helper thread, so the wait can be
        // bounded; the thread holds its own handle, so the descriptor stays
        // open (see the field order of SqliteLedger) even if it outlives us.
        let (done, waited) = mpsc::channel();
        let file = Arc::clone(&self.lock);
        std::thread::spawn(move || {
            let _ = done.send(file.lock());
        });
        for sql in ahead {
            // An error comes again in the body, which reports it.
            let _ = self.conn.prepare_cached(sql);
        }
        match waited.recv_timeout(LOCK_WAIT) {
            Ok(Ok(())) => Ok(LockGuard(Arc::clone(&self.lock))),
            Ok(Err(error)) => Err(self.lock_error(&error)),
            Err(_) => Err(LedgerError::StayedLocked {
                ledger: self.path.display().to_string(),
                secs: LOCK_WAIT.as_secs(),
            }
            .into()),
        }
    }

    fn lock_error(&self, error: &std::io::Error) -> anyhow::Error {
        LedgerError::Could {
            doing: "lock".into(),
            ledger: self.path.display().to_string(),
            why: Why::Said(io_words(error)),
        }
        .into()
    }

    /// Runs `body` in an IMMEDIATE transaction under the writers' lock,
    /// durable as `sync` says by the time it returns. The statements
    /// `ahead` are prepared while the lock is waited for, if it is.
    pub(super) fn write<T>(
        &mut self,
        doing: &str,
        sync: Sync,
        ahead: &[&str],
        body: impl FnOnce(&mut Tx<'_>) -> rusqlite::Result<T>,
    ) -> Result<T> {
        // The connection's own setting: made before the lock is taken.
        let full = sync == Sync::InCommit;
        if self.full != full {
            let level = if full { "FULL" } else { "NORMAL" };
            self.conn
                .pragma_update(None, "synchronous", level)
                .map_err(|error| self.fail(doing, &error))?;
            self.full = full;
        }
        let changes = self.conn.total_changes();
        let value = {
            let _guard = self.write_lock_preparing(ahead)?;
            self.transaction(true, body)
                .map_err(|error| self.fail(doing, &error))?
        };
        // A transaction that changed nothing (a refused claim) wrote nothing.
        let wrote = self.conn.total_changes() != changes;
        let wal = match sync {
            Sync::InCommit if wrote => false,
            Sync::LetsIn if self.owed => true,
            Sync::Owed => {
                self.owed |= wrote;
                return Ok(value);
            }
            _ => return Ok(value),
        };
        self.sync(wal)
            .map_err(|error| self.sync_fault(doing, &error))?;
        // The WAL's sync, SQLite's or idem's, covers the claim's frames
        // too; a checkpoint since then synced them in the ledger file.
        self.owed = false;
        Ok(value)
    }

    /// After a durable write: syncs the WAL when SQLite did not (`wal`),
    /// and the ledger's folder, once per process. SQLite itself would sync
    /// the folder at each process's first sync of the WAL, so that a WAL it
    /// has just made stays after a power cut; idem's build leaves that to
    /// this, after the writers' lock is released.
    fn sync(&mut self, wal: bool) -> std::io::Result<()> {
        if wal {
            let file = match &self.wal {
                Some(file) => file,
                None => self.wal.insert(open_wal(&self.path)?),
            };
            file.sync_all()?;
        }
        if !self.folder_synced {
            // As SQLite's own: some file systems refuse to sync a folder
            // (EINVAL), and a ledger there must still work.
            let _ = sync_folder(&self.path);
            self.folder_synced = true;
        }
        Ok(())
    }

    fn sync_fault(&self, doing: &str, error: &std::io::Error) -> anyhow::Error {
        let why = if error.raw_os_error() == Some(nix::libc::ENOSPC) {
            Why::DiskFull
        } else {
            Why::Io(io_words(error))
        };
        LedgerError::Could {
            doing: doing.to_owned(),
            ledger: self.path.display().to_string(),
            why,
        }
        .into()
    }

    /// Folds the WAL into the ledger and empties it, after a write far
    /// larger than a run's: a process that opens the ledger alone reads the
    /// whole WAL to rebuild its index, so an import of a million runs would
    /// otherwise slow every run until the next checkpoint. Best effort: what
    /// was written is committed already, and a checkpoint that cannot finish
    /// now is finished by a later commit.
    pub(super) fn checkpoint(&self) {
        if let Ok(_guard) = self.write_lock() {
            let _ = self
                .conn
                .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
        }
    }

    /// Like `write`, but a dry run does the same work and rolls it back,
    /// so what it reports is exactly what a real run would do.
    pub(super) fn write_or_rehearse<T>(
        &mut self,
        doing: &str,
        dry_run: bool,
        body: impl FnOnce(&mut Tx<'_>) -> rusqlite::Result<T>,
    ) -> Result<T> {
        if !dry_run {
            return self.write(doing, Sync::InCommit, &[], body);
        }
        let _guard = self.write_lock()?;
        self.transaction(false, body)
            .map_err(|error| self.fail(doing, &error))
    }

    /// Runs `body` in an IMMEDIATE transaction, then commits it, or rolls
    /// it back (a rehearsal). The caller holds the writers' lock.
    fn transaction<T>(
        &mut self,
        commit: bool,
        body: impl FnOnce(&mut Tx<'_>) -> rusqlite::Result<T>,
    ) -> rusqlite::Result<T> {
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let value = body(&mut Tx {
            conn: &tx,
            locks: &self.locks,
        })?;
        if commit {
            tx.commit()?;
        } else {
            tx.rollback()?;
        }
        Ok(value)
    }
}

pub(super) struct LockGuard(Arc<File>);

impl Drop for LockGuard {
    fn drop(&mut self) {
        let _ = self.0.unlock();
    }
}
