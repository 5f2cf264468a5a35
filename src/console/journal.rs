//! The journal's native protocol: one datagram a line to journald's
//! socket, each field `NAME=value` on a line of its own, or `NAME`, the
//! value's length as 64 bits little-endian and the value, when the value
//! has a newline (systemd's "Native Journal Protocol").

use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;

use super::{Event, Fields};

/// Where journald listens; `IDEM_JOURNAL_SOCKET` names another (a test's,
/// or a journal of a container's own).
const SOCKET: &str = "/run/systemd/journal/socket";

pub(super) struct Journal {
    socket: UnixDatagram,
    path: PathBuf,
}

impl Journal {
    /// The journal, when systemd connected stderr to it: `JOURNAL_STREAM`
    /// is `DEVICE:INODE` of stderr (a service's stderr piped on to a
    /// terminal or file is not the journal's, and keeps its lines there).
    pub fn for_stderr() -> Option<Journal> {
        let stream = std::env::var_os("JOURNAL_STREAM")?;
        let (device, inode) = stream.to_str()?.split_once(':')?;
        let (device, inode): (u64, u64) = (device.parse().ok()?, inode.parse().ok()?);
        let stat = nix::sys::stat::fstat(std::io::stderr()).ok()?;
        #[allow(clippy::useless_conversion)] // st_dev's type differs between targets
        if u64::from(stat.st_dev) != device || u64::from(stat.st_ino) != inode {
            return None;
        }
        let path = std::env::var_os("IDEM_JOURNAL_SOCKET")
            .filter(|path| !path.is_empty())
            .map_or_else(|| PathBuf::from(SOCKET), PathBuf::from);
        let socket = UnixDatagram::unbound().ok()?;
        Some(Journal { socket, path })
    }

    /// Sends one line with its fields; false when the journal is not there
    /// (or refused it), for the caller to write it to stderr instead.
    pub fn send(&self, event: Event, text: &str, fields: &Fields) -> bool {
        let mut datagram = Vec::with_capacity(256);
        field(&mut datagram, "MESSAGE", text);
        field(
            &mut datagram,
            "PRIORITY",
            &event.level().priority().to_string(),
        );
        field(&mut datagram, "SYSLOG_IDENTIFIER", "idem");
        field(&mut datagram, "IDEM_EVENT", event.name());
        let known = [
            ("IDEM_KEY", fields.key.clone()),
            ("IDEM_JOB", fields.job.clone()),
            ("IDEM_RUN_ID", fields.run_id.clone()),
            ("IDEM_ATTEMPT", fields.attempt.map(|n| n.to_string())),
            ("IDEM_EXIT_CODE", fields.exit_code.map(|n| n.to_string())),
            ("IDEM_CAUSE", fields.cause.clone()),
        ];
        for (name, value) in known {
            if let Some(value) = value {
                field(&mut datagram, name, &value);
            }
        }
        self.socket.send_to(&datagram, &self.path).is_ok()
    }
}

/// One field in the native protocol's form.
fn field(datagram: &mut Vec<u8>, name: &str, value: &str) {
    datagram.extend_from_slice(name.as_bytes());
    if value.contains('\n') {
        datagram.push(b'\n');
        datagram.extend_from_slice(&(value.len() as u64).to_le_bytes());
    } else {
        datagram.push(b'=');
    }
    datagram.extend_from_slice(value.as_bytes());
    datagram.push(b'\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_with_a_newline_is_sent_with_its_length() {
        let mut datagram = Vec::new();
        field(&mut datagram, "MESSAGE", "one\ntwo");
        let mut expected = b"MESSAGE\n".to_vec();
        expected.extend_from_slice(&7u64.to_le_bytes());
        expected.extend_from_slice(b"one\ntwo\n");
        assert_eq!(datagram, expected);
        let mut plain = Vec::new();
        field(&mut plain, "IDEM_KEY", "backup:2026-12-05");
        assert_eq!(plain, b"IDEM_KEY=backup:2026-12-05\n");
    }
}
