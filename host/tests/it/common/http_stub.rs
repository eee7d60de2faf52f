//! A loopback HTTP/1.1 server for protocol tests: one thread per connection, one reply
//! per connection (then closed), every request recorded (method, path, JSON body) and
//! answered by a closure of (request number, method, path, body).

use serde_json::Value;
use std::{
    io::{BufRead, BufReader, Read, Write},
    net::{TcpListener, TcpStream},
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
};

/// One request as the stub saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub body: Value,
}

type Reply = dyn Fn(usize, &Seen) -> (u16, String) + Send + Sync;

pub struct Stub {
    /// `http://127.0.0.1:PORT`
    pub url: String,
    pub seen: Arc<Mutex<Vec<Seen>>>,
}

impl Stub {
    pub fn start(reply: impl Fn(usize, &Seen) -> (u16, String) + Send + Sync + 'static) -> Stub {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let count = Arc::new(AtomicUsize::new(0));
        let reply: Arc<Reply> = Arc::new(reply);
        let s = seen.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                let (reply, s, count) = (reply.clone(), s.clone(), count.clone());
                std::thread::spawn(move || serve_one(conn, &*reply, &s, &count));
            }
        });
        Stub { url, seen }
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

fn serve_one(conn: TcpStream, reply: &Reply, seen: &Mutex<Vec<Seen>>, count: &AtomicUsize) {
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut first = String::new();
    if reader.read_line(&mut first).is_err() {
        return;
    }
    let mut parts = first.split_whitespace();
    let method = parts.next().unwrap_or_default().to_string();
    let path = parts.next().unwrap_or_default().to_string();
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).is_err() || line.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':')
            && k.eq_ignore_ascii_case("content-length")
        {
            length = v.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0u8; length];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    let request = Seen {
        method,
        path,
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    };
    seen.lock().unwrap().push(request.clone());
    let n = count.fetch_add(1, Ordering::SeqCst);
    let (status, text) = reply(n, &request);
    let mut conn = conn;
    let _ = write!(
        conn,
        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
        text.len()
    );
}

/// A listener on loopback that accepts every connection and never answers: each is
/// held open, unread, until [`Silent::close`], which says how many there were.
pub struct Silent {
    pub addr: std::net::SocketAddr,
    stop: Arc<std::sync::atomic::AtomicBool>,
    accepting: Option<std::thread::JoinHandle<usize>>,
}

impl Silent {
    pub fn start() -> Silent {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let accepting = std::thread::spawn(move || {
            let mut held: Vec<TcpStream> = Vec::new();
            for conn in listener.incoming() {
                if flag.load(Ordering::SeqCst) {
                    break;
                }
                held.extend(conn.ok());
            }
            held.len()
        });
        Silent {
            addr,
            stop,
            accepting: Some(accepting),
        }
    }

    /// Lets the held connections go; how many were made (the one that wakes the
    /// accepting thread not counted).
    pub fn close(mut self) -> usize {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr);
        self.accepting.take().unwrap().join().unwrap()
    }
}

/// A loopback proxy to an HTTP server that forwards each request whole (one request per
/// connection, asked to close after its answer) except those whose path holds one of
/// `held`: those it reads and neither forwards nor answers, holding the connection
/// until the client closes it (a server that has taken nothing of them, however long
/// the client waits).
pub struct Holding {
    /// `http://127.0.0.1:PORT`
    pub url: String,
}

impl Holding {
    /// `upstream`: `http://HOST:PORT`.
    pub fn start(upstream: &str, held: &[&str]) -> Holding {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let upstream = upstream
            .strip_prefix("http://")
            .expect("an http:// upstream")
            .trim_end_matches('/')
            .to_string();
        let held: Arc<Vec<String>> = Arc::new(held.iter().map(|h| h.to_string()).collect());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                let (upstream, held) = (upstream.clone(), held.clone());
                std::thread::spawn(move || forward_one(conn, &upstream, &held));
            }
        });
        Holding { url }
    }
}

fn forward_one(conn: TcpStream, upstream: &str, held: &[String]) {
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut first = String::new();
    if reader.read_line(&mut first).is_err() || first.is_empty() {
        return;
    }
    let path = first
        .split_whitespace()
        .nth(1)
        .unwrap_or_default()
        .to_string();
    let mut head = first.clone();
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).is_err() || line.trim().is_empty() {
            break;
        }
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        if k.eq_ignore_ascii_case("content-length") {
            length = v.trim().parse().unwrap_or(0);
        }
        if !k.eq_ignore_ascii_case("connection") {
            head.push_str(&line);
        }
    }
    head.push_str("connection: close\r\n\r\n");
    let mut body = vec![0u8; length];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    if held.iter().any(|h| path.contains(h.as_str())) {
        // Until the client goes away: a read that ends (0 bytes) or fails.
        let _ = reader.read(&mut [0u8; 1]);
        return;
    }
    let Ok(mut up) = TcpStream::connect(upstream) else {
        return;
    };
    let mut answer = Vec::new();
    if up.write_all(head.as_bytes()).is_err()
        || up.write_all(&body).is_err()
        || up.read_to_end(&mut answer).is_err()
    {
        return;
    }
    let mut conn = conn;
    let _ = conn.write_all(&answer);
}
