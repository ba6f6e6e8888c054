//! What a backend can express, as one plain value ([`Capabilities`], after OpenDAL's
//! `Capability`): each driver declares it once ([`crate::Driver::capabilities`]), the layers
//! above read it instead of asking method by method, and `tests/behaviour.rs` holds every
//! driver to it both ways: what is declared works against the real server, what is not
//! fails with the errno its field names.

/// What a backend can express. Every field is `false` by default (`Capabilities::default()`
/// is a read-only backend that can only stat, list and fetch whole files); a driver sets
/// what it can. A field that is `false` names the errno the request fails with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Capabilities {
    // ---- Reading.
    /// [`crate::Driver::read_range`] answers with the bytes asked for (else `ENOTSUP`).
    pub read_ranges: bool,
    /// roam-vfs reads this backend's large files in pieces as a program reads them, rather
    /// than whole at `open` (docs/SEMANTICS.md, "Large files"). Needs `read_ranges`.
    pub stream_large_files: bool,
    /// A `stat` costs no round trip (a local directory): a name that a listing lacks is
    /// then confirmed by one, since a listing read while another program renames over a
    /// name may miss it (readdir is not atomic with rename).
    pub cheap_stat: bool,
    /// Names may pass through symbolic links that the server itself would follow in the
    /// middle of a path (SFTP, FTP, Chirp): roam then follows them by its own rule instead,
    /// one component at a time (roam-vfs, `links.rs`).
    pub serves_links: bool,
    /// The files are open local files of this process (`mem:`'s memory files), so a
    /// frontend reads, writes, truncates and stats them in place
    /// ([`crate::Driver::open_in_place`], else `ENOTSUP`): there is nothing to copy,
    /// journal or upload, and nothing to cache.
    pub in_memory: bool,
    /// The files are local files that the kernel serves ([`crate::Driver::local_path`]
    /// answers: `file://`, `null:` over it): frontends hand their calls to the kernel, so
    /// hard links, special files and access times are the local file system's.
    pub in_place: bool,

    // ---- Writing. Without `write`, every change fails with `EROFS`.
    /// Files can be uploaded, directories made and removed, names removed
    /// (`upload`, `mkdir`, `remove_file`, `remove_dir`); else `EROFS`.
    pub write: bool,
    /// An upload's precondition ([`crate::Expect`]) is checked: a replacement of a version
    /// that changed fails with `ESTALE` and leaves the server's file alone
    /// (docs/SEMANTICS.md, "Concurrent writers", says how atomically per protocol).
    pub conditional_replace: bool,
    /// A file keeps permission bits: `set_mode` of a file, and an upload's
    /// [`crate::Attrs::mode`]. Else `set_mode` fails with `ENOTSUP` (FTP: `EACCES`, the
    /// server's refusal of an anonymous user) and an upload leaves the mode out.
    pub file_modes: bool,
    /// A directory keeps permission bits: `mkdir`'s mode and `set_mode` of a directory.
    /// Else `mkdir` gives the server's mode and `set_mode` fails as for a file.
    pub dir_modes: bool,
    /// `set_mtime` sets a modification time, and an upload keeps [`crate::Attrs::mtime`];
    /// else `ENOTSUP`, and the server's time stands.
    pub set_mtime: bool,
    /// An access time apart from the modification time: a stat shows it
    /// ([`crate::Meta::atime`]) and `set_times` sets it (SFTP, a local tree, `mem:`'s files).
    /// Else the modification time stands for it and `set_times` fails with `ENOTSUP`.
    pub set_atime: bool,
    /// `symlink` makes symbolic links (and a stat shows their targets); else `ENOTSUP`.
    pub symlinks: bool,
    /// A program can give a file a second name (`link`): the kernel does it where
    /// `in_place`, [`crate::Driver::hard_link`] where `in_memory` (`mem:`, whose names of
    /// one file are one object). Elsewhere no protocol request makes one: `hard_link`
    /// fails with `ENOTSUP`, and frontends say `EPERM`.
    pub hard_links: bool,
    /// `rename` of a file (replacing a file at the target, as rename(2) does); else
    /// `EROFS`.
    pub rename_files: bool,
    /// `rename` of a directory; else `EXDEV` (S3, whose directories are key prefixes: `mv`
    /// then copies), or `EROFS` on a read-only backend.
    pub rename_dirs: bool,
    /// FIFOs and unix sockets' names: `make_special` makes them (`mem:`), or the kernel
    /// does (`in_place`). Else `make_special` fails with `ENOTSUP`, which frontends turn
    /// into `EPERM`, as Linux says for a file system without them.
    pub special_files: bool,
    /// `copy` makes a copy of a file on the server, without its bytes crossing the
    /// network (S3 `CopyObject`, WebDAV `COPY`, a local file); else `ENOTSUP`.
    pub server_copy: bool,
}

impl Capabilities {
    /// A writable backend with precondition checks, file and directory renames, and
    /// nothing else: the common ground of WebDAV, FTP and S3 that each driver adds to.
    pub const fn writable() -> Capabilities {
        Capabilities {
            write: true,
            conditional_replace: true,
            rename_files: true,
            rename_dirs: true,
            ..Capabilities::READ_ONLY
        }
    }

    /// Stat, list and fetch whole files: nothing more.
    pub const READ_ONLY: Capabilities = Capabilities {
        read_ranges: false,
        stream_large_files: false,
        cheap_stat: false,
        serves_links: false,
        in_memory: false,
        in_place: false,
        write: false,
        conditional_replace: false,
        file_modes: false,
        dir_modes: false,
        set_mtime: false,
        set_atime: false,
        symlinks: false,
        hard_links: false,
        rename_files: false,
        rename_dirs: false,
        special_files: false,
        server_copy: false,
    };

    /// Range reads that roam-vfs also uses to stream large files.
    pub const fn with_ranges(self) -> Capabilities {
        Capabilities {
            read_ranges: true,
            stream_large_files: true,
            ..self
        }
    }

    /// Permission bits on files and directories, and modification times.
    pub const fn with_modes_and_times(self) -> Capabilities {
        Capabilities {
            file_modes: true,
            dir_modes: true,
            set_mtime: true,
            ..self
        }
    }
}
