//! One single-member etcd for a test: free loopback ports, data in a temporary directory,
//! killed on drop. Shared by the tests that need etcd (`#[path = "support/etcd.rs"] mod
//! etcd;`), those of the `hilock` command too (cli/tests, `#[path =
//! "../../runtime/tests/support/etcd.rs"]`: one copy for both packages); each uses part of
//! it.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// A running etcd (or one stopped by [`Etcd::stop`]).
pub struct Etcd {
    child: Child,
    /// The client address, `127.0.0.1:PORT`.
    pub addr: String,
    _dir: tempfile::TempDir,
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.resume();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

use crate::ports::free_port;

fn have(cmd: &str) -> bool {
    Command::new(cmd)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Whether `etcd` is installed; if it is not, one try (per test process) of `apt-get
/// update` then `apt-get install -y etcd-server`, as root only.
pub fn ensure_etcd() -> bool {
    static HAVE: OnceLock<bool> = OnceLock::new();
    *HAVE.get_or_init(|| {
        if have("etcd") {
            return true;
        }
        let root = Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| o.stdout.trim_ascii() == b"0");
        if root && have("apt-get") {
            let quiet = |args: &[&str]| {
                Command::new("apt-get")
                    .args(args)
                    .env("DEBIAN_FRONTEND", "noninteractive")
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success())
            };
            let _ = quiet(&["update", "-qq"]) && quiet(&["install", "-y", "-qq", "etcd-server"]);
        }
        have("etcd")
    })
}

/// Spawns etcd (`None`: it could not be spawned, e.g. it is not installed); it may not
/// answer yet (see [`start_healthy`]).
pub fn start_etcd() -> Option<Etcd> {
    let (c, p) = (free_port(), free_port());
    let dir = tempfile::tempdir().unwrap();
    let child = Command::new("etcd")
        .args(["--name", "test", "--data-dir"])
        .arg(dir.path().join("data"))
        .args(["--listen-client-urls", &format!("http://127.0.0.1:{c}")])
        .args(["--advertise-client-urls", &format!("http://127.0.0.1:{c}")])
        .args(["--listen-peer-urls", &format!("http://127.0.0.1:{p}")])
        .args([
            "--initial-advertise-peer-urls",
            &format!("http://127.0.0.1:{p}"),
        ])
        .args(["--initial-cluster", &format!("test=http://127.0.0.1:{p}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    Some(Etcd {
        child,
        addr: format!("127.0.0.1:{c}"),
        _dir: dir,
    })
}

/// etcd installed if need be, started, and answering `/health` within 20 s; `None` after
/// printing one line saying why `test` is skipped.
pub fn start_healthy(test: &str) -> Option<Etcd> {
    if !ensure_etcd() {
        eprintln!(
            "SKIP {test}: etcd is not installed and 'apt-get install etcd-server' is not possible here"
        );
        return None;
    }
    let Some(mut e) = start_etcd() else {
        eprintln!("SKIP {test}: etcd could not be started");
        return None;
    };
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(20) {
        if e.healthy() {
            return Some(e);
        }
        if let Ok(Some(_)) = e.child.try_wait() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    e.stop();
    eprintln!("SKIP {test}: etcd did not become healthy within 20 s");
    None
}

impl Etcd {
    /// `GET /health` answers `"health":"true"` within 1 s.
    pub fn healthy(&self) -> bool {
        let get = || -> std::io::Result<String> {
            let mut s = TcpStream::connect_timeout(
                &self.addr.parse().unwrap(),
                Duration::from_millis(500),
            )?;
            s.set_read_timeout(Some(Duration::from_secs(1)))?;
            write!(
                s,
                "GET /health HTTP/1.0\r\nHost: {}\r\nConnection: close\r\n\r\n",
                self.addr
            )?;
            let mut out = String::new();
            s.read_to_string(&mut out)?;
            Ok(out)
        };
        get().is_ok_and(|r| r.contains("\"health\":\"true\""))
    }

    /// `POST path` with a JSON body to etcd's JSON gateway; the response (head and body).
    pub fn post(&self, path: &str, body: &str) -> std::io::Result<String> {
        let mut s =
            TcpStream::connect_timeout(&self.addr.parse().unwrap(), Duration::from_millis(500))?;
        s.set_read_timeout(Some(Duration::from_secs(2)))?;
        write!(
            s,
            "POST {path} HTTP/1.0\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.addr,
            body.len()
        )?;
        let mut out = String::new();
        s.read_to_string(&mut out)?;
        Ok(out)
    }

    /// Stops etcd for good (SIGKILL).
    pub fn stop(&mut self) {
        self.resume();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Pauses etcd (SIGSTOP): it keeps its sockets but answers nothing.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// Resumes a paused etcd (SIGCONT).
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, sig: &str) {
        let _ = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// A TCP proxy to etcd that can cut its node off: while cut, it reads and discards
/// everything in both directions (a partition: nothing is refused, nothing arrives).
pub struct Proxy {
    /// The proxy's address, `127.0.0.1:PORT`: give it to the node as etcd's endpoint.
    pub addr: String,
    cut: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Proxy {
    pub async fn start(target: &str) -> Proxy {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let cut = Arc::new(AtomicBool::new(false));
        let (c, target) = (cut.clone(), target.to_string());
        let task = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            while let Ok((a, _)) = l.accept().await {
                let Ok(b) = tokio::net::TcpStream::connect(&target).await else {
                    continue;
                };
                let (ar, aw) = a.into_split();
                let (br, bw) = b.into_split();
                conns.spawn(pipe(ar, bw, c.clone()));
                conns.spawn(pipe(br, aw, c.clone()));
            }
        });
        Proxy { addr, cut, task }
    }

    /// From now on, everything is read and discarded.
    pub fn cut(&self) {
        self.cut.store(true, Relaxed);
    }
}

async fn pipe(
    mut r: tokio::net::tcp::OwnedReadHalf,
    mut w: tokio::net::tcp::OwnedWriteHalf,
    cut: Arc<AtomicBool>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match r.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if !cut.load(Relaxed) && w.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
