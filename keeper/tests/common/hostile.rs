//! A hostile results server for tests: plain threads over a `TcpListener`, answering each
//! request with whatever the test's handler writes (no HTTP library between the test and the
//! bytes on the wire, so it can send what no well-behaved server would).

use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpListener, TcpStream},
    sync::Arc,
};

/// What a handler gets: the request's path and query, and the socket to write the answer to.
pub type Handler = dyn Fn(&str, &mut TcpStream) + Send + Sync;

/// A running hostile server (its threads end with the test process).
pub struct Hostile {
    /// Where it listens.
    pub addr: SocketAddr,
}

impl Hostile {
    /// Starts a server on 127.0.0.1 answering every request with `handler`.
    pub fn start(handler: Arc<Handler>) -> Self {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || {
            for s in l.incoming() {
                let Ok(mut s) = s else { continue };
                let h = handler.clone();
                std::thread::spawn(move || {
                    if let Some(path) = read_head(&mut s) {
                        h(&path, &mut s);
                    }
                });
            }
        });
        Hostile { addr }
    }

    /// `http://127.0.0.1:port`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

/// Reads a request head (at most 64 KiB); its path and query.
fn read_head(s: &mut TcpStream) -> Option<String> {
    read_request(s).map(|(path, _)| path)
}

/// Reads a request head (at most 64 KiB): its path and query, and the whole head.
pub fn read_request(s: &mut TcpStream) -> Option<(String, String)> {
    let mut buf = Vec::new();
    let mut b = [0u8; 4096];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = s.read(&mut b).ok()?;
        if n == 0 || buf.len() > 64 << 10 {
            return None;
        }
        buf.extend_from_slice(&b[..n]);
    }
    let head = String::from_utf8_lossy(&buf).to_string();
    let path = head.lines().next()?.split_whitespace().nth(1)?.to_string();
    Some((path, head))
}

/// The value of header `name` (any case) in a request head.
pub fn header(head: &str, name: &str) -> Option<String> {
    head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
    })
}

/// Writes a whole response and closes.
pub fn respond(s: &mut TcpStream, status: &str, headers: &[(&str, &str)], body: &[u8]) {
    let mut head = format!(
        "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (k, v) in headers {
        head += &format!("{k}: {v}\r\n");
    }
    head += "\r\n";
    let _ = s.write_all(head.as_bytes());
    let _ = s.write_all(body);
}

/// Writes a response head without a length, then whatever `body` writes until it fails.
pub fn respond_streaming(
    s: &mut TcpStream,
    headers: &[(&str, &str)],
    body: impl FnOnce(&mut TcpStream) -> std::io::Result<()>,
) {
    let mut head = "HTTP/1.1 200 OK\r\nConnection: close\r\n".to_string();
    for (k, v) in headers {
        head += &format!("{k}: {v}\r\n");
    }
    head += "\r\n";
    if s.write_all(head.as_bytes()).is_ok() {
        let _ = body(s);
    }
}

/// The root and what follows it in `/r/<root>/<rest>`.
pub fn split_path(path: &str) -> Option<([u8; 32], String)> {
    let rest = path.split("/r/").nth(1)?;
    let (root, what) = rest.split_once('/')?;
    let root = compute_market_keeper::results::parse_hex_digest(root)?;
    Some((root, what.to_string()))
}

/// The indices of a `tiles?i=…` request.
pub fn indices(what: &str) -> Vec<u32> {
    what.split_once("i=")
        .map(|(_, l)| l.split(',').filter_map(|x| x.parse().ok()).collect())
        .unwrap_or_default()
}
