//! A fault injector: a TCP proxy on 127.0.0.1 in front of a real server, for the faults a
//! real server cannot be asked for at a chosen moment. Clients connect to [`Proxy::port`];
//! the proxy passes bytes both ways until told to inject a [`Fault`] (now, or once the
//! server has sent a given number of bytes) or armed with a [`Cut`].
//!
//! An FTP proxy ([`Proxy::ftp`]) also carries the passive data connections: it rewrites the
//! port of each `227`/`229` reply to a proxy of its own in front of the server's data port,
//! so faults reach the data as well as the control connection.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread;
use std::time::Duration;

/// What the proxy does to connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Nothing: bytes pass both ways.
    None,
    /// The server dies: every connection is closed, and new ones are refused (the proxy
    /// stops listening).
    Kill,
    /// The server stops (as with SIGSTOP): nothing more passes either way, and connections
    /// stay open; new ones are accepted (the kernel does that for a stopped server) and
    /// never answered.
    Freeze,
    /// The server's bytes reach the client `bytes` at a time, one batch every `every`
    /// (a slow-drip server, or a throttled link); the client's pass as they come.
    Drip { bytes: usize, every: Duration },
    /// The server takes the client's bytes `bytes` at a time, one batch every `every` (a
    /// server slow to read an upload); its own pass as they come.
    DripUp { bytes: usize, every: Duration },
    /// A slow link: bytes pass both ways `bytes` at a time, one batch every `every` (a
    /// transfer the test can catch in the middle).
    Slow { bytes: usize, every: Duration },
    /// New connections are accepted and what they send is swallowed; nothing reaches the
    /// server, nothing is answered (a black hole behind the connect). Open connections go on.
    BlackHole,
}

/// Where the proxy cuts (resets both ends of) one connection, once.
#[derive(Clone, Copy, Debug)]
pub enum Cut {
    /// After the client has sent this many bytes on it.
    AfterSending(u64),
    /// When the server's reply starts with one of these (an FTP transfer starting).
    OnReply(&'static [&'static str]),
}

/// A TCP proxy on 127.0.0.1 to a server on 127.0.0.1; it serves until dropped, and a drop
/// kills it (closes every connection).
pub struct Proxy {
    pub port: u16,
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    /// Woken when the fault changes (frozen pumps wait on it).
    changed: Condvar,
    /// Whether to rewrite FTP passive replies (see the module doc).
    ftp: bool,
}

struct State {
    fault: Fault,
    /// A fault that begins once this many bytes went this way in all.
    after: Option<(Direction, u64, Fault)>,
    /// A fault that begins when a client sends bytes containing this (before they pass).
    on_request: Option<(&'static str, Fault)>,
    cut: Option<Cut>,
    fired: bool,
    /// Bytes the server sent and the clients sent through the proxy so far (every
    /// connection).
    served: u64,
    sent: u64,
    /// Both ends of every open connection (by a number of its own), to close them at a
    /// kill. A connection that ends leaves, so that its sockets really close.
    sockets: HashMap<u64, TcpStream>,
    next_socket: u64,
    /// Every listening socket (the proxy's, FTP data proxies'), to close them at a kill.
    listeners: Vec<TcpListener>,
}

impl Proxy {
    /// A proxy to the server on port `upstream`.
    pub fn start(upstream: u16) -> Proxy {
        Proxy::with(upstream, false)
    }

    /// A proxy to the FTP server on port `upstream`, carrying its passive data
    /// connections too.
    pub fn ftp(upstream: u16) -> Proxy {
        Proxy::with(upstream, true)
    }

    fn with(upstream: u16, ftp: bool) -> Proxy {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                fault: Fault::None,
                after: None,
                on_request: None,
                cut: None,
                fired: false,
                served: 0,
                sent: 0,
                sockets: HashMap::new(),
                next_socket: 0,
                listeners: Vec::new(),
            }),
            changed: Condvar::new(),
            ftp,
        });
        let port = listen(&shared, upstream);
        Proxy { port, shared }
    }

    /// Injects `fault` now.
    pub fn set(&self, fault: Fault) {
        let mut st = self.shared.state.lock().unwrap();
        self.shared.begin(&mut st, fault);
    }

    /// Injects `fault` once the server has sent `bytes` through the proxy (counting from
    /// its start, every connection): "mid-transfer" at a byte the test chooses.
    pub fn after_served(&self, bytes: u64, fault: Fault) {
        self.shared.state.lock().unwrap().after = Some((Direction::Down, bytes, fault));
    }

    /// Injects `fault` once the clients have sent `bytes` through the proxy (an upload
    /// under way).
    pub fn after_sent(&self, bytes: u64, fault: Fault) {
        self.shared.state.lock().unwrap().after = Some((Direction::Up, bytes, fault));
    }

    /// Injects `fault` when a client sends bytes containing `needle` (a request naming
    /// it: `partNumber=2`), before they reach the server: the server dies at that
    /// request, having answered every one before it.
    pub fn on_request(&self, needle: &'static str, fault: Fault) {
        self.shared.state.lock().unwrap().on_request = Some((needle, fault));
    }

    /// Arms a [`Cut`] of the first connection that meets it.
    pub fn arm(&self, cut: Cut) {
        self.shared.state.lock().unwrap().cut = Some(cut);
    }

    /// Whether the armed cut happened, or the fault armed with [`Proxy::after_served`],
    /// [`Proxy::after_sent`] or [`Proxy::on_request`] began.
    pub fn fired(&self) -> bool {
        self.shared.state.lock().unwrap().fired
    }

    /// Bytes the server sent through the proxy so far.
    pub fn served(&self) -> u64 {
        self.shared.state.lock().unwrap().served
    }

    /// Bytes the clients sent through the proxy so far.
    pub fn sent(&self) -> u64 {
        self.shared.state.lock().unwrap().sent
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.set(Fault::Kill);
    }
}

impl Shared {
    fn begin(&self, st: &mut State, fault: Fault) {
        st.fault = fault;
        if fault == Fault::Kill {
            for (_, s) in st.sockets.drain() {
                let _ = s.shutdown(Shutdown::Both);
            }
            // Linux stops listening on a listening socket that is shut down: from now on
            // connections are refused, as by a dead server, not accepted and then closed.
            for l in st.listeners.drain(..) {
                // SAFETY: shutdown(2) of a socket this proxy owns; touches no memory.
                unsafe { libc::shutdown(l.as_raw_fd(), libc::SHUT_RDWR) };
            }
        }
        self.changed.notify_all();
    }

    fn killed(&self) -> bool {
        self.state.lock().unwrap().fault == Fault::Kill
    }

    /// Keeps a socket to close at a kill, under the number returned; `None` (and closes
    /// it) if the kill came first.
    fn keep(&self, s: &TcpStream) -> Option<u64> {
        let mut st = self.state.lock().unwrap();
        if st.fault == Fault::Kill {
            let _ = s.shutdown(Shutdown::Both);
            return None;
        }
        st.next_socket += 1;
        let id = st.next_socket;
        st.sockets.insert(id, s.try_clone().unwrap());
        Some(id)
    }

    /// Drops the kept copy of a socket whose connection ended.
    fn forget(&self, id: u64) {
        self.state.lock().unwrap().sockets.remove(&id);
    }
}

/// Listens on a fresh port for connections to `upstream`; returns the port. A kill shuts
/// the listening socket down, which ends the accepting thread.
fn listen(shared: &Arc<Shared>, upstream: u16) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let mut st = shared.state.lock().unwrap();
    if st.fault == Fault::Kill {
        return port; // closed at once: nothing listens there
    }
    st.listeners.push(listener.try_clone().unwrap());
    drop(st);
    let shared = shared.clone();
    thread::spawn(move || {
        while let Ok((client, _)) = listener.accept() {
            if shared.killed() {
                break;
            }
            let shared = shared.clone();
            thread::spawn(move || serve(&shared, client, upstream));
        }
    });
    port
}

/// One client connection: held (frozen, black-holed) or relayed to the server.
fn serve(shared: &Arc<Shared>, client: TcpStream, upstream: u16) {
    let Some(kept) = shared.keep(&client) else {
        return;
    };
    let fault = shared.state.lock().unwrap().fault;
    if matches!(fault, Fault::BlackHole | Fault::Freeze) {
        swallow(shared, client, fault);
    } else if let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) {
        if let Some(also) = shared.keep(&server) {
            relay(shared, client, server);
            shared.forget(also);
        }
    }
    shared.forget(kept);
}

/// A black hole reads and drops what the client sends; a frozen server reads nothing.
/// Either way nothing is answered, until a kill closes the connection.
fn swallow(shared: &Shared, mut client: TcpStream, fault: Fault) {
    if fault == Fault::BlackHole {
        let mut buf = [0; 4096];
        while matches!(client.read(&mut buf), Ok(n) if n > 0) {}
        return;
    }
    let mut st = shared.state.lock().unwrap();
    while st.fault != Fault::Kill {
        st = shared.changed.wait(st).unwrap();
    }
}

/// Pumps both ways until either side closes, the connection is cut, or a kill.
fn relay(shared: &Arc<Shared>, client: TcpStream, server: TcpStream) {
    let ends = [client.try_clone().unwrap(), server.try_clone().unwrap()];
    let close = || {
        for end in &ends {
            let _ = end.shutdown(Shutdown::Both);
        }
    };
    thread::scope(|s| {
        s.spawn(|| {
            pump(shared, &server, &client, Direction::Down);
            close();
        });
        pump(shared, &client, &server, Direction::Up);
        close();
    });
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    /// Client to server.
    Up,
    /// Server to client.
    Down,
}

/// Copies `from` to `to` under the faults, until either ends or the connection is cut.
fn pump(shared: &Arc<Shared>, mut from: &TcpStream, to: &TcpStream, dir: Direction) {
    let mut buf = vec![0; 64 << 10];
    let mut sent = 0u64;
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        sent += n as u64;
        // Before the lock: a passive reply's new data proxy takes it.
        let chunk = match (shared.ftp, dir) {
            (true, Direction::Down) => passive_through_proxy(shared, &buf[..n]),
            _ => buf[..n].to_vec(),
        };
        let mut st = shared.state.lock().unwrap();
        let total = match dir {
            Direction::Down => &mut st.served,
            Direction::Up => &mut st.sent,
        };
        *total += n as u64;
        let total = *total;
        if let Some((way, at, fault)) = st.after {
            if way == dir && total >= at {
                st.after = None;
                st.fired = true;
                shared.begin(&mut st, fault);
            }
        }
        if let Some((needle, fault)) = st.on_request {
            if dir == Direction::Up && contains(&buf[..n], needle.as_bytes()) {
                st.on_request = None;
                st.fired = true;
                shared.begin(&mut st, fault);
            }
        }
        if cuts(&mut st, &buf[..n], sent, dir) {
            return;
        }
        if deliver(shared, st, &chunk, to, dir).is_err() {
            return;
        }
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Whether the armed cut is met by this chunk (`sent`: bytes so far on this connection,
/// this direction); it then fires, once.
fn cuts(st: &mut State, chunk: &[u8], sent: u64, dir: Direction) -> bool {
    let met = match (st.cut, dir) {
        (Some(Cut::AfterSending(n)), Direction::Up) => sent >= n,
        (Some(Cut::OnReply(starts)), Direction::Down) => {
            starts.iter().any(|p| chunk.starts_with(p.as_bytes()))
        }
        _ => false,
    };
    if met {
        st.cut = None;
        st.fired = true;
    }
    met
}

/// Writes `chunk` to `to` as the fault allows: at once, in drips, after a freeze, or not
/// at all (a kill). Errors end the pump.
fn deliver<'a>(
    shared: &'a Shared,
    mut st: MutexGuard<'a, State>,
    mut chunk: &[u8],
    mut to: &TcpStream,
    dir: Direction,
) -> std::io::Result<()> {
    while !chunk.is_empty() {
        match st.fault {
            Fault::Kill => return Err(std::io::ErrorKind::ConnectionAborted.into()),
            Fault::Freeze => st = shared.changed.wait(st).unwrap(),
            Fault::Drip { bytes, every }
            | Fault::DripUp { bytes, every }
            | Fault::Slow { bytes, every }
                if drips(st.fault, dir) =>
            {
                let n = bytes.min(chunk.len());
                drop(st);
                to.write_all(&chunk[..n])?;
                chunk = &chunk[n..];
                thread::sleep(every);
                st = shared.state.lock().unwrap();
            }
            _ => {
                drop(st);
                return to.write_all(chunk);
            }
        }
    }
    Ok(())
}

/// Whether `fault` slows the bytes going `dir`.
fn drips(fault: Fault, dir: Direction) -> bool {
    match fault {
        Fault::Drip { .. } => dir == Direction::Down,
        Fault::DripUp { .. } => dir == Direction::Up,
        _ => matches!(fault, Fault::Slow { .. }),
    }
}

/// A server reply with its passive data port replaced by a new proxy's (of the same
/// faults) in front of it: `229 ... (|||PORT|)` (EPSV) or `227 ... (h1,h2,h3,h4,p1,p2)`.
fn passive_through_proxy(shared: &Arc<Shared>, chunk: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(chunk);
    let rewritten = if text.starts_with("229 ") {
        rewrite_epsv(&text, |port| listen(shared, port))
    } else if text.starts_with("227 ") {
        rewrite_pasv(&text, |port| listen(shared, port))
    } else {
        None
    };
    rewritten.map_or_else(|| chunk.to_vec(), String::into_bytes)
}

/// The port of `229 Entering Extended Passive Mode (|||PORT|)` replaced by `proxy(PORT)`.
fn rewrite_epsv(reply: &str, proxy: impl FnOnce(u16) -> u16) -> Option<String> {
    let open = reply.find("(|||")? + 4;
    let close = open + reply[open..].find('|')?;
    let port = reply[open..close].parse().ok()?;
    Some(format!(
        "{}{}{}",
        &reply[..open],
        proxy(port),
        &reply[close..]
    ))
}

/// The port of `227 Entering Passive Mode (h1,h2,h3,h4,p1,p2)` replaced by `proxy(PORT)`.
fn rewrite_pasv(reply: &str, proxy: impl FnOnce(u16) -> u16) -> Option<String> {
    let open = reply.find('(')? + 1;
    let close = open + reply[open..].find(')')?;
    let fields: Vec<u16> = reply[open..close]
        .split(',')
        .map(|f| f.trim().parse().ok())
        .collect::<Option<_>>()?;
    let [h1, h2, h3, h4, p1, p2] = fields[..] else {
        return None;
    };
    let port = proxy(p1 * 256 + p2);
    Some(format!(
        "{}{h1},{h2},{h3},{h4},{},{}{}",
        &reply[..open],
        port / 256,
        port % 256,
        &reply[close..]
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passive_replies_get_the_proxy_s_port() {
        let epsv = rewrite_epsv("229 Entering Extended Passive Mode (|||40123|)\r\n", |p| {
            assert_eq!(p, 40123);
            7
        });
        assert_eq!(
            epsv.as_deref(),
            Some("229 Entering Extended Passive Mode (|||7|)\r\n")
        );
        let pasv = rewrite_pasv("227 Entering Passive Mode (127,0,0,1,156,203).\r\n", |p| {
            assert_eq!(p, 156 * 256 + 203);
            1025
        });
        assert_eq!(
            pasv.as_deref(),
            Some("227 Entering Passive Mode (127,0,0,1,4,1).\r\n")
        );
    }

    #[test]
    fn bytes_pass_until_a_cut_and_a_kill_refuses_new_connections() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let upstream = listener.local_addr().unwrap().port();
        thread::spawn(move || {
            for mut conn in listener.incoming().flatten() {
                let mut buf = [0; 5];
                if conn.read_exact(&mut buf).is_ok() {
                    let _ = conn.write_all(&buf);
                }
            }
        });
        let proxy = Proxy::start(upstream);
        let mut conn = TcpStream::connect(("127.0.0.1", proxy.port)).unwrap();
        conn.write_all(b"hello").unwrap();
        let mut echo = [0; 5];
        conn.read_exact(&mut echo).unwrap();
        assert_eq!(&echo, b"hello");
        assert_eq!(proxy.served(), 5);
        proxy.arm(Cut::AfterSending(3));
        let mut cut = TcpStream::connect(("127.0.0.1", proxy.port)).unwrap();
        cut.write_all(b"hello").unwrap();
        assert!(
            cut.read(&mut echo).map_or(true, |n| n == 0),
            "the cut connection answered"
        );
        assert!(proxy.fired());
        proxy.set(Fault::Kill);
        assert!(conn.read(&mut echo).map_or(true, |n| n == 0), "still open");
        let refused = TcpStream::connect(("127.0.0.1", proxy.port)).unwrap_err();
        assert_eq!(refused.kind(), std::io::ErrorKind::ConnectionRefused);
    }
}
