//! The ledger's path, judged before SQLite opens anything, and the file
//! system it lives on.

use std::fs::{DirBuilder, File, Metadata, OpenOptions, Permissions};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::exit::io_words;
use crate::ledger::error::{FolderFault, Refusal};

// ---- the ledger's path, judged before SQLite opens anything -------------
//
// As ssh judges `authorized_keys`: a ledger decides what runs, so idem uses
// only a file of its own user that no one else can write, in a folder that
// no one else can swap it out of (owned by the user or root, and writable
// by no one else unless sticky, like /tmp). It never follows a symbolic
// link at the ledger's path or beside it, where another user could plant
// one to make idem write a file of its choosing. A refusal changes nothing.

fn folder_fault(folder: &Path, fault: FolderFault) -> anyhow::Error {
    Refusal::Folder {
        folder: folder.display().to_string(),
        fault,
    }
    .into()
}

/// A file's owner for people: `alice (uid 1000)`, or `uid 4242`.
pub(super) fn owner_words(uid: u32) -> String {
    match nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)) {
        Ok(Some(user)) => format!("{} (uid {uid})", user.name),
        _ => format!("uid {uid}"),
    }
}

fn mode_words(mode: u32) -> String {
    format!("{:04o}", mode & 0o7777)
}

/// What a file that is not a regular file is, for people.
fn kind_words(file_type: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if file_type.is_dir() {
        "a folder"
    } else if file_type.is_fifo() {
        "a fifo"
    } else if file_type.is_char_device() {
        "a character device"
    } else if file_type.is_block_device() {
        "a block device"
    } else if file_type.is_socket() {
        "a socket"
    } else {
        "not a file"
    }
}

fn not_regular(path: &Path, file_type: std::fs::FileType) -> anyhow::Error {
    Refusal::NotRegular {
        ledger: path.display().to_string(),
        kind: kind_words(file_type),
    }
    .into()
}

pub(super) fn symbolic_link(path: &Path) -> anyhow::Error {
    Refusal::SymbolicLink {
        ledger: path.display().to_string(),
    }
    .into()
}

/// Refuses a file at (or beside) the ledger that is not the user's own or
/// that others can write.
fn check_owner_and_mode(path: &Path, metadata: &std::fs::Metadata) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let me = nix::unistd::geteuid().as_raw();
    if metadata.uid() != me {
        return Err(Refusal::ForeignOwner {
            ledger: path.display().to_string(),
            owner: owner_words(metadata.uid()),
            me: owner_words(me),
        }
        .into());
    }
    check_mode(path, metadata)
}

/// Refuses a file at (or beside) the ledger that others can write.
fn check_mode(path: &Path, metadata: &std::fs::Metadata) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    if metadata.mode() & 0o022 != 0 {
        return Err(Refusal::OpenToOthers {
            ledger: path.display().to_string(),
            mode: mode_words(metadata.mode()),
        }
        .into());
    }
    Ok(())
}

/// What `run` finds of the ledger's folder, as [`judge_folder`] judges it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Folder {
    /// There, and fit to hold the ledger.
    Ready,
    /// Missing, and `run` can make it (0700, with the folders above it):
    /// only the default location's folder is made.
    Missing,
}

/// Judges the ledger's folder as `run` does, changing nothing: refuses one
/// that cannot be searched, that another user owns, or that others can
/// write without the sticky bit, and a missing one that this user cannot
/// make. `idem doctor` asks the same, so that it never promises what `run`
/// refuses.
pub(super) fn judge_folder(path: &Path) -> Result<Folder> {
    use std::os::unix::fs::MetadataExt;
    let folder = crate::ledger::folder_of(path);
    let metadata = match std::fs::metadata(folder) {
        Ok(metadata) => metadata,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            if !crate::ledger::Location::is_default_folder(folder) {
                return Err(folder_fault(folder, FolderFault::Missing));
            }
            return makeable(folder).map(|()| Folder::Missing);
        }
        Err(error) if error.kind() == std::io::ErrorKind::PermissionDenied => {
            return Err(folder_fault(
                folder,
                FolderFault::Unreachable(io_words(&error)),
            ))
        }
        Err(error) => {
            return Err(folder_fault(
                folder,
                FolderFault::Unreadable(io_words(&error)),
            ))
        }
    };
    if !metadata.is_dir() {
        return Err(Refusal::NotAFolder {
            ledger: path.display().to_string(),
            folder: folder.display().to_string(),
        }
        .into());
    }
    check_searchable(folder, &metadata)?;
    let me = nix::unistd::geteuid().as_raw();
    if metadata.uid() != me && metadata.uid() != 0 {
        return Err(folder_fault(
            folder,
            FolderFault::ForeignOwner {
                owner: owner_words(metadata.uid()),
            },
        ));
    }
    let sticky = metadata.mode() & 0o1000 != 0;
    if metadata.mode() & 0o022 != 0 && !sticky {
        return Err(folder_fault(
            folder,
            FolderFault::OpenToOthers {
                mode: mode_words(metadata.mode()),
            },
        ));
    }
    Ok(Folder::Ready)
}

/// Refuses a missing `folder` that this user cannot make: the nearest
/// folder above it that exists must let this user add to it, as mkdir
/// would ask.
fn makeable(folder: &Path) -> Result<()> {
    let not_made =
        |error: &std::io::Error| folder_fault(folder, FolderFault::NotCreated(io_words(error)));
    for above in folder.ancestors().skip(1) {
        let above = if above.as_os_str().is_empty() {
            Path::new(".")
        } else {
            above
        };
        match std::fs::metadata(above) {
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => continue,
            Err(error) => return Err(not_made(&error)),
            Ok(metadata) if !metadata.is_dir() => {
                return Err(not_made(&std::io::Error::from_raw_os_error(
                    nix::libc::ENOTDIR,
                )))
            }
            Ok(_) => {
                let flags = nix::unistd::AccessFlags::W_OK | nix::unistd::AccessFlags::X_OK;
                return nix::unistd::access(above, flags)
                    .map_err(|errno| not_made(&std::io::Error::from_raw_os_error(errno as i32)));
            }
        }
    }
    Ok(())
}

/// Judges, changing nothing, what `run` would refuse of a ledger it is to
/// create at `path`: its folder (see [`judge_folder`]), or a folder that
/// this user may not add the file to.
pub(super) fn judge_new_ledger(path: &Path) -> Result<()> {
    if judge_folder(path)? == Folder::Ready {
        let folder = crate::ledger::folder_of(path);
        let flags = nix::unistd::AccessFlags::W_OK | nix::unistd::AccessFlags::X_OK;
        nix::unistd::access(folder, flags)
            .map_err(|errno| open_error(path, &std::io::Error::from_raw_os_error(errno as i32)))?;
    }
    Ok(())
}

/// Makes the ledger's folder (0700) when it is missing, once
/// [`judge_folder`] finds that `run` may use it.
pub(super) fn prepare_folder(path: &Path) -> Result<()> {
    if judge_folder(path)? == Folder::Missing {
        let folder = crate::ledger::folder_of(path);
        DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(folder)
            .map_err(|error| folder_fault(folder, FolderFault::NotCreated(io_words(&error))))?;
        // Made by another process meanwhile, it is judged as found.
        judge_folder(path)?;
    }
    Ok(())
}

/// Refuses a folder this user cannot search, with advice that fits whose
/// it is.
fn check_searchable(folder: &Path, metadata: &Metadata) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    if nix::unistd::access(folder, nix::unistd::AccessFlags::X_OK).is_ok() {
        return Ok(());
    }
    Err(folder_fault(
        folder,
        FolderFault::NotSearchable {
            mode: mode_words(metadata.mode()),
            owner: owner_words(metadata.uid()),
            mine: metadata.uid() == nix::unistd::geteuid().as_raw(),
        },
    ))
}

/// Opens the ledger file to read it only, whoever owns it: never through
/// a link, a regular file of one name (see [`check_one_name`]). Its owner
/// and modes guard what a run writes, so a reader does not judge them;
/// a folder it cannot search is refused with words of its own.
pub(super) fn open_file_to_read(path: &Path) -> Result<File> {
    let folder = crate::ledger::folder_of(path);
    match std::fs::metadata(folder) {
        Ok(metadata) if !metadata.is_dir() => {
            return Err(Refusal::NotAFolder {
                ledger: path.display().to_string(),
                folder: folder.display().to_string(),
            }
            .into())
        }
        Ok(metadata) => check_searchable(folder, &metadata)?,
        Err(_) => {}
    }
    match std::fs::symlink_metadata(path) {
        Ok(metadata) if metadata.file_type().is_symlink() => return Err(symbolic_link(path)),
        Ok(metadata) if !metadata.is_file() => return Err(not_regular(path, metadata.file_type())),
        _ => {}
    }
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
        .open(path)
        .map_err(|error| open_error(path, &error))?;
    let metadata = file.metadata().map_err(|error| open_error(path, &error))?;
    if !metadata.is_file() {
        return Err(not_regular(path, metadata.file_type()));
    }
    check_one_name(path, &file, &metadata)?;
    Ok(file)
}

/// The ledger's path with its folder's real path: every link above the
/// ledger followed, its own name kept (never a link: see [`open_file`]);
/// `None` when the folder cannot be resolved.
pub(super) fn real_path(path: &Path) -> Option<PathBuf> {
    let folder = crate::ledger::folder_of(path);
    let real = std::fs::canonicalize(folder).ok()?;
    Some(real.join(path.file_name()?))
}

/// Opens (creating with 0600) the ledger file; falls back to read-only
/// where the file or its file system refuses writes, so reading still works.
///
/// `O_NOFOLLOW` refuses a link, even a dangling one, and `O_NONBLOCK` keeps
/// a FIFO from hanging the open; what was opened is then judged by `fstat`
/// before SQLite sees it, so nothing (no `-journal`) appears beside a
/// device or a FIFO. A device is not even opened: `lstat` finds it first.
pub(super) fn open_file(path: &Path) -> Result<(File, bool)> {
    match std::fs::symlink_metadata(path) {
        Ok(metadata) if metadata.file_type().is_symlink() => return Err(symbolic_link(path)),
        Ok(metadata) if !metadata.is_file() => return Err(not_regular(path, metadata.file_type())),
        _ => {}
    }
    let options = |write: bool, create: bool| {
        let mut options = OpenOptions::new();
        options
            .read(true)
            .write(write)
            .create_new(create)
            .mode(0o600)
            .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK);
        options
    };
    let (opened, created) = match options(true, true).open(path) {
        Ok(file) => (Ok(file), true),
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {
            (options(true, false).open(path), false)
        }
        Err(error) => (Err(error), false),
    };
    let (file, writable) = match opened {
        Ok(file) => (file, true),
        Err(error)
            if matches!(
                error.raw_os_error(),
                Some(libc_errno::EACCES) | Some(libc_errno::EROFS)
            ) && std::fs::symlink_metadata(path).is_ok() =>
        {
            let file = options(false, false)
                .open(path)
                .map_err(|error| open_error(path, &error))?;
            (file, false)
        }
        Err(error) => return Err(open_error(path, &error)),
    };
    let metadata = file.metadata().map_err(|error| open_error(path, &error))?;
    if !metadata.is_file() {
        return Err(not_regular(path, metadata.file_type()));
    }
    check_one_name(path, &file, &metadata)?;
    if created {
        // The umask may have taken bits away; never add any.
        file.set_permissions(Permissions::from_mode(0o600))
            .with_context(|| format!("could not set permissions of {}", path.display()))?;
    } else {
        check_owner_and_mode(path, &metadata)?;
    }
    Ok((file, writable))
}

/// Refuses a ledger file reached by more than one name: a second hard link,
/// or the file mounted alone (`docker run -v /srv/ledger.db:/ledger.db`).
/// SQLite and idem find the -wal, -shm and -lock files by the name they
/// were given, so under each name the one ledger would keep side files of
/// its own: two WAL indexes of one file (a corrupt ledger), two lock files
/// (two runs of one key at once).
pub(crate) fn check_one_name(path: &Path, file: &File, metadata: &Metadata) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let ledger = path.display();
    if metadata.nlink() > 1 {
        return Err(refusal(format!(
            "ledger {ledger} has {} hard links, and under each name it would keep side files (-wal, -shm, -lock) of its own, so runs of one key could overlap; remove the other links, so that the ledger has one name",
            metadata.nlink()
        )));
    }
    if mounted_alone(path, file, metadata) {
        return Err(refusal(format!(
            "ledger {ledger} is a file mounted alone, so its side files (-wal, -shm, -lock) would be made beside the mount, apart from those of the ledger it is; mount the folder, not the file"
        )));
    }
    Ok(())
}

/// Whether `file` is the root of a mount of its own (a file bind-mounted
/// alone): as statx says, or, where it cannot say, by a device that is not
/// its folder's.
fn mounted_alone(path: &Path, file: &File, metadata: &Metadata) -> bool {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::MetadataExt;
    // SAFETY: statx is all-integer plain old data; all-zero is a value.
    let mut stats: nix::libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: statx reads the empty, NUL-terminated path and the open
    // descriptor, and writes only into the struct we own.
    let asked = unsafe {
        nix::libc::statx(
            file.as_raw_fd(),
            c"".as_ptr(),
            nix::libc::AT_EMPTY_PATH,
            nix::libc::STATX_BASIC_STATS,
            &raw mut stats,
        )
    };
    let root = nix::libc::STATX_ATTR_MOUNT_ROOT as u64;
    if asked == 0 && stats.stx_attributes_mask & root != 0 {
        return stats.stx_attributes & root != 0;
    }
    std::fs::metadata(crate::ledger::folder_of(path))
        .is_ok_and(|folder| folder.dev() != metadata.dev())
}

/// A refusal of the ledger in words of its own: exit 125, like the others.
fn refusal(message: String) -> anyhow::Error {
    crate::exit::Failure::new(crate::exit::IDEM_FAILED, message).into()
}

/// The -wal and -shm files are part of the ledger (and a -journal while a
/// write is caught midway): SQLite opens them by name, so they are judged
/// like the ledger itself; and so is the -lock file, whose bytes say which
/// runs live.
pub(super) fn check_side_files(path: &Path) -> Result<()> {
    for suffix in ["-wal", "-shm", "-journal", "-lock"] {
        let side = side_file(path, suffix);
        match std::fs::symlink_metadata(&side) {
            Ok(metadata) if metadata.file_type().is_symlink() => {
                return Err(Refusal::SideFileLink {
                    file: side.display().to_string(),
                    suffix,
                }
                .into())
            }
            Ok(metadata) if !metadata.is_file() => {
                return Err(not_regular(&side, metadata.file_type()))
            }
            // A lock file of root's, from a run as root, is no one's plant.
            Ok(metadata)
                if suffix == "-lock" && std::os::unix::fs::MetadataExt::uid(&metadata) == 0 =>
            {
                check_mode(&side, &metadata)?
            }
            Ok(metadata) => check_owner_and_mode(&side, &metadata)?,
            Err(_) => {}
        }
    }
    Ok(())
}

/// The file next to the ledger with `suffix` (`-wal`, `-shm`, `-journal`).
pub(crate) fn side_file(path: &Path, suffix: &str) -> PathBuf {
    let mut side = path.as_os_str().to_owned();
    side.push(suffix);
    PathBuf::from(side)
}

/// How to read a ledger that cannot be written. SQLite reads a WAL-mode
/// file through its -shm index and must create that index when it is
/// missing, which a read-only file system refuses. Without a -wal file the
/// main file holds every commit, so `immutable=1` reads it creating nothing
/// (a writer that starts meanwhile writes to a new -wal, not to this file,
/// until it checkpoints). `idem doctor` reads every ledger so, and so
/// does key completion.
pub(crate) fn read_only_uri(path: &Path) -> Result<PathBuf> {
    let wal_is_empty =
        std::fs::metadata(side_file(path, "-wal")).map_or(true, |wal| wal.len() == 0);
    if wal_is_empty {
        return Ok(sqlite_uri(path, "immutable=1"));
    }
    if side_file(path, "-shm").exists() {
        return Ok(sqlite_uri(path, "mode=ro"));
    }
    Err(Refusal::WalWithoutIndex {
        ledger: path.display().to_string(),
    }
    .into())
}

/// A `file:` URI for `path` with `query`: every byte but the unreserved ones
/// is percent-encoded, so `?`, `#` and non-UTF-8 names survive.
fn sqlite_uri(path: &Path, query: &str) -> PathBuf {
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    let mut uri = b"file:".to_vec();
    if path.is_absolute() {
        uri.extend_from_slice(b"//");
    }
    for &byte in path.as_os_str().as_bytes() {
        if byte.is_ascii_alphanumeric() || b"/-._~".contains(&byte) {
            uri.push(byte);
        } else {
            uri.extend_from_slice(format!("%{byte:02X}").as_bytes());
        }
    }
    uri.push(b'?');
    uri.extend_from_slice(query.as_bytes());
    PathBuf::from(std::ffi::OsString::from_vec(uri))
}

mod libc_errno {
    pub const EACCES: i32 = nix::errno::Errno::EACCES as i32;
    pub const EROFS: i32 = nix::errno::Errno::EROFS as i32;
    pub const ELOOP: i32 = nix::errno::Errno::ELOOP as i32;
}

pub(super) fn open_error(path: &Path, error: &std::io::Error) -> anyhow::Error {
    if error.raw_os_error() == Some(libc_errno::ELOOP) {
        // Made a link since it was looked at.
        return symbolic_link(path);
    }
    Refusal::Unopenable {
        ledger: path.display().to_string(),
        why: io_words(error),
    }
    .into()
}

/// Bytes free for unprivileged writers on the file system of `path`.
pub(crate) fn free_bytes(path: &Path) -> Option<u64> {
    let stats = nix::sys::statvfs::statvfs(crate::ledger::folder_of(path)).ok()?;
    Some(
        stats
            .blocks_available()
            .saturating_mul(stats.fragment_size()),
    )
}

/// Whether the file system holding `path` has (next to) no space left.
pub(crate) fn disk_full(path: &Path) -> bool {
    free_bytes(path).is_some_and(|free| free < 256 << 10)
}

/// The ledger's WAL, opened to sync it (read-only will do), never through
/// a link.
pub(super) fn open_wal(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(side_file(path, "-wal"))
}

/// Syncs the folder that holds the ledger, so the entries of its files
/// (a WAL just made) survive a power cut.
pub(super) fn sync_folder(path: &Path) -> std::io::Result<()> {
    File::open(crate::ledger::folder_of(path))?.sync_all()
}
