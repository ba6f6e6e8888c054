//! One FTP control connection (RFC 959): connect, log in, learn the server's features
//! (RFC 2389 FEAT), send commands and read their replies, and move data over passive-mode
//! data connections (EPSV, falling back to PASV); for `ftps://`, in TLS (`tls.rs`). Every
//! socket has a read timeout, so no exchange waits forever.
//!
//! Failures come back as [`Fault`]s: a reply the caller may interview about, or a broken
//! transport after which the connection is marked unusable and never pooled again.

use std::fmt;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

use super::tls::{Ftps, Pending, Session, Stream};
use super::url::Site;

/// Longest reply line we accept; an MLST line carries a whole path and its facts.
const MAX_LINE: u64 = 64 * 1024;
/// Most lines in one multi-line reply (FEAT lists a few dozen).
const MAX_REPLY_LINES: usize = 1000;
const COPY_BUFFER: usize = 64 * 1024;

/// One reply: its code and its lines (the first starts with the code).
#[derive(Debug)]
pub(super) struct Reply {
    pub code: u16,
    pub lines: Vec<String>,
}

impl Reply {
    /// Whether the code is in class `class` (1: preliminary, 2: done, 3: more needed,
    /// 4: transient failure, 5: permanent failure).
    pub fn is(&self, class: u16) -> bool {
        self.code / 100 == class
    }
}

/// The first line, which says what happened (`550 Failed to open file.`).
impl fmt::Display for Reply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let first = self.lines.first().map_or("", |l| l.trim());
        f.write_str(first)
    }
}

/// Why an exchange failed.
#[derive(Debug)]
pub(super) enum Fault {
    /// The server answered, but not with success: the reply, to be interviewed about.
    Refused(Reply),
    /// The connection failed or the server broke the protocol; the connection is dead.
    Transport(io::Error),
    /// `ftps://` to a server that refused `AUTH TLS`: its reply.
    NoTls(Reply),
    /// Our side failed: writing what arrived, or reading what we were to send.
    Local(io::Error),
    /// The name is not in its parent's listing (stat without MLST).
    Absent,
}

impl From<Reply> for Fault {
    fn from(reply: Reply) -> Fault {
        Fault::Refused(reply)
    }
}

/// Who logs in.
pub(super) struct Login {
    pub user: String,
    pub password: String,
}

/// Whether `user` is an anonymous login, which servers give the least (vsftpd never lets
/// it use SITE CHMOD).
pub(super) fn is_anonymous(user: &str) -> bool {
    user == "anonymous" || user == "ftp"
}

/// What FEAT advertised, of what we use. SIZE and MDTM are simply tried: servers older
/// than FEAT often have them.
#[derive(Default)]
pub(super) struct Features {
    /// MLST and MLSD (RFC 3659 advertises both as `MLST facts`).
    pub mlst: bool,
    /// MFMT, to set a file's modification time.
    pub mfmt: bool,
}

/// Timeouts of a connection and of the data connections it opens.
#[derive(Clone, Copy)]
pub(super) struct Timeouts {
    pub connect: Duration,
    pub read: Duration,
}

/// A logged-in control connection in binary mode.
pub(super) struct Conn {
    reader: BufReader<Stream>,
    /// The TLS of `ftps://`, which data connections resume.
    tls: Option<Session>,
    /// `ftp://[user@]host[:port]`, for messages.
    origin: String,
    /// Data connections go to the address the control connection reached, whatever PASV
    /// names: a NATed server names a private address, and a hostile one another host.
    peer: IpAddr,
    timeouts: Timeouts,
    pub features: Features,
    /// EPSV still worth trying; cleared when the server refuses it.
    epsv: bool,
    broken: bool,
    /// Data reached a sink in this operation: retrying it could write the same bytes
    /// twice into the caller's destination.
    delivered: bool,
}

impl Conn {
    /// Connects to the site's server, in TLS with `ftps`, and logs in. Errors are transport
    /// faults (no server, a refused certificate) or the refusal of the greeting, of TLS or
    /// of the login.
    pub fn open(
        site: &Site,
        login: &Login,
        timeouts: Timeouts,
        ftps: Option<&Ftps>,
    ) -> Result<Conn, Fault> {
        let stream = connect(&site.host, site.port, timeouts.connect).map_err(Fault::Transport)?;
        let peer = stream.peer_addr().map_err(Fault::Transport)?.ip();
        tune(&stream, timeouts.read).map_err(Fault::Transport)?;
        let mut conn = Conn {
            reader: BufReader::new(Stream::Plain(stream)),
            tls: ftps.map(Ftps::session),
            origin: site.origin(),
            peer,
            timeouts,
            features: Features::default(),
            epsv: true,
            broken: false,
            delivered: false,
        };
        conn.handshake(login)?;
        Ok(conn)
    }

    /// The URL of a server path, for messages.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.origin)
    }

    pub fn is_broken(&self) -> bool {
        self.broken
    }

    pub fn delivered(&self) -> bool {
        self.delivered
    }

    /// Readies a pooled connection for a new operation.
    pub fn begin(&mut self) {
        self.delivered = false;
    }

    /// Whether an idle connection is still open: the server has neither closed it nor said
    /// anything (a `421` timeout notice). Costs no round trip.
    pub fn is_alive(&self) -> bool {
        if !self.reader.buffer().is_empty() {
            return false;
        }
        let stream = self.reader.get_ref().tcp();
        if stream.set_nonblocking(true).is_err() {
            return false;
        }
        let peeked = stream.peek(&mut [0u8; 1]);
        let restored = stream.set_nonblocking(false).is_ok();
        restored && matches!(peeked, Err(e) if e.kind() == io::ErrorKind::WouldBlock)
    }

    /// Says goodbye without waiting for the answer, so the server ends the session at once
    /// instead of at its idle timeout.
    pub fn quit(mut self) {
        let _ = self.reader.get_mut().write_all(b"QUIT\r\n");
    }

    /// Sends one command and reads its reply, whatever its code.
    pub fn command(&mut self, line: &str) -> Result<Reply, Fault> {
        // The verb only: a PASS line carries the password. `RUST_LOG=roam_requests=debug`
        // counts the round trips an operation costs.
        let verb = line.split(' ').next().unwrap_or_default();
        tracing::debug!(target: "roam_requests", "ftp {verb}");
        let stream = self.reader.get_mut();
        let sent = stream
            .write_all(format!("{line}\r\n").as_bytes())
            .and_then(|()| stream.flush());
        self.io(sent)?;
        let reply = self.read_reply();
        self.io(reply)
    }

    /// Sends one command; a reply outside `class` is a refusal.
    pub fn expect(&mut self, line: &str, class: u16) -> Result<Reply, Fault> {
        let reply = self.command(line)?;
        match reply.is(class) {
            true => Ok(reply),
            false => Err(Fault::Refused(reply)),
        }
    }

    /// Runs a command whose answer comes over a data connection (RETR, LIST, MLSD) and
    /// copies at most `limit` bytes of it into `sink`; returns how many. A transfer cut
    /// short at `limit` is abandoned and the control connection brought back in step.
    pub fn retrieve(
        &mut self,
        command: &str,
        sink: &mut dyn Write,
        limit: u64,
    ) -> Result<u64, Fault> {
        let data = self.open_data()?;
        let mut data = self.start_data(command, data)?;
        let mut moved = 0;
        let copied = copy(&mut data, sink, limit, &mut moved);
        self.delivered |= moved > 0;
        match copied {
            Ok(()) => {}
            Err(CopyError::Read(e)) => return Err(self.broke(e)),
            // The transfer is still running; we cannot know what the server says next.
            Err(CopyError::Write(e)) => {
                self.broken = true;
                return Err(Fault::Local(e));
            }
        }
        let cut_short = moved == limit;
        // A TLS server waits for our close_notify before it answers (vsftpd).
        data.close();
        if cut_short {
            self.abandon_transfer()?;
        } else {
            self.expect_final()?;
        }
        Ok(moved)
    }

    /// Runs a command that receives data (STOR) and sends it the `len` bytes of `src`;
    /// returns how many `src` had (fewer than `len` if it ended early).
    pub fn store(&mut self, command: &str, src: &mut dyn Read, len: u64) -> Result<u64, Fault> {
        let data = self.open_data()?;
        let mut data = self.start_data(command, data)?;
        let mut moved = 0;
        let copied = copy(src, &mut data, len, &mut moved);
        if let Err(CopyError::Write(e)) = copied {
            return Err(self.broke(e));
        }
        // End of data is how the server learns the file is complete (or, after a failed
        // read of `src`, how it stops waiting); it answers on the control connection.
        let closed = data.finish();
        drop(data);
        self.io(closed)?;
        self.expect_final()?;
        match copied {
            Err(CopyError::Read(e)) => Err(Fault::Local(e)),
            _ => Ok(moved),
        }
    }

    /// Sends a command that transfers over `data` and, once the server accepted it, starts
    /// the data connection's TLS. A server that refuses the TLS of a data connection (no
    /// resumed session) says why on the control connection.
    fn start_data(&mut self, command: &str, data: Pending) -> Result<Stream, Fault> {
        self.expect(command, 1)?;
        let e = match data.start() {
            Ok(stream) => return Ok(stream),
            Err(e) => e,
        };
        self.broken = true;
        match self.read_reply() {
            Ok(reply) if !reply.is(2) => Err(Fault::Refused(reply)),
            _ => Err(Fault::Transport(e)),
        }
    }

    /// Greeting, TLS, login, features, binary mode.
    fn handshake(&mut self, login: &Login) -> Result<(), Fault> {
        let mut greeting = self.read_reply();
        // 120: "ready in a few minutes"; the real greeting follows (within the timeout).
        while let Ok(Reply { code: 120, .. }) = greeting {
            greeting = self.read_reply();
        }
        let greeting = self.io(greeting)?;
        if !greeting.is(2) {
            return Err(greeting.into());
        }
        if let Some(session) = self.tls.take() {
            let secured = self.secure(&session);
            self.tls = Some(session);
            secured?;
        }
        let user = self.command(&format!("USER {}", login.user))?;
        let done = match user.code {
            230 | 202 => user,
            331 => self.command(&format!("PASS {}", login.password))?,
            _ => return Err(user.into()),
        };
        if !done.is(2) {
            return Err(done.into());
        }
        self.learn_features()?;
        self.expect("TYPE I", 2)?;
        Ok(())
    }

    /// `AUTH TLS`, the TLS handshake on the control connection, then `PBSZ 0` and `PROT P`
    /// (RFC 4217): data connections in TLS too. Never falls back to the clear.
    fn secure(&mut self, session: &Session) -> Result<(), Fault> {
        let auth = self.command("AUTH TLS")?;
        if auth.code != 234 {
            return Err(Fault::NoTls(auth));
        }
        if !self.reader.buffer().is_empty() {
            return Err(self.broke(io::Error::new(
                io::ErrorKind::InvalidData,
                "the server sent more after accepting AUTH TLS",
            )));
        }
        // The socket moves into TLS: a second handle to it, the first one closed with
        // its (empty) buffer.
        let tcp = self.reader.get_ref().tcp().try_clone();
        let tcp = self.io(tcp)?;
        let tls = session.connect(tcp);
        self.reader = BufReader::new(self.io(tls)?);
        self.expect("PBSZ 0", 2)?;
        self.expect("PROT P", 2)?;
        Ok(())
    }

    /// Reads FEAT and switches on what we want of it: UTF-8 names, and the MLST facts we
    /// use (servers may leave `unix.mode` off by default).
    fn learn_features(&mut self) -> Result<(), Fault> {
        let feat = self.command("FEAT")?;
        if !feat.is(2) {
            return Ok(());
        }
        let mut utf8 = false;
        let mut facts = Vec::new();
        for line in feat.lines.iter().skip(1) {
            let (name, params) = line.trim().split_once(' ').unwrap_or((line.trim(), ""));
            match name.to_ascii_uppercase().as_str() {
                "MLST" => {
                    self.features.mlst = true;
                    facts = params
                        .split(';')
                        .map(|f| f.trim_end_matches('*').to_ascii_lowercase())
                        .collect();
                }
                "MFMT" => self.features.mfmt = true,
                "UTF8" => utf8 = true,
                _ => {}
            }
        }
        if utf8 {
            self.command("OPTS UTF8 ON")?;
        }
        if self.features.mlst {
            let wanted: String = ["type", "size", "modify", "unix.mode"]
                .into_iter()
                .filter(|f| facts.iter().any(|have| have == f))
                .map(|f| format!("{f};"))
                .collect();
            self.command(&format!("OPTS MLST {wanted}"))?;
        }
        Ok(())
    }

    /// A passive data connection: EPSV (RFC 2428), or PASV when the server lacks it; in
    /// TLS for `ftps://`, its handshake still to come.
    fn open_data(&mut self) -> Result<Pending, Fault> {
        let port = match self.epsv()? {
            Some(port) => port,
            None => self.pasv()?,
        };
        let addr = SocketAddr::new(self.peer, port);
        let stream = TcpStream::connect_timeout(&addr, self.timeouts.connect);
        let stream = self.io(stream)?;
        let tuned = tune(&stream, self.timeouts.read);
        self.io(tuned)?;
        Ok(match &self.tls {
            Some(session) => session.data(stream),
            None => Pending::Plain(stream),
        })
    }

    /// The port EPSV offers; `None` when the server does not know EPSV, which is then
    /// not asked again on this connection.
    fn epsv(&mut self) -> Result<Option<u16>, Fault> {
        if !self.epsv {
            return Ok(None);
        }
        let reply = self.command("EPSV")?;
        match reply.code {
            229 => self.port_of(&reply, epsv_port).map(Some),
            _ if reply.is(5) => {
                self.epsv = false;
                Ok(None)
            }
            _ => Err(reply.into()),
        }
    }

    fn pasv(&mut self) -> Result<u16, Fault> {
        let reply = self.expect("PASV", 2)?;
        self.port_of(&reply, pasv_port)
    }

    /// The port in a passive-mode reply; a reply without one breaks the protocol.
    fn port_of(&mut self, reply: &Reply, parse: fn(&str) -> Option<u16>) -> Result<u16, Fault> {
        let text = reply.to_string();
        parse(&text).ok_or_else(|| {
            self.broke(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("no port in the reply {text:?}"),
            ))
        })
    }

    /// Reads the final reply of a completed transfer.
    fn expect_final(&mut self) -> Result<Reply, Fault> {
        let reply = self.read_reply();
        let reply = self.io(reply)?;
        match reply.is(2) {
            true => Ok(reply),
            false => Err(reply.into()),
        }
    }

    /// After closing a data connection mid-transfer: the server answers that transfer
    /// (426, or 226 if it had sent everything already), and some servers add a second
    /// reply. A NOOP, whose 200 comes after all of them, tells where the stream stands.
    fn abandon_transfer(&mut self) -> Result<(), Fault> {
        let reply = self.read_reply();
        self.io(reply)?;
        let mut reply = self.command("NOOP")?;
        for _ in 0..3 {
            if reply.code == 200 {
                return Ok(());
            }
            let next = self.read_reply();
            reply = self.io(next)?;
        }
        Err(self.broke(io::Error::new(
            io::ErrorKind::InvalidData,
            "lost track of the replies after an aborted transfer",
        )))
    }

    /// Reads one (possibly multi-line) reply.
    fn read_reply(&mut self) -> io::Result<Reply> {
        let first = self.read_line()?;
        let bad = || {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("not an FTP reply: {first:.80}"),
            )
        };
        let code: u16 = first
            .get(..3)
            .and_then(|c| c.parse().ok())
            .ok_or_else(bad)?;
        let mut lines = vec![first.clone()];
        match first.as_bytes().get(3) {
            None | Some(b' ') => {}
            Some(b'-') => self.read_continuation(&first[..3], &mut lines)?,
            Some(_) => return Err(bad()),
        }
        if code == 421 {
            // "Service not available, closing control connection."
            self.broken = true;
        }
        Ok(Reply { code, lines })
    }

    /// The rest of a multi-line reply: up to the line that starts with `code` and a space.
    fn read_continuation(&mut self, code: &str, lines: &mut Vec<String>) -> io::Result<()> {
        while lines.len() <= MAX_REPLY_LINES {
            let line = self.read_line()?;
            let last =
                line.starts_with(code) && matches!(line.as_bytes().get(3), None | Some(b' '));
            lines.push(line);
            if last {
                return Ok(());
            }
        }
        Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "endless multi-line reply",
        ))
    }

    fn read_line(&mut self) -> io::Result<String> {
        let mut buf = Vec::new();
        (&mut self.reader)
            .take(MAX_LINE)
            .read_until(b'\n', &mut buf)?;
        match buf.strip_suffix(b"\n") {
            Some(line) => {
                Ok(String::from_utf8_lossy(line.strip_suffix(b"\r").unwrap_or(line)).into_owned())
            }
            None if buf.len() as u64 == MAX_LINE => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "reply line too long",
            )),
            None => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the server closed the connection",
            )),
        }
    }

    /// Passes a result on, marking the connection broken if it failed.
    fn io<T>(&mut self, result: io::Result<T>) -> Result<T, Fault> {
        result.map_err(|e| self.broke(e))
    }

    fn broke(&mut self, e: io::Error) -> Fault {
        self.broken = true;
        Fault::Transport(e)
    }
}

/// Connects to the first address of `host` that answers.
fn connect(host: &str, port: u16, timeout: Duration) -> io::Result<TcpStream> {
    let mut last = None;
    for addr in (host, port).to_socket_addrs().map_err(lookup_failed)? {
        match TcpStream::connect_timeout(&addr, timeout) {
            Ok(stream) => return Ok(stream),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| lookup_failed(io::Error::other("no address"))))
}

/// Readies a control or data socket: no exchange waits longer than `timeout`, and no
/// write waits for the ACK of the one before (Nagle): a command, or the last piece of a
/// file, goes out at once instead of after the server's delayed ACK.
fn tune(stream: &TcpStream, timeout: Duration) -> io::Result<()> {
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    stream.set_nodelay(true)
}

/// A failed name lookup, as a kind that says "unreachable" (std gives it none).
fn lookup_failed(e: io::Error) -> io::Error {
    io::Error::new(
        io::ErrorKind::HostUnreachable,
        format!("cannot resolve the host: {e}"),
    )
}

/// The port of `229 Entering Extended Passive Mode (|||6446|)`.
fn epsv_port(text: &str) -> Option<u16> {
    let inner = &text[text.find('(')? + 1..text.rfind(')')?];
    let delimiter = inner.chars().next()?;
    inner.split(delimiter).nth(3)?.parse().ok()
}

/// The port of `227 Entering Passive Mode (h1,h2,h3,h4,p1,p2)` (parentheses optional).
fn pasv_port(text: &str) -> Option<u16> {
    let numbers = text
        .get(4..)?
        .split(|c: char| !c.is_ascii_digit() && c != ',')
        .find(|chunk| chunk.matches(',').count() == 5)?;
    let fields: Vec<u8> = numbers
        .split(',')
        .map(|n| n.parse().ok())
        .collect::<Option<_>>()?;
    Some(u16::from(fields[4]) << 8 | u16::from(fields[5]))
}

enum CopyError {
    Read(io::Error),
    Write(io::Error),
}

/// Copies up to `limit` bytes; `moved` counts what reached `to`, even when it then fails.
fn copy(
    from: &mut dyn Read,
    to: &mut dyn Write,
    limit: u64,
    moved: &mut u64,
) -> Result<(), CopyError> {
    let mut buf = vec![0u8; COPY_BUFFER];
    while *moved < limit {
        let want = (limit - *moved).min(buf.len() as u64) as usize;
        let n = match from.read(&mut buf[..want]) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(CopyError::Read(e)),
        };
        to.write_all(&buf[..n]).map_err(CopyError::Write)?;
        *moved += n as u64;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passive_replies() {
        assert_eq!(
            epsv_port("229 Entering Extended Passive Mode (|||33646|)"),
            Some(33646)
        );
        assert_eq!(epsv_port("229 EPSV ok (!!!1025!)"), Some(1025));
        assert_eq!(epsv_port("229 Entering Extended Passive Mode"), None);
        assert_eq!(
            pasv_port("227 Entering Passive Mode (127,0,0,1,131,110)."),
            Some(33646)
        );
        assert_eq!(pasv_port("227 =127,0,0,1,4,1"), Some(1025));
        assert_eq!(
            pasv_port("227 Entering Passive Mode (127,0,0,1,300,1)"),
            None
        );
        assert_eq!(pasv_port("227 no numbers"), None);
    }

    #[test]
    fn replies_show_their_first_line() {
        let reply = Reply {
            code: 550,
            lines: vec!["550-Failed:".into(), " detail".into(), "550 End".into()],
        };
        assert_eq!(reply.to_string(), "550-Failed:");
        assert!(reply.is(5) && !reply.is(2));
    }
}
