//! FTPS, explicit (RFC 4217): the control connection turns to TLS after `AUTH TLS`, and
//! every data connection is TLS too (`PROT P`), resuming the control connection's TLS
//! session. vsftpd (`require_ssl_reuse`, its default) refuses a data connection that does
//! not: it proves the data connection comes from the client that logged in.
//!
//! Each control connection has a session store of its own, shared with its data
//! connections only: a server process (vsftpd forks one per login) knows its own sessions
//! and tickets alone. Both TLS 1.3 tickets and TLS 1.2 session ids resume with vsftpd; a
//! TLS 1.3 resumption consumes a ticket and the server sends a fresh one on the data
//! connection, which is therefore read to its end (its close_notify) after an upload too;
//! a data connection's TLS starts only once the server accepted its command, so that a
//! refused one spends no ticket.
//!
//! Certificates are verified as for HTTPS ([`crate::http::tls`]), with the host's
//! `[tls."HOST:PORT"]` choices.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::Arc;

use rustls::client::Resumption;
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, StreamOwned};

use crate::http::tls::{client_config, describe_tls, Service};
use crate::http::TlsOptions;
use crate::{Error, ErrorKind, Result};

/// Sessions kept per control connection: its own, and the tickets its transfers bring.
const SESSIONS: usize = 8;

/// How a driver speaks TLS to its server.
pub(super) struct Ftps {
    config: ClientConfig,
    name: ServerName<'static>,
    /// `host[:port]` as the URL writes it: the `[tls."..."]` key of the server.
    authority: String,
    /// Which certificate authorities verify the server, in words.
    pub authorities: String,
}

impl Ftps {
    /// TLS to `host` with the choices of `options`; an unreadable `ca_file` fails now.
    pub fn new(options: &TlsOptions, host: &str, authority: &str) -> Result<Ftps> {
        let name = ServerName::try_from(host.to_owned()).map_err(|e| {
            Error::new(
                ErrorKind::InvalidName,
                format!("ftps://{authority}: not a TLS server name: {e}"),
            )
        })?;
        Ok(Ftps {
            config: client_config(options)?,
            name,
            authority: authority.to_owned(),
            authorities: crate::http::tls::authorities(options),
        })
    }

    /// The TLS of one control connection and its data connections.
    pub fn session(&self) -> Session {
        let mut config = self.config.clone();
        config.resumption = Resumption::in_memory_sessions(SESSIONS);
        Session {
            config: Arc::new(config),
            name: self.name.clone(),
            authority: self.authority.clone(),
        }
    }
}

/// One control connection's TLS: its configuration, whose session store its data
/// connections resume from.
#[derive(Clone)]
pub(super) struct Session {
    config: Arc<ClientConfig>,
    name: ServerName<'static>,
    authority: String,
}

impl Session {
    /// `tcp` in TLS, the handshake done: a refused certificate is told in words.
    pub fn connect(&self, tcp: TcpStream) -> io::Result<Stream> {
        let mut tls = self.wrap(tcp)?;
        while tls.conn.is_handshaking() {
            if let Err(e) = tls.conn.complete_io(&mut tls.sock) {
                return Err(self.worded(e));
            }
        }
        Ok(Stream::Tls(Box::new(tls)))
    }

    /// A data connection, whose TLS starts with [`Pending::start`].
    pub fn data(&self, tcp: TcpStream) -> Pending {
        Pending::Tls(tcp, self.clone())
    }

    fn wrap(&self, tcp: TcpStream) -> io::Result<StreamOwned<ClientConnection, TcpStream>> {
        let conn = ClientConnection::new(Arc::clone(&self.config), self.name.clone())
            .map_err(io::Error::other)?;
        Ok(StreamOwned::new(conn, tcp))
    }

    /// `e`, or the certificate refusal behind it in words.
    fn worded(&self, e: io::Error) -> io::Error {
        let described = e
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
            .and_then(|tls| describe_tls(tls, &self.authority, Service::Http));
        match described {
            Some(text) => io::Error::new(io::ErrorKind::InvalidData, text),
            None => e,
        }
    }
}

/// A data connection before the server accepted its command.
pub(super) enum Pending {
    Plain(TcpStream),
    /// TLS to start: the server begins it only once it has the command.
    Tls(TcpStream, Session),
}

impl Pending {
    /// The connection, its TLS handshake done.
    pub fn start(self) -> io::Result<Stream> {
        match self {
            Pending::Plain(tcp) => Ok(Stream::Plain(tcp)),
            Pending::Tls(tcp, session) => session.connect(tcp),
        }
    }
}

/// A control or data connection, in the clear or in TLS.
pub(super) enum Stream {
    Plain(TcpStream),
    Tls(Box<StreamOwned<ClientConnection, TcpStream>>),
}

impl Stream {
    /// The socket underneath.
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Plain(tcp) => tcp,
            Stream::Tls(tls) => &tls.sock,
        }
    }

    /// Ends what we send: close_notify in TLS, then the TCP end of data. In TLS, what the
    /// server still sends (session tickets, its own close_notify) is then read to the end.
    pub fn finish(&mut self) -> io::Result<()> {
        match self {
            Stream::Plain(tcp) => tcp.shutdown(Shutdown::Write),
            Stream::Tls(tls) => {
                tls.conn.send_close_notify();
                tls.flush()?;
                tls.sock.shutdown(Shutdown::Write)?;
                io::copy(tls, &mut io::sink()).map(drop)
            }
        }
    }

    /// Closes a connection we read from, at its end or before: close_notify in TLS, which
    /// the server may wait for, whether or not it still listens.
    pub fn close(self) {
        if let Stream::Tls(mut tls) = self {
            tls.conn.send_close_notify();
            let _ = tls.flush();
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(tcp) => tcp.read(buf),
            // A server that closes without close_notify has still sent everything: the
            // transfer's reply on the control connection tells whether it is complete.
            Stream::Tls(tls) => match tls.read(buf) {
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(0),
                other => other,
            },
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(tcp) => tcp.write(buf),
            Stream::Tls(tls) => tls.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Plain(tcp) => tcp.flush(),
            Stream::Tls(tls) => tls.flush(),
        }
    }
}
