//! How a running head's owner was judged, beyond whether it lives: what a
//! line that names the owner can say of it, worded here once for `doctor`,
//! `ledger forget` and whatever else says why idem cannot judge a run.

/// What told whether a running head's owner lives (see `Owner::alive`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Judged {
    /// Its kernel lock (a local ledger) or its lease (a shared one).
    #[default]
    Held,
    /// Its lock or lease said over, but processes of the run still live on
    /// this host (a worker left by a killed idem and guardian): alive.
    LeftRunning,
    /// Not judged: its claim took no lock (an idem that did not lock yet).
    Unlocked,
    /// Not judged: the lock file it locked was deleted or replaced since.
    LockMoved,
}

impl Judged {
    /// Why such an owner cannot be judged, for the line that says so.
    pub fn unjudged_words(self) -> &'static str {
        match self {
            Judged::LockMoved => "its lock file was moved or deleted while it ran",
            Judged::Unlocked => "claimed by an idem too old to take the run's lock",
            // An owner judged alive or over is never called unjudged; a
            // line that must say something says what is known of them.
            Judged::Held | Judged::LeftRunning => "idem cannot tell whether it lives",
        }
    }
}
