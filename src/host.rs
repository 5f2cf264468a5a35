//! Facts about this machine that a claim records for people to read (who
//! ran a key, where, in which time zone); liveness is never judged by them
//! (see `ledger::runlock`).

use std::sync::OnceLock;

use jiff::tz::TimeZone;

/// This host's name (`{host}` in keys, `host` in the ledger).
pub fn name() -> String {
    static NAME: OnceLock<String> = OnceLock::new();
    NAME.get_or_init(|| {
        nix::unistd::gethostname()
            .ok()
            .and_then(|name| name.into_string().ok())
            .unwrap_or_else(|| "localhost".to_owned())
    })
    .clone()
}

/// This boot's id: tells that a claim recorded by an older idem, which did
/// not lock, cannot still be running (see `ledger::sqlite`).
/// Read once a process, in one `read` (a claim stamps it, and judging an
/// owner may ask again); empty where `/proc` does not tell.
pub fn boot_id() -> &'static str {
    use std::io::Read;
    static BOOT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    BOOT.get_or_init(|| {
        // A UUID and its newline: 37 bytes.
        let mut bytes = [0u8; 64];
        let read = std::fs::File::open("/proc/sys/kernel/random/boot_id")
            .and_then(|mut file| file.read(&mut bytes));
        match read {
            Ok(n) => String::from_utf8_lossy(&bytes[..n]).trim().to_owned(),
            Err(_) => String::new(),
        }
    })
}

/// This host's time zone: jiff's `TimeZone::system()`, read for the
/// common cases without the cost of its first call. To look a zone's name
/// up, jiff first lists every file of the time zone database (900 files
/// in 43 folders on a Debian host: 3M instructions and 70 system calls,
/// two thirds of a skip of a key with `{date}`). idem reads the one file
/// instead: with `TZ` unset and /etc/localtime linked into a zoneinfo
/// folder, that file under the link's name, which is what glibc, and so
/// `date` and cron, read; with `TZ` an Area/Location name, that file of
/// the zoneinfo folder. Anything else (a POSIX rule, a path, `TZDIR`, a
/// copied /etc/localtime) is left to jiff.
pub fn zone() -> TimeZone {
    static ZONE: OnceLock<TimeZone> = OnceLock::new();
    ZONE.get_or_init(|| zone_file().unwrap_or_else(TimeZone::system))
        .clone()
}

fn zone_file() -> Option<TimeZone> {
    const LOCALTIME: &str = "/etc/localtime";
    const FOLDER: &str = "zoneinfo/";
    match std::env::var_os("TZ") {
        None => {
            let target = std::fs::read_link(LOCALTIME).ok()?;
            let target = target.to_str()?;
            let name = &target[target.rfind(FOLDER)? + FOLDER.len()..];
            TimeZone::tzif(name, &std::fs::read(LOCALTIME).ok()?).ok()
        }
        // A slash marks a name: a POSIX rule (`EST5EDT,M3.2.0,M11.1.0`)
        // has none. glibc allows a leading colon.
        Some(tz) => {
            let tz = tz.to_str()?;
            let name = tz.strip_prefix(':').unwrap_or(tz);
            zone_file_named(name.contains('/').then_some(name)?)
        }
    }
}

/// The zoneinfo file of the zone `name`, unless `TZDIR` says to look
/// elsewhere (then jiff looks) or the name is not made of plain parts.
fn zone_file_named(name: &str) -> Option<TimeZone> {
    let plain = name.split('/').all(|part| {
        part.bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphanumeric())
            && part
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_+-.".contains(&b))
    });
    if !plain || std::env::var_os("TZDIR").is_some() {
        return None;
    }
    let data = std::fs::read(std::path::Path::new("/usr/share/zoneinfo").join(name)).ok()?;
    TimeZone::tzif(name, &data).ok()
}

/// Now, in this host's time zone.
pub fn now() -> jiff::Zoned {
    jiff::Timestamp::now().to_zoned(zone())
}

/// The time zone named `name` (a job's), read as [`zone`] reads one.
pub fn zone_named(name: &str) -> Option<TimeZone> {
    let host = zone();
    if host.iana_name() == Some(name) {
        return Some(host);
    }
    zone_file_named(name).or_else(|| TimeZone::get(name).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_zone_is_the_one_jiff_finds() {
        let (ours, jiffs) = (zone(), TimeZone::system());
        assert_eq!(ours.iana_name(), jiffs.iana_name());
        for seconds in [
            0,
            1_700_000_000,
            1_711_846_800,
            1_729_990_800,
            4_000_000_000,
        ] {
            let at = jiff::Timestamp::from_second(seconds).unwrap();
            assert_eq!(ours.to_offset(at), jiffs.to_offset(at), "at {at}");
        }
        let name = jiffs.iana_name().unwrap_or("UTC");
        assert_eq!(
            zone_named(name).and_then(|zone| zone.iana_name().map(str::to_owned)),
            Some(name.to_owned())
        );
    }

    #[test]
    fn a_named_zone_is_its_zoneinfo_file_and_nothing_outside() {
        for refused in [
            "",
            "/etc/passwd",
            "../../etc/passwd",
            "Europe/../../x",
            "Europe//Berlin",
        ] {
            assert!(zone_file_named(refused).is_none(), "{refused:?}");
        }
        if !std::path::Path::new("/usr/share/zoneinfo/Pacific/Kiritimati").exists() {
            // Under CI a missing time zone database fails the test.
            assert!(
                std::env::var_os("CI").is_none(),
                "tzdata is needed and missing here"
            );
            return;
        }
        let far = zone_named("Pacific/Kiritimati").unwrap();
        assert_eq!(far.iana_name(), Some("Pacific/Kiritimati"));
        let at = jiff::Timestamp::from_second(1_700_000_000).unwrap();
        assert_eq!(far.to_offset(at), jiff::tz::offset(14));
    }
}
