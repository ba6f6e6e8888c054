//! The read suite over every driver: the fixture tree of the HTTP suite (nested dirs, a
//! 10 MB binary, a C project, a Python package, shell scripts) served by WebDAV, FTP, SFTP,
//! Chirp and S3 servers, and the same real programs run on it under `roam run` as on the local
//! copy, with the same output.

mod common;

use common::read_cases::read_suite;
use common::Frontend::Trap;

#[test]
fn webdav() {
    read_suite("dav", Trap);
}

#[test]
fn ftp() {
    read_suite("ftp", Trap);
}

#[test]
fn sftp() {
    read_suite("sftp", Trap);
}

#[test]
fn chirp() {
    read_suite("chirp", Trap);
}

#[test]
fn s3() {
    read_suite("s3", Trap);
}

#[test]
fn local_through_the_cache() {
    read_suite("file+cache", Trap);
}
