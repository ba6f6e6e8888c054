//! One authenticated TCP connection to a Chirp server: how lines and byte counts travel on
//! it, and the three ways a request can fail ([`Failure`]), which decide whether the
//! connection may be used again.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use super::proto::{Stat, LINE_MAX};
use super::url::Target;
use super::{auth, codes, ChirpConfig};
use crate::{Error, ErrorKind};

/// Longest reply line we accept (a name of `getlongdir` is at most a few KB): a server
/// that sends more is broken, and must not make us buffer without end.
const MAX_REPLY_LINE: u64 = 64 * 1024;

/// `chirp_server` drops a client idle for 60 s (its `-t` default). A connection idle for
/// nearly that long may be closed while our request travels: open a fresh one instead.
const IDLE_LIMIT: Duration = Duration::from_secs(50);

/// Why a request failed.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The server answered with this (negative) Chirp code; the connection is in sync.
    Code(i64),
    /// The connection failed, timed out or lost step with the server: it is dropped.
    Broken(io::Error),
    /// Our side refused or failed (a name Chirp cannot carry, a failed local write); the
    /// message says why, and the connection is in sync.
    Local(Error),
}

impl Failure {
    /// The driver error, as `context: cause` (`context` is `OP URL`).
    pub(crate) fn into_error(self, context: &str) -> Error {
        match self {
            Failure::Code(code) => {
                let (kind, text) = codes::describe(code);
                Error::new(kind, format!("{context}: {text}"))
            }
            // A socket timeout reads as EAGAIN ("temporarily unavailable"): say what it is.
            Failure::Broken(e) if is_timeout(&e) => Error::new(
                ErrorKind::TimedOut,
                format!("{context}: the server did not answer in time"),
            ),
            Failure::Broken(e) => Error::from_io(context, &e),
            Failure::Local(e) => Error::new(e.kind, format!("{context}: {}", e.message)),
        }
    }
}

/// Whether `e` is a socket timeout.
pub(crate) fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
    )
}

impl From<io::Error> for Failure {
    fn from(e: io::Error) -> Failure {
        Failure::Broken(e)
    }
}

pub(crate) type Reply<T> = std::result::Result<T, Failure>;

/// A broken-connection failure with our own explanation.
pub(crate) fn broken(kind: io::ErrorKind, why: String) -> Failure {
    Failure::Broken(io::Error::new(kind, why))
}

/// An authenticated connection.
#[derive(Debug)]
pub(crate) struct Conn {
    reader: BufReader<TcpStream>,
    /// Replies received so far: a failure before the first one of a request on a reused
    /// connection is the sign of a connection the server had closed.
    replies: u64,
    last_used: Instant,
}

impl Conn {
    /// Connects to `target` and authenticates with the configured methods, in order.
    pub(crate) fn open(target: &Target, cfg: &ChirpConfig) -> Reply<Conn> {
        let stream = connect(target, cfg.connect_timeout)?;
        // Strict request/reply: Nagle's algorithm would hold each short request back.
        stream.set_nodelay(true)?;
        let timeout = Some(cfg.read_timeout).filter(|t| !t.is_zero());
        stream.set_read_timeout(timeout)?;
        stream.set_write_timeout(timeout)?;
        let mut conn = Conn {
            reader: BufReader::with_capacity(64 * 1024, stream),
            replies: 0,
            last_used: Instant::now(),
        };
        let subject = auth::authenticate(&mut conn, &cfg.auth)?;
        tracing::debug!("chirp://{}: authenticated as {subject}", target.authority());
        Ok(conn)
    }

    /// A connection over `stream` that is taken as authenticated: the fuzz tests play a
    /// hostile server on its other end.
    #[cfg(test)]
    pub(crate) fn over(stream: TcpStream) -> Conn {
        Conn {
            reader: BufReader::with_capacity(64 * 1024, stream),
            replies: 0,
            last_used: Instant::now(),
        }
    }

    pub(crate) fn replies(&self) -> u64 {
        self.replies
    }

    /// Marks the connection idle from now (it goes back to the pool).
    pub(crate) fn touch(&mut self) {
        self.last_used = Instant::now();
    }

    /// Whether the connection can carry another request: not idle for too long, nothing
    /// unread, and not closed by the server (a non-blocking peek sees end-of-file or data).
    pub(crate) fn reusable(&self) -> bool {
        if self.last_used.elapsed() > IDLE_LIMIT || !self.reader.buffer().is_empty() {
            return false;
        }
        let stream = self.reader.get_ref();
        if stream.set_nonblocking(true).is_err() {
            return false;
        }
        let quiet =
            matches!(stream.peek(&mut [0u8]), Err(e) if e.kind() == io::ErrorKind::WouldBlock);
        stream.set_nonblocking(false).is_ok() && quiet
    }

    /// Whether the server is on this host, so that it can see our files (unix auth).
    pub(crate) fn is_local(&self) -> bool {
        let stream = self.reader.get_ref();
        match (stream.peer_addr(), stream.local_addr()) {
            (Ok(peer), Ok(local)) => peer.ip().is_loopback() || peer.ip() == local.ip(),
            _ => false,
        }
    }

    /// Sends one request line (which ends with `\n`).
    pub(crate) fn send(&mut self, line: &str) -> Reply<()> {
        if line.len() > LINE_MAX {
            return Err(Failure::Local(Error::new(
                ErrorKind::InvalidName,
                format!("name too long: a Chirp request line holds {LINE_MAX} bytes"),
            )));
        }
        self.write_all(line.as_bytes())
    }

    /// Sends raw bytes (a file body after `putfile`).
    pub(crate) fn write_all(&mut self, bytes: &[u8]) -> Reply<()> {
        Ok(self.reader.get_mut().write_all(bytes)?)
    }

    /// Reads one line, without its `\n`.
    pub(crate) fn read_line(&mut self) -> Reply<Vec<u8>> {
        let mut line = Vec::new();
        (&mut self.reader)
            .take(MAX_REPLY_LINE)
            .read_until(b'\n', &mut line)?;
        match line.pop() {
            Some(b'\n') => Ok(line),
            None => Err(broken(
                io::ErrorKind::UnexpectedEof,
                "the server closed the connection".into(),
            )),
            Some(_) => Err(broken(
                io::ErrorKind::InvalidData,
                "the server sent a truncated or over-long line".into(),
            )),
        }
    }

    /// Reads one line of text.
    pub(crate) fn read_text(&mut self) -> Reply<String> {
        String::from_utf8(self.read_line()?).map_err(|_| {
            broken(
                io::ErrorKind::InvalidData,
                "the server sent a line that is not UTF-8".into(),
            )
        })
    }

    /// Reads the integer reply every request gets: a count or zero, or a Chirp error code.
    pub(crate) fn result(&mut self) -> Reply<u64> {
        let line = self.read_text()?;
        let value: i64 = line.trim().parse().map_err(|_| {
            broken(
                io::ErrorKind::InvalidData,
                format!("unexpected reply {line:?}"),
            )
        })?;
        self.replies += 1;
        u64::try_from(value).map_err(|_| Failure::Code(value))
    }

    /// Sends a request and reads its integer reply (`simple_command` of cctools).
    pub(crate) fn call(&mut self, line: &str) -> Reply<u64> {
        self.send(line)?;
        self.result()
    }

    /// Reads the stat record that follows some replies.
    pub(crate) fn read_stat(&mut self) -> Reply<Stat> {
        let line = self.read_text()?;
        Stat::parse(&line).ok_or_else(|| {
            broken(
                io::ErrorKind::InvalidData,
                format!("bad stat record {line:?}"),
            )
        })
    }

    /// Reads a reply body of `len` bytes into `buf` (replacing its contents). `buf` grows as
    /// the bytes arrive, not to the announced length: a server that announces a whole chunk
    /// and then closes must not make us reserve it.
    pub(crate) fn read_body(&mut self, len: usize, buf: &mut Vec<u8>) -> Reply<()> {
        buf.clear();
        (&mut self.reader).take(len as u64).read_to_end(buf)?;
        match buf.len() == len {
            true => Ok(()),
            false => Err(broken(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "the server sent {} of the {len} bytes it announced",
                    buf.len()
                ),
            )),
        }
    }

    /// Passes the next `len` bytes of a reply body to `dest` as they arrive, so that a sink
    /// watching the pace sees a slow server. A refusal of `dest` mid-body leaves the
    /// connection out of step: it counts as broken and is dropped.
    pub(crate) fn copy_body(&mut self, mut len: usize, dest: &mut dyn Write) -> Reply<()> {
        while len > 0 {
            let piece = self.reader.fill_buf()?;
            if piece.is_empty() {
                return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into());
            }
            let n = piece.len().min(len);
            dest.write_all(&piece[..n]).map_err(|e| {
                Failure::Broken(io::Error::new(e.kind(), format!("writing the copy: {e}")))
            })?;
            self.reader.consume(n);
            len -= n;
        }
        Ok(())
    }
}

/// A TCP connection to the first address of `target` that accepts one.
fn connect(target: &Target, timeout: Duration) -> Reply<TcpStream> {
    let failed = |e: &io::Error| {
        Failure::Local(Error::from_io(
            format_args!("connecting to {}", target.authority()),
            e,
        ))
    };
    let addrs: Vec<SocketAddr> = (target.host.as_str(), target.port)
        .to_socket_addrs()
        .map_err(|e| {
            // A failed lookup has no io kind of its own; it means the host is unreachable.
            Failure::Local(Error::new(
                ErrorKind::Unreachable,
                format!("cannot resolve {}: {e}", target.host),
            ))
        })?
        .collect();
    let mut last = io::Error::new(io::ErrorKind::AddrNotAvailable, "the host has no address");
    for addr in addrs {
        let attempt = match timeout.is_zero() {
            true => TcpStream::connect(addr),
            false => TcpStream::connect_timeout(&addr, timeout),
        };
        match attempt {
            Ok(stream) => return Ok(stream),
            Err(e) => last = e,
        }
    }
    Err(failed(&last))
}
