//! Bigtable test helpers: the shared emulator's address, independent readers (Google's
//! Python client and the `cbt` tool), a private emulator a test may kill and restart, and a
//! loopback proxy that breaks connections on demand.
//!
//! The emulator keeps everything in memory, so killing it loses every table: a test that
//! must show "nothing lost across a broken connection" breaks the connection with
//! [`FaultProxy`] instead, and keeps literal kills ([`PrivateEmulator`]) for what they can
//! show (how failures are classified, that the writer recovers or fails cleanly).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::broadcast;
use tokio::task::JoinHandle;

use crate::{free_port, python, repo_root, require_env, run, run_json};

/// `host:port` of the emulator `scripts/servers/bigtable.sh` started.
pub fn emulator_host() -> String {
    require_env("BIGTABLE_EMULATOR_HOST")
}

/// Reads a table with Google's Python client (`tests/readers/python/bigtable_tool.py`):
/// `{"families": {NAME: {"gc_rule", "value_type"}}, "rows": [{"key", "cells"}]}`.
pub fn python_read(host: &str, project: &str, instance: &str, table: &str) -> Value {
    let tool = repo_root().join("tests/readers/python/bigtable_tool.py");
    run_json(
        Command::new(python())
            .arg(tool)
            .args([
                "read",
                "--project",
                project,
                "--instance",
                instance,
                "--table",
                table,
            ])
            .env("BIGTABLE_EMULATOR_HOST", host),
    )
}

/// Runs Google's `cbt` tool against the emulator at `host`; returns its stdout.
pub fn cbt(host: &str, project: &str, instance: &str, args: &[&str]) -> String {
    run(Command::new("cbt")
        .args(["-project", project, "-instance", instance])
        .args(args)
        .env("BIGTABLE_EMULATOR_HOST", host))
}

fn emulator_path() -> PathBuf {
    let listing = run(Command::new("dpkg").args(["-L", "google-cloud-cli-bigtable-emulator"]));
    listing
        .lines()
        .find(|l| l.ends_with("/cbtemulator"))
        .map(PathBuf::from)
        .expect("the google-cloud-cli-bigtable-emulator package lists no cbtemulator")
}

async fn wait_for_port(port: u16, child: &mut Child, deadline: Duration) -> bool {
    let until = Instant::now() + deadline;
    while Instant::now() < until {
        if let Ok(Some(_)) = child.try_wait() {
            return false;
        }
        if TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

/// A cbtemulator of the test's own, on a free loopback port, killed when dropped.
pub struct PrivateEmulator {
    port: u16,
    child: Option<Child>,
}

impl PrivateEmulator {
    /// Starts one and waits (up to 30 s) until it accepts connections.
    pub async fn start() -> PrivateEmulator {
        // A port picked free can be taken before the emulator binds it: try a few.
        for _ in 0..5 {
            let mut emulator = PrivateEmulator {
                port: free_port(),
                child: None,
            };
            if emulator.launch().await {
                return emulator;
            }
        }
        panic!("could not start a private cbtemulator");
    }

    async fn launch(&mut self) -> bool {
        let mut child = Command::new(emulator_path())
            .args(["-host", "127.0.0.1", "-port", &self.port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn cbtemulator");
        let up = wait_for_port(self.port, &mut child, Duration::from_secs(30)).await;
        if up {
            self.child = Some(child);
        } else {
            let _ = child.kill();
            let _ = child.wait();
        }
        up
    }

    /// `127.0.0.1:PORT`.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// SIGKILLs the emulator (by the PID this helper started) and reaps it. Everything it
    /// held is gone.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts a fresh emulator on the same port (empty: the old one's tables are lost).
    pub async fn restart(&mut self) {
        self.kill();
        // The port may linger for a moment after the kill; bounded retries.
        for _ in 0..50 {
            if self.launch().await {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("could not restart cbtemulator on port {}", self.port);
    }
}

impl Drop for PrivateEmulator {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A TCP proxy on loopback in front of a server, which can reset every connection it
/// carries, or swallow the server's responses.
pub struct FaultProxy {
    addr: SocketAddr,
    swallow: Arc<AtomicBool>,
    cut: broadcast::Sender<()>,
    accept: JoinHandle<()>,
}

impl FaultProxy {
    /// Listens on a free loopback port and forwards to `upstream` (`host:port`).
    pub async fn start(upstream: &str) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the proxy");
        let addr = listener.local_addr().expect("proxy address");
        let swallow = Arc::new(AtomicBool::new(false));
        let (cut, _) = broadcast::channel(64);
        let upstream = upstream.to_string();
        let (swallow_flag, cut_tx) = (swallow.clone(), cut.clone());
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(&upstream).await else {
                    let _ = client.set_zero_linger();
                    continue;
                };
                tokio::spawn(forward(client, server, swallow_flag.clone(), cut_tx.subscribe()));
            }
        });
        FaultProxy {
            addr,
            swallow,
            cut,
            accept,
        }
    }

    /// `127.0.0.1:PORT`, to use as the endpoint.
    pub fn host(&self) -> String {
        self.addr.to_string()
    }

    /// While on, requests still reach the server but its responses are dropped: writes
    /// are applied and never acknowledged.
    pub fn swallow_responses(&self, on: bool) {
        self.swallow.store(on, Ordering::SeqCst);
    }

    /// Resets (RST) every connection open now on both sides.
    pub fn cut_all(&self) {
        let _ = self.cut.send(());
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.accept.abort();
        let _ = self.cut.send(());
    }
}

async fn forward(
    client: TcpStream,
    server: TcpStream,
    swallow: Arc<AtomicBool>,
    mut cut: broadcast::Receiver<()>,
) {
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let upstream = async {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = client_read.read(&mut buf).await?;
            if n == 0 {
                return Ok::<_, std::io::Error>(());
            }
            server_write.write_all(&buf[..n]).await?;
        }
    };
    let downstream = async {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = server_read.read(&mut buf).await?;
            if n == 0 {
                return Ok::<_, std::io::Error>(());
            }
            if !swallow.load(Ordering::SeqCst) {
                client_write.write_all(&buf[..n]).await?;
            }
        }
    };
    tokio::select! {
        _ = upstream => {}
        _ = downstream => {}
        _ = cut.recv() => {
            // Dropping the halves with SO_LINGER 0 sends a reset to both peers.
            if let (Ok(client), Ok(server)) = (client_read.reunite(client_write), server_read.reunite(server_write)) {
                let _ = client.set_zero_linger();
                let _ = server.set_zero_linger();
            }
        }
    }
}
