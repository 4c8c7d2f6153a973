//! A TCP proxy on 127.0.0.1 that can partition the link it carries and heal it
//! (`#[path = "support/partition.rs"] mod partition;`). While cut, everything read in
//! either direction is thrown away and new connections are accepted and swallowed the same
//! way: nothing is refused, nothing arrives (a silent partition). At the heal, every
//! connection that lived through the cut is closed (what it lost cannot be made up), so
//! the ends reconnect, and new connections pass again.
#![allow(dead_code)]

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// Cut or not, and how many heals so far.
#[derive(Clone, Copy, Default)]
struct State {
    cut: bool,
    heals: u64,
}

pub struct CutProxy {
    /// The proxy's address, `127.0.0.1:PORT`.
    pub addr: String,
    state: watch::Sender<State>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for CutProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl CutProxy {
    pub async fn start(target: &str) -> CutProxy {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let (state, _) = watch::channel(State::default());
        let (rx, target) = (state.subscribe(), target.to_string());
        let task = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            while let Ok((a, _)) = l.accept().await {
                while conns.try_join_next().is_some() {}
                let rx = rx.clone();
                let target = target.clone();
                conns.spawn(async move {
                    let born = *rx.borrow();
                    if born.cut {
                        swallow(a, rx, born.heals).await;
                        return;
                    }
                    let Ok(b) = TcpStream::connect(&target).await else {
                        return;
                    };
                    let (ar, aw) = a.into_split();
                    let (br, bw) = b.into_split();
                    // Either direction ending (or the heal after a cut) closes both.
                    tokio::select! {
                        _ = pipe(ar, bw, rx.clone(), born.heals) => {}
                        _ = pipe(br, aw, rx, born.heals) => {}
                    }
                });
            }
        });
        CutProxy { addr, state, task }
    }

    /// From now on, everything is thrown away, in both directions.
    pub fn cut(&self) {
        self.state.send_modify(|s| s.cut = true);
    }

    /// Connections that lived through the cut are closed; new ones pass.
    pub fn heal(&self) {
        self.state.send_modify(|s| {
            s.cut = false;
            s.heals += 1;
        });
    }
}

/// Reads and discards until the next heal, then closes.
async fn swallow(mut a: TcpStream, mut rx: watch::Receiver<State>, heals: u64) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        tokio::select! {
            n = a.read(&mut buf) => if matches!(n, Ok(0) | Err(_)) { return },
            c = rx.changed() => if c.is_err() || rx.borrow().heals > heals { return },
        }
    }
}

/// Copies `r` to `w` (discarding while cut) until either ends or a heal comes.
async fn pipe(
    mut r: tokio::net::tcp::OwnedReadHalf,
    mut w: tokio::net::tcp::OwnedWriteHalf,
    mut rx: watch::Receiver<State>,
    heals: u64,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        tokio::select! {
            n = r.read(&mut buf) => {
                let n = match n {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                if !rx.borrow().cut && w.write_all(&buf[..n]).await.is_err() {
                    return;
                }
            }
            c = rx.changed() => if c.is_err() || rx.borrow().heals > heals { return },
        }
    }
}
