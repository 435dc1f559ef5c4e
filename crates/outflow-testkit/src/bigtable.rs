//! Bigtable test helpers: the shared emulator's address, independent readers (Google's
//! Python client and the `cbt` tool), a private emulator a test may kill and restart, and a
//! loopback proxy that breaks connections, or HTTP/2 streams, on demand.
//!
//! The emulator keeps everything in memory, so killing it loses every table: a test that
//! must show "nothing lost across a broken connection" breaks the connection with
//! [`FaultProxy`] instead, and keeps literal kills ([`PrivateEmulator`]) for what they can
//! show (how failures are classified, that the writer recovers or fails cleanly).

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::broadcast;
use tokio::task::JoinHandle;

use crate::served::ServedReader;
use crate::{free_port, python, repo_root, require_env, run};

/// `host:port` of the emulator `scripts/servers/bigtable.sh` started.
pub fn emulator_host() -> String {
    require_env("BIGTABLE_EMULATOR_HOST")
}

/// `bigtable_tool.py serve`, for the whole test binary: each read names its emulator.
static TOOL: ServedReader = ServedReader::new("bigtable");

/// Sends `command` of `tests/readers/python/bigtable_tool.py`, for `instance` of the
/// emulator at `host`, to the served tool.
fn tool(command: &str, host: &str, project: &str, instance: &str, extra: &[&str]) -> Value {
    let args: Vec<String> = [
        command,
        "--host",
        host,
        "--project",
        project,
        "--instance",
        instance,
    ]
    .iter()
    .chain(extra)
    .map(|a| a.to_string())
    .collect();
    TOOL.request(
        || {
            let mut c = Command::new(python());
            c.arg(repo_root().join("tests/readers/python/bigtable_tool.py"))
                .arg("serve");
            c
        },
        &args,
    )
}

/// A cell value as the Python reader prints it (`value_hex`), as UTF-8 text.
pub fn text_of_hex(hex: &str) -> String {
    let bytes: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hexadecimal"))
        .collect();
    String::from_utf8(bytes).expect("UTF-8 text")
}

/// Reads a table with Google's Python client (`tests/readers/python/bigtable_tool.py`):
/// `{"families": {NAME: {"gc_rule", "value_type"}}, "rows": [{"key", "cells"}]}`.
pub fn python_read(host: &str, project: &str, instance: &str, table: &str) -> Value {
    tool("read", host, project, instance, &["--table", table])
}

/// The tables of `instance`, sorted, as Google's Python client lists them.
pub fn python_tables(host: &str, project: &str, instance: &str) -> Vec<String> {
    crate::strings(&tool("tables", host, project, instance, &[])["tables"])
}

/// Runs Google's `cbt` tool against the emulator at `host`; returns its stdout.
pub fn cbt(host: &str, project: &str, instance: &str, args: &[&str]) -> String {
    // A credentials path, though the emulator takes none: without one, cbt asks `gcloud
    // config config-helper` for credentials, which costs about a second of CPU per call.
    run(Command::new("cbt")
        .args(["-project", project, "-instance", instance, "-creds", "/dev/null"])
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

/// A TCP proxy on loopback in front of a gRPC server, which can reset every connection it
/// carries, swallow the server's responses, or break responses at the HTTP/2 level
/// ([`FaultProxy::reset_responses`]).
pub struct FaultProxy {
    addr: SocketAddr,
    swallow: Arc<AtomicBool>,
    resets: Arc<Resets>,
    cut: broadcast::Sender<()>,
    accept: JoinHandle<()>,
}

/// How [`FaultProxy::reset_responses`] breaks a response, right after its headers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum H2Reset {
    /// A RST_STREAM (PROTOCOL_ERROR) on the response's stream; the rest of the response is
    /// dropped, and the connection carries on.
    Stream,
    /// A GOAWAY (PROTOCOL_ERROR) that counts the response's stream as possibly processed,
    /// then the connection is closed.
    GoAway,
}

/// The responses still to break, how, and how many were.
#[derive(Debug)]
struct Resets {
    left: AtomicUsize,
    go_away: AtomicBool,
    done: AtomicUsize,
}

impl Resets {
    /// Whether to break the response starting now, and how.
    fn take(&self) -> Option<H2Reset> {
        self.left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .ok()?;
        self.done.fetch_add(1, Ordering::SeqCst);
        Some(if self.go_away.load(Ordering::SeqCst) {
            H2Reset::GoAway
        } else {
            H2Reset::Stream
        })
    }
}

impl FaultProxy {
    /// Listens on a free loopback port and forwards to `upstream` (`host:port`).
    pub async fn start(upstream: &str) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the proxy");
        let addr = listener.local_addr().expect("proxy address");
        let swallow = Arc::new(AtomicBool::new(false));
        let resets = Arc::new(Resets {
            left: AtomicUsize::new(0),
            go_away: AtomicBool::new(false),
            done: AtomicUsize::new(0),
        });
        let (cut, _) = broadcast::channel(64);
        let upstream = upstream.to_string();
        let (swallow_flag, resets_of, cut_tx) = (swallow.clone(), resets.clone(), cut.clone());
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(&upstream).await else {
                    let _ = client.set_zero_linger();
                    continue;
                };
                tokio::spawn(forward(
                    client,
                    server,
                    swallow_flag.clone(),
                    resets_of.clone(),
                    cut_tx.subscribe(),
                ));
            }
        });
        FaultProxy {
            addr,
            swallow,
            resets,
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

    /// Breaks the next `count` responses that have a body, on any connection, right after
    /// their headers (the server has done the work by then): the client sees an HTTP/2
    /// stream reset or GOAWAY mid-response, as `how` says.
    pub fn reset_responses(&self, count: usize, how: H2Reset) {
        self.resets
            .go_away
            .store(how == H2Reset::GoAway, Ordering::SeqCst);
        self.resets.left.store(count, Ordering::SeqCst);
    }

    /// Responses broken so far by [`FaultProxy::reset_responses`].
    pub fn responses_reset(&self) -> usize {
        self.resets.done.load(Ordering::SeqCst)
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
    resets: Arc<Resets>,
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
        let mut frames = Frames::default();
        loop {
            let n = server_read.read(&mut buf).await?;
            if n == 0 {
                return Ok::<_, std::io::Error>(());
            }
            let (out, close) = frames.feed(&buf[..n], &resets);
            if !swallow.load(Ordering::SeqCst) {
                client_write.write_all(&out).await?;
            }
            if close {
                return Ok(());
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

const FRAME_HEADER: usize = 9;
const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const GOAWAY: u8 = 0x7;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PROTOCOL_ERROR: u32 = 0x1;

/// The server-to-client half of an HTTP/2 connection, frame by frame (a server sends
/// nothing but frames, its preface being a SETTINGS frame), breaking responses on demand.
#[derive(Default)]
struct Frames {
    /// Bytes of a frame not wholly read yet.
    pending: Vec<u8>,
    /// Streams reset by the proxy, whose further frames the client must not see.
    dropped: HashSet<u32>,
    /// A response to break once its header block (continued in CONTINUATION frames) ends.
    deferred: Option<(u32, H2Reset)>,
}

impl Frames {
    /// Takes bytes from the server; returns what to pass on, and whether to close the
    /// connection after it.
    fn feed(&mut self, bytes: &[u8], resets: &Resets) -> (Vec<u8>, bool) {
        self.pending.extend_from_slice(bytes);
        let mut out = Vec::with_capacity(self.pending.len());
        let mut at = 0;
        while self.pending.len() - at >= FRAME_HEADER {
            let header = &self.pending[at..at + FRAME_HEADER];
            let len = u32::from_be_bytes([0, header[0], header[1], header[2]]) as usize;
            let end = at + FRAME_HEADER + len;
            if self.pending.len() < end {
                break;
            }
            let (kind, flags) = (header[3], header[4]);
            let stream = u32::from_be_bytes([header[5], header[6], header[7], header[8]]) & 0x7fff_ffff;
            let frame = &self.pending[at..end];
            at = end;
            if self.dropped.contains(&stream) {
                let last = kind == RST_STREAM || (matches!(kind, DATA | HEADERS) && flags & END_STREAM != 0);
                if last {
                    self.dropped.remove(&stream);
                }
                continue;
            }
            out.extend_from_slice(frame);
            // Response headers with a body to follow (trailers and trailers-only responses
            // end the stream); the break comes once the header block is complete.
            let reset = match kind {
                HEADERS if stream != 0 && flags & END_STREAM == 0 => resets.take(),
                CONTINUATION => self.deferred.filter(|(s, _)| *s == stream).map(|(_, how)| how),
                _ => None,
            };
            let Some(how) = reset else { continue };
            if flags & END_HEADERS == 0 {
                self.deferred = Some((stream, how));
                continue;
            }
            self.deferred = None;
            match how {
                H2Reset::Stream => {
                    out.extend_from_slice(&frame_header(4, RST_STREAM, stream));
                    out.extend_from_slice(&PROTOCOL_ERROR.to_be_bytes());
                    self.dropped.insert(stream);
                }
                H2Reset::GoAway => {
                    out.extend_from_slice(&frame_header(8, GOAWAY, 0));
                    out.extend_from_slice(&stream.to_be_bytes());
                    out.extend_from_slice(&PROTOCOL_ERROR.to_be_bytes());
                    return (out, true);
                }
            }
        }
        self.pending.drain(..at);
        (out, false)
    }
}

fn frame_header(len: u32, kind: u8, stream: u32) -> [u8; FRAME_HEADER] {
    let [_, a, b, c] = len.to_be_bytes();
    let [d, e, f, g] = stream.to_be_bytes();
    [a, b, c, kind, 0, d, e, f, g]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let mut out = frame_header(payload.len() as u32, kind, stream).to_vec();
        out[4] = flags;
        out.extend_from_slice(payload);
        out
    }

    fn resets(count: usize, how: H2Reset) -> Resets {
        Resets {
            left: AtomicUsize::new(count),
            go_away: AtomicBool::new(how == H2Reset::GoAway),
            done: AtomicUsize::new(0),
        }
    }

    #[test]
    fn a_response_is_reset_after_its_headers_and_the_rest_of_it_dropped() {
        let settings = frame(0x4, 0, 0, &[]);
        let headers = frame(HEADERS, END_HEADERS, 1, b"hdrs");
        let data = frame(DATA, 0, 1, b"body");
        let trailers = frame(HEADERS, END_HEADERS | END_STREAM, 1, b"trl");
        let next = frame(HEADERS, END_HEADERS, 3, b"hdrs");
        let bytes = [settings.clone(), headers.clone(), data, trailers, next.clone()].concat();
        let resets = resets(1, H2Reset::Stream);
        let mut frames = Frames::default();
        // Fed in small pieces: frames are reassembled before they are judged.
        let mut out = Vec::new();
        for piece in bytes.chunks(5) {
            let (passed, close) = frames.feed(piece, &resets);
            assert!(!close);
            out.extend(passed);
        }
        let rst = frame(RST_STREAM, 0, 1, &PROTOCOL_ERROR.to_be_bytes());
        assert_eq!(out, [settings, headers, rst, next].concat());
        assert_eq!(resets.done.load(Ordering::SeqCst), 1);
        assert!(frames.dropped.is_empty());
    }

    #[test]
    fn a_goaway_ends_the_connection_and_trailers_only_answers_pass() {
        let trailers_only = frame(HEADERS, END_HEADERS | END_STREAM, 1, b"404");
        let headers = frame(HEADERS, 0, 3, b"hd");
        let continuation = frame(CONTINUATION, END_HEADERS, 3, b"rs");
        let resets = resets(1, H2Reset::GoAway);
        let mut frames = Frames::default();
        let (out, close) = frames.feed(&[trailers_only.clone(), headers.clone()].concat(), &resets);
        assert_eq!((out, close), ([trailers_only, headers].concat(), false));
        let (out, close) = frames.feed(&continuation, &resets);
        let mut goaway = frame_header(8, GOAWAY, 0).to_vec();
        goaway.extend_from_slice(&3u32.to_be_bytes());
        goaway.extend_from_slice(&PROTOCOL_ERROR.to_be_bytes());
        assert_eq!((out, close), ([continuation, goaway].concat(), true));
    }
}
