//! `drmas index serve` under hostile load on loopback: sockets that trickle their heads,
//! an idle flood past `--max-connections`, bodies that never end, answers nobody reads,
//! requests for millions of passages. A normal client keeps getting its answers, and
//! the server closes the bad sockets itself. Asserted with counts; the only clocks are
//! lower bounds (a timeout never fires early, measured from an instant taken before the
//! server's own clock can have started) and generous hang guards.

use super::index_cli::{Server, built, http, read_answer};
use crate::common::process::{HANG, wait_until};
use std::{
    io::{ErrorKind, Read, Write},
    net::TcpStream,
    time::{Duration, Instant},
};

fn host_of(url: &str) -> String {
    url.strip_prefix("http://")
        .unwrap()
        .split_once('/')
        .unwrap()
        .0
        .to_string()
}

/// Whether the server has closed `s` (EOF or reset), without blocking. Bytes it sent
/// (an error answer) are read and dropped.
fn closed_by_server(mut s: &TcpStream) -> bool {
    s.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 4096];
    let closed = loop {
        match s.read(&mut buf) {
            Ok(0) => break true,
            Ok(_) => continue,
            Err(e) if e.kind() == ErrorKind::WouldBlock => break false,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => break true,
        }
    };
    s.set_nonblocking(false).unwrap();
    closed
}

/// A request of `queries` copies of one query at `topk`, as JSON.
fn request(queries: usize, topk: usize) -> String {
    serde_json::json!({"queries": vec!["capital city"; queries], "topk": topk}).to_string()
}

#[test]
fn trickling_heads_idle_floods_and_huge_requests_do_not_starve_a_client() {
    let dir = tempfile::tempdir().unwrap();
    let index = built(dir.path());
    let server = Server::start_with(
        &index,
        &[
            "--max-connections",
            "16",
            "--header-timeout",
            "1",
            "--idle-timeout",
            "2",
        ],
    );
    let host = host_of(&server.url);

    // 60 sockets that send a head one byte at a time, and 300 that send nothing: far
    // more than the 16 connections the server holds.
    let mut trickling: Vec<TcpStream> = (0..60)
        .map(|_| {
            let mut s = TcpStream::connect(&host).unwrap();
            // The server may already have reset it to make room: then this write fails,
            // and the socket counts as closed below.
            let _ = s.write_all(b"POST /retrieve HTTP/1.1\r\nhost: x\r\nx-slow: ");
            s
        })
        .collect();
    let idle: Vec<TcpStream> = (0..300)
        .map(|_| TcpStream::connect(&host).unwrap())
        .collect();

    // Meanwhile a normal client: every request answered, each within a generous bound.
    let normal = std::thread::scope(|s| {
        let client = s.spawn(|| {
            let mut answered = 0;
            for i in 0..30 {
                let (status, body) = http(&server.url, "POST", &request(2, 3));
                assert_eq!(status, 200, "request {i}: {body}");
                let response: serde_json::Value = serde_json::from_str(&body).unwrap();
                assert_eq!(response["result"][1].as_array().unwrap().len(), 3, "{body}");
                answered += 1;
                if i == 10 {
                    // The request that killed the old server: refused at once, by name.
                    let (status, body) = http(&server.url, "POST", &request(10_000, 1000));
                    assert_eq!(status, 422, "{body}");
                    assert_eq!(
                        body,
                        "{\"detail\":\"10000 queries × topk 1000 = 10000000 passages is above this \
                         server's --max-hits of 65536; send the queries in several requests\"}"
                    );
                }
            }
            answered
        });
        // Trickle one more header byte on every open trickling socket every 100 ms until
        // the server has closed them all (or the hang guard).
        let mut open: Vec<&mut TcpStream> = trickling.iter_mut().collect();
        wait_until(
            "the server closes every trickling socket",
            Duration::from_millis(100),
            || {
                open.retain_mut(|s| !closed_by_server(s) && s.write_all(b"a").is_ok());
                open.is_empty()
            },
        );
        client.join().unwrap()
    });
    assert_eq!(normal, 30);

    // Every idle socket was closed by the server: to make room, or by the idle timeout.
    wait_until(
        "the server closes all 300 idle sockets",
        Duration::from_millis(100),
        || idle.iter().all(closed_by_server),
    );
    // And the server is well.
    let (status, body) = http(&server.url, "POST", &request(1, 3));
    assert_eq!(status, 200, "{body}");
    assert!(server.interrupt().success());
}

#[test]
fn a_head_must_arrive_within_the_header_timeout_a_kept_connection_within_the_idle_one() {
    let dir = tempfile::tempdir().unwrap();
    let index = built(dir.path());
    let server = Server::start_with(&index, &["--header-timeout", "1", "--idle-timeout", "3"]);
    let host = host_of(&server.url);

    // A head trickled a byte every 100 ms: closed, not before a second. The instant is
    // taken before connecting: the server's header clock cannot start earlier.
    let before_connect = Instant::now();
    let mut slow = TcpStream::connect(&host).unwrap();
    let _ = slow.write_all(b"POST /retrieve HTTP/1.1\r\nx-slow: ");
    wait_until(
        "the server closes a trickling head",
        Duration::from_millis(100),
        || closed_by_server(&slow) || slow.write_all(b"a").is_err(),
    );
    assert!(before_connect.elapsed() >= Duration::from_secs(1));

    // A kept-alive connection after its answer: the header timeout does not apply, the
    // idle one does.
    let mut kept = TcpStream::connect(&host).unwrap();
    let body = request(1, 3);
    // Before the request is sent: the server's idle clock starts after it has answered.
    let asked = Instant::now();
    write!(
        kept,
        "POST /retrieve HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&answer).contains("]]}") {
        let n = kept.read(&mut buf).unwrap();
        assert!(
            n > 0,
            "closed before the answer: {}",
            String::from_utf8_lossy(&answer)
        );
        answer.extend_from_slice(&buf[..n]);
    }
    assert!(String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 200 OK"));
    kept.set_read_timeout(Some(HANG)).unwrap();
    match kept.read(&mut buf) {
        Ok(0) => {}
        Ok(n) => panic!("{n} more bytes on an idle connection"),
        Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::TimedOut => {
            panic!("a kept-alive connection was never closed")
        }
        // Reset: closed too.
        Err(_) => {}
    }
    assert!(
        asked.elapsed() >= Duration::from_secs(3),
        "closed {:?} after the request, before the idle timeout",
        asked.elapsed()
    );
    assert!(server.interrupt().success());
}

#[test]
fn bodies_and_answers_are_bounded_and_refusals_name_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let index = built(dir.path());
    let server = Server::start_with(
        &index,
        &[
            "--max-request-bytes",
            "1KiB",
            "--max-response-bytes",
            "2KiB",
            "--body-timeout",
            "1",
            "--max-hits",
            "100",
            "--max-topk",
            "20",
        ],
    );
    let host = host_of(&server.url);

    let (status, body) = http(&server.url, "POST", &request(34, 3));
    assert_eq!(status, 422, "{body}");
    assert_eq!(
        body,
        "{\"detail\":\"34 queries × topk 3 = 102 passages is above this server's --max-hits of 100; \
         send the queries in several requests\"}"
    );
    let (status, body) = http(&server.url, "POST", &request(1, 21));
    assert_eq!(status, 422, "{body}");
    assert_eq!(
        body,
        "{\"detail\":\"topk 21 is above this server's --max-topk of 20\"}"
    );
    // 20 lists of 3 passages are more than 2 KiB.
    let (status, body) = http(&server.url, "POST", &request(20, 3));
    assert_eq!(status, 422, "{body}");
    assert!(
        body.starts_with(
            "{\"detail\":\"the answer is over this server's --max-response-bytes of 2 KiB after "
        ) && body.ends_with(" of 20 queries (topk 3); ask for fewer queries or a smaller topk\"}"),
        "{body}"
    );
    let big = format!("{{\"queries\": [\"{}\"]}}", "x".repeat(2000));
    let (status, body) = http(&server.url, "POST", &big);
    assert_eq!(status, 413, "{body}");
    assert_eq!(
        body,
        format!(
            "{{\"detail\":\"the request body ({} bytes) is over this server's --max-request-bytes of 1 KiB\"}}",
            big.len()
        )
    );
    // A chunked body has no length to check first: refused when it passes the limit.
    // The body goes in one write of two chunks (1,200 bytes, the limit passed in the
    // second) and no more: the server answers and closes once it has read past the
    // limit, and a write after that would meet a closed socket (a broken pipe, seen on
    // a loaded machine) however long the test waited before it.
    let mut chunked = TcpStream::connect(&host).unwrap();
    chunked.set_read_timeout(Some(HANG)).unwrap();
    let chunk = "y".repeat(600);
    let head_and_body = format!(
        "POST /retrieve HTTP/1.1\r\nhost: {host}\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n\
         {n:x}\r\n{chunk}\r\n{n:x}\r\n{chunk}\r\n",
        n = chunk.len()
    );
    let _ = chunked.write_all(head_and_body.as_bytes());
    let answer = read_answer(&mut chunked);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(
        answer.contains("{\"detail\":\"the request body (at least ")
            && answer
                .ends_with(" bytes so far) is over this server's --max-request-bytes of 1 KiB\"}"),
        "{answer}"
    );

    // A body that never ends: 408 after the body timeout, naming it.
    let mut stalled = TcpStream::connect(&host).unwrap();
    stalled.set_read_timeout(Some(HANG)).unwrap();
    let _ = stalled.write_all(
        format!(
            "POST /retrieve HTTP/1.1\r\nhost: {host}\r\ncontent-length: 100\r\nconnection: close\r\n\r\n{{\"queries\""
        )
        .as_bytes(),
    );
    let answer = read_answer(&mut stalled);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(
        answer.ends_with(
            "{\"detail\":\"the request body did not arrive within this server's --body-timeout of 1 s\"}"
        ),
        "{answer}"
    );

    // Within the limits, answers as always.
    let (status, body) = http(&server.url, "POST", &request(2, 3));
    assert_eq!(status, 200, "{body}");
    assert!(server.interrupt().success());
}

#[test]
fn an_answer_nobody_reads_is_dropped_after_the_idle_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let index = built(dir.path());
    let server = Server::start_with(&index, &["--idle-timeout", "1", "--max-hits", "100000"]);
    let host = host_of(&server.url);
    let listening = server.open_sockets();

    // An answer of ~10 MB, more than the socket buffers hold, to a client that never
    // reads it.
    let body = request(8000, 11);
    let mut deaf = TcpStream::connect(&host).unwrap();
    write!(
        deaf,
        "POST /retrieve HTTP/1.1\r\nhost: {host}\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    // The others are answered meanwhile.
    let (status, body) = http(&server.url, "POST", &request(2, 3));
    assert_eq!(status, 200, "{body}");
    // The server lets go of the stalled connection (with a reset: no unsent bytes kept).
    wait_until(
        "the server closes the stalled connection",
        Duration::from_millis(100),
        || server.open_sockets() <= listening,
    );
    deaf.set_read_timeout(Some(HANG)).unwrap();
    let mut got = Vec::new();
    let ended = deaf.read_to_end(&mut got);
    assert!(
        ended.is_err() || got.len() < 10_000_000,
        "{:?}, {} bytes",
        ended,
        got.len()
    );
    assert!(server.interrupt().success());
}

/// One request on a kept-alive connection; the status and body.
fn kept_request(conn: &mut TcpStream, host: &str, body: &str) -> (u16, String) {
    write!(
        conn,
        "POST /retrieve HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&answer).into_owned();
        if let Some((head, rest)) = text.split_once("\r\n\r\n") {
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length: "))
                .expect("a content-length")
                .parse()
                .unwrap();
            if rest.len() >= length {
                return (head[9..12].parse().unwrap(), rest.to_string());
            }
        }
        let n = conn.read(&mut buf).unwrap();
        assert!(n > 0, "closed before the answer: {text}");
        answer.extend_from_slice(&buf[..n]);
    }
}

#[test]
fn an_idle_flood_closes_sockets_that_never_sent_a_request_before_a_clients_kept_one() {
    let dir = tempfile::tempdir().unwrap();
    let index = built(dir.path());
    let server = Server::start_with(&index, &["--max-connections", "16"]);
    let host = host_of(&server.url);
    let mut kept = TcpStream::connect(&host).unwrap();
    kept.set_read_timeout(Some(HANG)).unwrap();
    let (status, body) = kept_request(&mut kept, &host, &request(1, 3));
    assert_eq!(status, 200, "{body}");

    // 100 sockets that never send: the server makes room by closing them, not the
    // client's connection, which has waited longer.
    let flood: Vec<TcpStream> = (0..100)
        .map(|_| TcpStream::connect(&host).unwrap())
        .collect();
    wait_until(
        "the server clears the flood",
        Duration::from_millis(50),
        || flood.iter().filter(|s| closed_by_server(s)).count() >= 100 - 15,
    );
    let (status, body) = kept_request(&mut kept, &host, &request(2, 3));
    assert_eq!(status, 200, "{body}");
    // And a new client gets in too.
    let (status, body) = http(&server.url, "POST", &request(1, 3));
    assert_eq!(status, 200, "{body}");
    assert!(server.interrupt().success());
}

/// A body far over `--max-request-bytes` (65 MB, more than the sockets' buffers hold)
/// written by a client that does not stop to read: the server reads and drops the rest
/// before its 413, so the client's writes all succeed and it reads the 413, not a broken
/// pipe. A chunked one the same.
#[test]
fn a_body_over_the_limit_still_being_sent_gets_the_413() {
    let dir = tempfile::tempdir().unwrap();
    let index = built(dir.path());
    let server = Server::start_with(&index, &["--max-request-bytes", "1KiB"]);
    let host = host_of(&server.url);
    let size = 65_000_000usize;
    let chunk = vec![b'x'; 1 << 20];

    let mut conn = TcpStream::connect(&host).unwrap();
    conn.set_read_timeout(Some(HANG)).unwrap();
    conn.set_write_timeout(Some(HANG)).unwrap();
    write!(
        conn,
        "POST /retrieve HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\ncontent-length: {size}\r\n\r\n"
    )
    .unwrap();
    let mut sent = 0;
    while sent < size {
        let n = chunk.len().min(size - sent);
        if let Err(e) = conn.write_all(&chunk[..n]) {
            panic!("the server stopped reading after {sent} of {size} bytes: {e}");
        }
        sent += n;
    }
    let mut answer = String::new();
    conn.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(
        answer.ends_with(&format!(
            "{{\"detail\":\"the request body ({size} bytes) is over this server's --max-request-bytes of 1 KiB\"}}"
        )),
        "{answer}"
    );

    let mut chunked = TcpStream::connect(&host).unwrap();
    chunked.set_read_timeout(Some(HANG)).unwrap();
    chunked.set_write_timeout(Some(HANG)).unwrap();
    write!(
        chunked,
        "POST /retrieve HTTP/1.1\r\nhost: {host}\r\ntransfer-encoding: chunked\r\n\r\n"
    )
    .unwrap();
    for i in 0..32 {
        if let Err(e) = write!(chunked, "{:x}\r\n", chunk.len())
            .and_then(|()| chunked.write_all(&chunk))
            .and_then(|()| chunked.write_all(b"\r\n"))
        {
            panic!("the server stopped reading after {i} chunks: {e}");
        }
    }
    chunked.write_all(b"0\r\n\r\n").unwrap();
    let mut answer = String::new();
    chunked.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(server.interrupt().success());
}
