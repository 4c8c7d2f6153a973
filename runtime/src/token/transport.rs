//! The peer transport: the streams and the listener of the peer links, over tokio's TCP —
//! or, for a node started with [`Node::start_sim`](super::Node::start_sim) (feature `sim`),
//! over turmoil's simulated network — and the randomness of the handshake.
//!
//! The choice is made per node when it starts ([`Network`]), never by a feature alone: a
//! build with `sim` on (the workspace's tests build the library once with every feature
//! they name) still runs every other node over real TCP.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

use crate::wire;

/// Which network a node's peer links use.
#[derive(Clone, Debug)]
pub(super) enum Network {
    /// The operating system's TCP (tokio).
    Tcp,
    /// turmoil's simulated TCP (inside a turmoil simulation only), with the node's
    /// connections that the simulation may reset.
    #[cfg(feature = "sim")]
    Sim(std::sync::Arc<sim::Resets>),
}

impl Network {
    /// Open a connection to `addr`.
    pub(super) async fn connect(&self, addr: SocketAddr) -> io::Result<Stream> {
        match self {
            Network::Tcp => {
                let s = TcpStream::connect(addr).await?;
                let _ = s.set_nodelay(true);
                Ok(Stream::Tcp(s))
            }
            #[cfg(feature = "sim")]
            Network::Sim(resets) => {
                let s = turmoil::net::TcpStream::connect(addr).await?;
                Ok(Stream::Sim(resets.track(s, addr.ip())))
            }
        }
    }
}

/// A peer connection.
#[derive(Debug)]
pub(super) enum Stream {
    Tcp(TcpStream),
    #[cfg(feature = "sim")]
    Sim(sim::SimStream),
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            #[cfg(feature = "sim")]
            Stream::Sim(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            #[cfg(feature = "sim")]
            Stream::Sim(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_flush(cx),
            #[cfg(feature = "sim")]
            Stream::Sim(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            #[cfg(feature = "sim")]
            Stream::Sim(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

/// The listener for peers' connections.
pub(super) enum Listener {
    Tcp(TcpListener),
    #[cfg(feature = "sim")]
    Sim(turmoil::net::TcpListener, std::sync::Arc<sim::Resets>),
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Listener")
            .field(&self.local_addr().ok())
            .finish()
    }
}

impl Listener {
    pub(super) async fn accept(&self) -> io::Result<(Stream, SocketAddr)> {
        match self {
            Listener::Tcp(l) => {
                let (s, a) = l.accept().await?;
                let _ = s.set_nodelay(true);
                Ok((Stream::Tcp(s), a))
            }
            #[cfg(feature = "sim")]
            Listener::Sim(l, resets) => {
                let (s, a) = l.accept().await?;
                Ok((Stream::Sim(resets.track(s, a.ip())), a))
            }
        }
    }

    pub(super) fn local_addr(&self) -> io::Result<SocketAddr> {
        match self {
            Listener::Tcp(l) => l.local_addr(),
            #[cfg(feature = "sim")]
            Listener::Sim(l, _) => l.local_addr(),
        }
    }

    pub(super) fn network(&self) -> Network {
        match self {
            Listener::Tcp(_) => Network::Tcp,
            #[cfg(feature = "sim")]
            Listener::Sim(_, resets) => Network::Sim(resets.clone()),
        }
    }
}

/// Where a node's random numbers come from: the operating system's, or (a simulated node)
/// a generator seeded by the simulation, so that a seed replays the same run.
#[derive(Debug)]
pub(super) struct Entropy(Option<std::sync::Mutex<rand::rngs::StdRng>>);

impl Entropy {
    /// The operating system's randomness.
    pub(super) fn os() -> Entropy {
        Entropy(None)
    }

    /// A generator seeded with `seed`.
    #[cfg(feature = "sim")]
    pub(super) fn seeded(seed: u64) -> Entropy {
        use rand::SeedableRng;
        Entropy(Some(std::sync::Mutex::new(
            rand::rngs::StdRng::seed_from_u64(seed),
        )))
    }

    /// A handshake nonce.
    pub(super) fn nonce(&self) -> wire::Nonce {
        match &self.0 {
            None => wire::nonce(),
            Some(r) => {
                use rand::Rng;
                // A poisoned lock still holds a usable generator.
                let mut r = r.lock().unwrap_or_else(|e| e.into_inner());
                r.random()
            }
        }
    }

    /// A node's run (incarnation).
    pub(super) fn run(&self) -> u64 {
        match &self.0 {
            None => rand::random(),
            Some(r) => {
                use rand::Rng;
                let mut r = r.lock().unwrap_or_else(|e| e.into_inner());
                r.random()
            }
        }
    }
}

/// The simulated streams, which the simulation can reset (a connection reset by the network
/// or by the peer's kernel: both sides see an error, and the links reconnect and resend).
#[cfg(feature = "sim")]
pub(super) mod sim {
    use std::io;
    use std::net::IpAddr;
    use std::pin::Pin;
    use std::sync::{Arc, Mutex, Weak};
    use std::task::{Context, Poll, Waker};

    use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

    /// One stream's reset flag and the tasks waiting on it.
    #[derive(Debug, Default)]
    struct Cut {
        reset: bool,
        read: Option<Waker>,
        write: Option<Waker>,
    }

    /// A node's simulated connections, by peer address.
    #[derive(Debug, Default)]
    pub(crate) struct Resets {
        streams: Mutex<Vec<(IpAddr, Weak<Mutex<Cut>>)>>,
    }

    impl Resets {
        pub(super) fn track(&self, inner: turmoil::net::TcpStream, peer: IpAddr) -> SimStream {
            let cut = Arc::new(Mutex::new(Cut::default()));
            let mut s = self.streams.lock().unwrap_or_else(|e| e.into_inner());
            s.retain(|(_, w)| w.strong_count() > 0);
            s.push((peer, Arc::downgrade(&cut)));
            SimStream { inner, cut }
        }

        /// Resets every open connection with `peer`; returns how many.
        pub(crate) fn reset(&self, peer: IpAddr) -> usize {
            let s = self.streams.lock().unwrap_or_else(|e| e.into_inner());
            let mut n = 0;
            for (_, w) in s.iter().filter(|(p, _)| *p == peer) {
                if let Some(c) = w.upgrade() {
                    let mut c = c.lock().unwrap_or_else(|e| e.into_inner());
                    if !c.reset {
                        c.reset = true;
                        n += 1;
                    }
                    for w in [c.read.take(), c.write.take()].into_iter().flatten() {
                        w.wake();
                    }
                }
            }
            n
        }
    }

    /// A turmoil stream the simulation can reset. Dropping it after a reset sends turmoil's
    /// RST to the peer, whose side of the connection fails too.
    #[derive(Debug)]
    pub(crate) struct SimStream {
        inner: turmoil::net::TcpStream,
        cut: Arc<Mutex<Cut>>,
    }

    impl SimStream {
        /// Whether the stream was reset; if not, `cx` is woken when it is.
        fn reset(&self, cx: &Context<'_>, read: bool) -> bool {
            let mut c = self.cut.lock().unwrap_or_else(|e| e.into_inner());
            if c.reset {
                return true;
            }
            let slot = if read { &mut c.read } else { &mut c.write };
            match slot {
                Some(w) if w.will_wake(cx.waker()) => {}
                _ => *slot = Some(cx.waker().clone()),
            }
            false
        }
    }

    fn reset_error() -> io::Error {
        io::Error::new(
            io::ErrorKind::ConnectionReset,
            "connection reset (simulated)",
        )
    }

    impl AsyncRead for SimStream {
        fn poll_read(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            let s = self.get_mut();
            if s.reset(cx, true) {
                return Poll::Ready(Err(reset_error()));
            }
            Pin::new(&mut s.inner).poll_read(cx, buf)
        }
    }

    impl AsyncWrite for SimStream {
        fn poll_write(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            let s = self.get_mut();
            if s.reset(cx, false) {
                return Poll::Ready(Err(reset_error()));
            }
            Pin::new(&mut s.inner).poll_write(cx, buf)
        }

        fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            let s = self.get_mut();
            if s.reset(cx, false) {
                return Poll::Ready(Err(reset_error()));
            }
            Pin::new(&mut s.inner).poll_flush(cx)
        }

        fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
        }
    }
}
