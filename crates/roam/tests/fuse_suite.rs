//! The FUSE frontend end to end: the read and write cases of the `roam run` suites on a
//! `roam mount` of every backend, a POSIX semantics suite, and mounting itself (a non-root
//! user through fusermount3, a server that dies, roam killed with -9).

mod common;

use common::read_cases::read_suite;
use common::Frontend::Fuse;

common::write_cases::for_each_backend!(Fuse);

mod read {
    use super::*;

    #[test]
    fn webdav() {
        read_suite("dav", Fuse);
    }

    #[test]
    fn ftp() {
        read_suite("ftp", Fuse);
    }

    #[test]
    fn sftp() {
        read_suite("sftp", Fuse);
    }

    #[test]
    fn chirp() {
        read_suite("chirp", Fuse);
    }

    #[test]
    fn s3() {
        read_suite("s3", Fuse);
    }

    #[test]
    fn local_through_the_cache() {
        read_suite("file+cache", Fuse);
    }
}
