//! Loopback endpoints that misbehave on purpose, for the deadline and retry tests of any
//! service (HTTP/1.1 or gRPC alike, since they work on bytes):
//!
//! - [`FaultyEndpoint::silent`] accepts connections, reads what it is sent and never
//!   answers;
//! - [`FaultyEndpoint::slow`] stands in front of a real server and holds back each of its
//!   replies;
//! - [`FaultyEndpoint::reset_mid_response`] stands in front of a real server, lets the first
//!   bytes of its reply through, then resets the connection;
//! - [`FaultyEndpoint::silent_on`] stands in front of a real server and passes everything
//!   but the requests it is told to swallow, which it never answers;
//! - [`FaultyEndpoint::http_status`] answers every HTTP request with one status;
//! - [`FaultyEndpoint::switchable`] stands in front of a real server and passes everything
//!   until told to fail: then it cuts the connections it carries and answers every request
//!   with one status, until told to pass again (a store failing mid-write);
//! - [`FaultyEndpoint::recording`] stands in front of a real server, passes everything and
//!   keeps what the client sent, for a test to look at the requests (their headers).
//!
//! Each listens on an ephemeral 127.0.0.1 port and stops, closing every connection it
//! holds, when dropped. (Bigtable's [`crate::bigtable::FaultProxy`] breaks connections on
//! demand instead, mid-test.)

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

/// What an endpoint does with each connection.
#[derive(Clone, Debug)]
enum Fault {
    Silent,
    Slow { upstream: String, delay: Duration },
    ResetMidResponse { upstream: String, after: usize },
    SilentOn { upstream: String, needle: Vec<u8> },
    HttpStatus(u16),
    Switchable { upstream: String, switch: Arc<Switch> },
    Recording { upstream: String, log: Recorded },
}

/// The bytes clients sent through a [`FaultyEndpoint::recording`].
type Recorded = Arc<std::sync::Mutex<Vec<u8>>>;

/// The state of a [`FaultyEndpoint::switchable`]: the status it answers (0 while it
/// passes), and a signal to the connections it carries to stop.
#[derive(Debug)]
struct Switch {
    status: std::sync::atomic::AtomicU16,
    cut: tokio::sync::watch::Sender<u64>,
}

/// A loopback endpoint with a fault; see the module docs.
pub struct FaultyEndpoint {
    addr: SocketAddr,
    connections: Arc<AtomicUsize>,
    accept: JoinHandle<()>,
    switch: Option<Arc<Switch>>,
    log: Option<Recorded>,
}

impl FaultyEndpoint {
    /// Accepts connections and reads from them, never writing a byte.
    pub async fn silent() -> FaultyEndpoint {
        FaultyEndpoint::start(Fault::Silent).await
    }

    /// Forwards to `upstream` (`host:port`), holding back each reply of the server (the
    /// first bytes it sends after the client sent some) by `delay`.
    pub async fn slow(upstream: &str, delay: Duration) -> FaultyEndpoint {
        FaultyEndpoint::start(Fault::Slow {
            upstream: upstream.to_string(),
            delay,
        })
        .await
    }

    /// Forwards to `upstream` (`host:port`), passes the first `after` bytes the server
    /// sends on each connection, then resets (RST) both sides.
    pub async fn reset_mid_response(upstream: &str, after: usize) -> FaultyEndpoint {
        FaultyEndpoint::start(Fault::ResetMidResponse {
            upstream: upstream.to_string(),
            after,
        })
        .await
    }

    /// Forwards to `upstream` (`host:port`) until the client sends bytes containing
    /// `needle` (a request line, say `POST /v1/namespaces/ns/tables/t`): those are not
    /// passed on, and the connection is silent from then on. Other connections go on.
    pub async fn silent_on(upstream: &str, needle: &[u8]) -> FaultyEndpoint {
        FaultyEndpoint::start(Fault::SilentOn {
            upstream: upstream.to_string(),
            needle: needle.to_vec(),
        })
        .await
    }

    /// Answers every HTTP/1.1 request with `status` and a small JSON error body (the
    /// Iceberg REST error model), closing the connection after each.
    pub async fn http_status(status: u16) -> FaultyEndpoint {
        FaultyEndpoint::start(Fault::HttpStatus(status)).await
    }

    /// Forwards to `upstream` (`host:port`) until [`FaultyEndpoint::fail_with`].
    pub async fn switchable(upstream: &str) -> FaultyEndpoint {
        let switch = Arc::new(Switch {
            status: std::sync::atomic::AtomicU16::new(0),
            cut: tokio::sync::watch::Sender::new(0),
        });
        let mut endpoint = FaultyEndpoint::start(Fault::Switchable {
            upstream: upstream.to_string(),
            switch: switch.clone(),
        })
        .await;
        endpoint.switch = Some(switch);
        endpoint
    }

    /// Forwards to `upstream` (`host:port`), keeping every byte clients send.
    pub async fn recording(upstream: &str) -> FaultyEndpoint {
        let log = Recorded::default();
        let mut endpoint = FaultyEndpoint::start(Fault::Recording {
            upstream: upstream.to_string(),
            log: log.clone(),
        })
        .await;
        endpoint.log = Some(log);
        endpoint
    }

    /// What clients sent through a recording endpoint so far (requests, headers and
    /// bodies), as text.
    pub fn recorded(&self) -> String {
        let log = self.log.as_ref().expect("a recording endpoint");
        String::from_utf8_lossy(&log.lock().expect("the recording")).into_owned()
    }

    /// A switchable endpoint from now on cuts the connections it carries and answers every
    /// request with `status`.
    pub fn fail_with(&self, status: u16) {
        let switch = self.switch.as_ref().expect("a switchable endpoint");
        switch.status.store(status, Ordering::SeqCst);
        switch.cut.send_modify(|n| *n += 1);
    }

    /// A switchable endpoint passes requests again.
    pub fn pass(&self) {
        let switch = self.switch.as_ref().expect("a switchable endpoint");
        switch.status.store(0, Ordering::SeqCst);
    }

    async fn start(fault: Fault) -> FaultyEndpoint {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a loopback port");
        let addr = listener.local_addr().expect("local address");
        let connections = Arc::new(AtomicUsize::new(0));
        let counter = connections.clone();
        let accept = tokio::spawn(async move {
            // Owned by this task: aborting it (on drop) aborts every connection's task too.
            let mut handlers = JoinSet::new();
            while let Ok((client, _)) = listener.accept().await {
                counter.fetch_add(1, Ordering::SeqCst);
                handlers.spawn(serve(client, fault.clone()));
            }
        });
        FaultyEndpoint {
            addr,
            connections,
            accept,
            switch: None,
            log: None,
        }
    }

    /// `127.0.0.1:PORT`.
    pub fn host(&self) -> String {
        self.addr.to_string()
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Connections accepted so far (a client that retried opened more than one).
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

impl Drop for FaultyEndpoint {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

async fn serve(mut client: TcpStream, fault: Fault) {
    let _ = client.set_nodelay(true);
    let (upstream, faults) = match fault {
        Fault::Silent => return drain(&mut client).await,
        Fault::HttpStatus(status) => return answer_status(client, status).await,
        Fault::Switchable { upstream, switch } => {
            let status = switch.status.load(Ordering::SeqCst);
            if status != 0 {
                return answer_status(client, status).await;
            }
            (
                upstream,
                Faults {
                    cut_on: Some(switch.cut.subscribe()),
                    ..Faults::default()
                },
            )
        }
        Fault::Slow { upstream, delay } => (
            upstream,
            Faults {
                delay: Some(delay),
                ..Faults::default()
            },
        ),
        Fault::ResetMidResponse { upstream, after } => (
            upstream,
            Faults {
                cut_after: Some(after),
                ..Faults::default()
            },
        ),
        Fault::SilentOn { upstream, needle } => (
            upstream,
            Faults {
                stall_on: Some(needle),
                ..Faults::default()
            },
        ),
        Fault::Recording { upstream, log } => (
            upstream,
            Faults {
                record: Some(log),
                ..Faults::default()
            },
        ),
    };
    if let Ok(server) = TcpStream::connect(&upstream).await {
        forward(client, server, faults).await;
    }
}

/// Reads and discards until the client closes.
async fn drain(client: &mut (impl AsyncReadExt + Unpin)) {
    let mut buf = vec![0u8; 16 * 1024];
    while matches!(client.read(&mut buf).await, Ok(n) if n > 0) {}
}

/// What [`forward`] does to the bytes it carries.
#[derive(Default)]
struct Faults {
    /// Holds back each reply by this long.
    delay: Option<Duration>,
    /// Resets the connection once this many reply bytes went through.
    cut_after: Option<usize>,
    /// Goes silent once the client sends these bytes.
    stall_on: Option<Vec<u8>>,
    /// Closes the connection when this changes.
    cut_on: Option<tokio::sync::watch::Receiver<u64>>,
    /// Keeps what the client sends.
    record: Option<Recorded>,
}

async fn answer_status(mut client: TcpStream, status: u16) {
    // Read up to the end of the request's headers; a body, if any, is left unread.
    let mut request = Vec::new();
    let mut buf = [0u8; 4096];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
        match client.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => request.extend_from_slice(&buf[..n]),
        }
    }
    let body =
        format!(r#"{{"error":{{"message":"injected failure","type":"InjectedFailure","code":{status}}}}}"#);
    let response = format!(
        "HTTP/1.1 {status} Injected\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = client.write_all(response.as_bytes()).await;
    let _ = client.shutdown().await;
}

/// Copies bytes both ways, with `faults`.
async fn forward(client: TcpStream, server: TcpStream, faults: Faults) {
    let Faults {
        delay,
        cut_after,
        stall_on,
        cut_on,
        record,
    } = faults;
    let _ = server.set_nodelay(true);
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let asked = AtomicBool::new(false);
    let upstream = async {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = client_read.read(&mut buf).await?;
            if n == 0 {
                return Ok::<_, std::io::Error>(false);
            }
            if let Some(needle) = &stall_on
                && buf[..n].windows(needle.len()).any(|w| w == needle.as_slice())
            {
                return Ok(true);
            }
            asked.store(true, Ordering::SeqCst);
            if let Some(log) = &record {
                log.lock().expect("the recording").extend_from_slice(&buf[..n]);
            }
            server_write.write_all(&buf[..n]).await?;
        }
    };
    let downstream = async {
        let mut buf = vec![0u8; 64 * 1024];
        let mut sent = 0usize;
        loop {
            let n = server_read.read(&mut buf).await?;
            if n == 0 {
                return Ok::<_, std::io::Error>(());
            }
            if let Some(delay) = delay
                && asked.swap(false, Ordering::SeqCst)
            {
                tokio::time::sleep(delay).await;
            }
            let chunk = match cut_after {
                Some(limit) => &buf[..n.min(limit - sent)],
                None => &buf[..n],
            };
            client_write.write_all(chunk).await?;
            sent += chunk.len();
            if cut_after.is_some_and(|limit| sent >= limit) {
                return Ok(());
            }
        }
    };
    let cut = async {
        match cut_on {
            Some(mut changed) => {
                let _ = changed.changed().await;
            }
            None => std::future::pending::<()>().await,
        }
    };
    let stalled = tokio::select! {
        sent = upstream => sent.unwrap_or(false),
        _ = downstream => false,
        _ = cut => false,
    };
    if stalled {
        drop((server_read, server_write));
        return drain(&mut client_read).await;
    }
    if cut_after.is_some()
        && let (Ok(client), Ok(server)) = (
            client_read.reunite(client_write),
            server_read.reunite(server_write),
        )
    {
        // Dropped with SO_LINGER 0, each socket sends a reset.
        let _ = client.set_zero_linger();
        let _ = server.set_zero_linger();
    }
}
