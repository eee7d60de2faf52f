//! A blocking client of one OpenEnv session: `WS /ws` of an environment server, one
//! connection per episode (the server builds a fresh environment for each and drops it
//! when the socket closes). Every message is a JSON object with a `type`:
//!
//! - `{"type":"reset","data":{"seed":N,"episode_id":"…",…}}` →
//!   `{"type":"observation","data":{"observation":{…},"reward":r|null,"done":bool}}`;
//! - `{"type":"step","data":<the action itself>}` → the same;
//! - `{"type":"state"}` (no `data`) → `{"type":"state","data":{…}}`;
//! - `{"type":"close"}` → the server closes the socket;
//! - any of them → `{"type":"error","data":{"code":"…","message":"…"}}` on a bad action
//!   (`VALIDATION_ERROR`), an exception in the environment (`EXECUTION_ERROR`) or a full
//!   server (`CAPACITY_REACHED`, then the socket closes).
//!
//! As the `openenv-core` 0.3 server sends them (its newer releases add a top-level
//! `metadata` beside the observation, read when present). Every wait is bounded: the
//! connection by its own timeout, each answer by the message timeout.

use serde_json::{Map, Value, json};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;
use thiserror::Error;
use tungstenite::{Message, WebSocket};

#[derive(Debug, Error)]
pub enum RemoteError {
    #[error("{url}: cannot connect: {message}")]
    Connect { url: String, message: String },
    #[error("{url}: no answer to `{what}` within {secs} s")]
    Timeout {
        url: String,
        what: &'static str,
        secs: f64,
    },
    #[error("{url}: the server refused `{what}`: {code}: {message}")]
    Server {
        url: String,
        what: &'static str,
        code: String,
        message: String,
    },
    #[error("{url}: `{what}`: {message}")]
    Protocol {
        url: String,
        what: &'static str,
        message: String,
    },
    #[error("{url}: the server closed the session during `{what}`")]
    Closed { url: String, what: &'static str },
}

/// What a reset or a step gives back.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    /// The observation's fields (the next agent's input).
    pub observation: Value,
    /// The environment's reward for this step (`null` after a reset).
    pub reward: Option<f64>,
    pub done: bool,
    /// Newer servers' observation metadata, when sent.
    pub metadata: Option<Value>,
}

/// One episode's session with an OpenEnv server.
pub struct OpenEnvSession {
    ws: WebSocket<TcpStream>,
    url: String,
    message_timeout: Duration,
}

impl OpenEnvSession {
    /// Opens a session at `url` (`ws://host:port/ws`): the TCP connection within
    /// `connect_timeout`, the WebSocket handshake and every later answer within
    /// `message_timeout`.
    pub fn connect(
        url: &str,
        connect_timeout: Duration,
        message_timeout: Duration,
    ) -> Result<Self, RemoteError> {
        let err = |message: String| RemoteError::Connect {
            url: url.to_string(),
            message,
        };
        let uri: tungstenite::http::Uri = url.parse().map_err(|e| err(format!("{e}")))?;
        if uri.scheme_str() != Some("ws") {
            return Err(err("only ws:// URLs are supported (no TLS)".into()));
        }
        let host = uri.host().ok_or_else(|| err("no host".into()))?;
        let port = uri.port_u16().unwrap_or(80);
        let addr = (host, port)
            .to_socket_addrs()
            .map_err(|e| err(e.to_string()))?
            .next()
            .ok_or_else(|| err(format!("{host} resolves to no address")))?;
        let stream =
            TcpStream::connect_timeout(&addr, connect_timeout).map_err(|e| err(e.to_string()))?;
        for set in [TcpStream::set_read_timeout, TcpStream::set_write_timeout] {
            set(&stream, Some(message_timeout)).map_err(|e| err(e.to_string()))?;
        }
        let (ws, _) = tungstenite::client(url, stream).map_err(|e| err(e.to_string()))?;
        Ok(Self {
            ws,
            url: url.to_string(),
            message_timeout,
        })
    }

    /// Starts the episode: `seed`, `episode_id` and the `extra` fields of the task go in
    /// the reset's data (the server passes on those its environment's `reset` takes).
    pub fn reset(
        &mut self,
        seed: Option<u64>,
        episode_id: Option<&str>,
        extra: &Map<String, Value>,
    ) -> Result<Reply, RemoteError> {
        let mut data = extra.clone();
        if let Some(seed) = seed {
            data.insert("seed".into(), json!(seed));
        }
        if let Some(id) = episode_id {
            data.insert("episode_id".into(), json!(id));
        }
        let answer = self.request(
            "reset",
            json!({"type": "reset", "data": data}),
            "observation",
        )?;
        self.reply("reset", answer)
    }

    /// One step with `action` (the action object itself, as the server's schema has it).
    pub fn step(&mut self, action: &Value) -> Result<Reply, RemoteError> {
        let answer = self.request(
            "step",
            json!({"type": "step", "data": action}),
            "observation",
        )?;
        self.reply("step", answer)
    }

    /// The environment's state.
    pub fn state(&mut self) -> Result<Value, RemoteError> {
        self.request("state", json!({"type": "state"}), "state")
    }

    /// Answers the server's pings while no request is under way, reading only what has
    /// already arrived. Servers keep their sockets alive with pings (uvicorn: one every
    /// 20 s, the socket closed when no pong comes within 20 s), and an episode can spend
    /// longer than that on a model's turn between two steps: without this, the session
    /// would be gone when its next step comes.
    pub fn keep_alive(&mut self) -> Result<(), RemoteError> {
        let closed = |this: &Self| RemoteError::Closed {
            url: this.url.clone(),
            what: "keep-alive",
        };
        if self
            .ws
            .get_mut()
            .set_read_timeout(Some(Duration::from_millis(1)))
            .is_err()
        {
            return Err(closed(self));
        }
        let result = loop {
            match self.ws.read() {
                // A ping is answered by the flush below.
                Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_)) => continue,
                Ok(Message::Close(_)) => break Err(closed(self)),
                Ok(other) => {
                    break Err(self.protocol(
                        "keep-alive",
                        format!(
                            "a message nothing asked for: {}",
                            shorten(&other.to_string())
                        ),
                    ));
                }
                Err(tungstenite::Error::Io(e))
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    break Ok(());
                }
                Err(_) => break Err(closed(self)),
            }
        };
        let _ = self.ws.flush();
        let _ = self
            .ws
            .get_mut()
            .set_read_timeout(Some(self.message_timeout));
        result
    }

    /// Ends the session (the server drops the episode's environment).
    pub fn close(&mut self) {
        let _ = self
            .ws
            .send(Message::text(json!({"type": "close"}).to_string()));
        let _ = self.ws.close(None);
        // Until the server's close frame, bounded by the read timeout.
        while self.ws.read().is_ok() {}
    }

    fn protocol(&self, what: &'static str, message: String) -> RemoteError {
        RemoteError::Protocol {
            url: self.url.clone(),
            what,
            message,
        }
    }

    /// Sends `message` and returns the `data` of the answer of type `expect`.
    fn request(
        &mut self,
        what: &'static str,
        message: Value,
        expect: &str,
    ) -> Result<Value, RemoteError> {
        let io = |this: &Self, e: tungstenite::Error| match e {
            tungstenite::Error::Io(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                RemoteError::Timeout {
                    url: this.url.clone(),
                    what,
                    secs: this.message_timeout.as_secs_f64(),
                }
            }
            tungstenite::Error::Io(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::BrokenPipe
                        | std::io::ErrorKind::ConnectionReset
                        | std::io::ErrorKind::ConnectionAborted
                        | std::io::ErrorKind::UnexpectedEof
                ) =>
            {
                RemoteError::Closed {
                    url: this.url.clone(),
                    what,
                }
            }
            tungstenite::Error::ConnectionClosed
            | tungstenite::Error::AlreadyClosed
            | tungstenite::Error::Protocol(_) => RemoteError::Closed {
                url: this.url.clone(),
                what,
            },
            other => this.protocol(what, other.to_string()),
        };
        self.ws
            .send(Message::text(message.to_string()))
            .map_err(|e| io(self, e))?;
        loop {
            let text = match self.ws.read().map_err(|e| io(self, e))? {
                Message::Text(t) => t,
                Message::Close(_) => {
                    return Err(RemoteError::Closed {
                        url: self.url.clone(),
                        what,
                    });
                }
                // Pings are answered by the next read or write.
                Message::Ping(_) | Message::Pong(_) | Message::Frame(_) => continue,
                Message::Binary(_) => {
                    return Err(self.protocol(what, "a binary message, not JSON text".into()));
                }
            };
            let v: Value = serde_json::from_str(text.as_str()).map_err(|e| {
                self.protocol(
                    what,
                    format!(
                        "an answer that is not JSON ({e}): {}",
                        shorten(text.as_str())
                    ),
                )
            })?;
            let kind = v.get("type").and_then(Value::as_str).unwrap_or("");
            let data = v.get("data").cloned().unwrap_or(Value::Null);
            if kind == "error" {
                let field = |k: &str| {
                    data.get(k)
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string()
                };
                return Err(RemoteError::Server {
                    url: self.url.clone(),
                    what,
                    code: field("code"),
                    message: field("message"),
                });
            }
            if kind != expect {
                return Err(self.protocol(
                    what,
                    format!(
                        "expected an answer of type `{expect}`, got: {}",
                        shorten(text.as_str())
                    ),
                ));
            }
            return Ok(data);
        }
    }

    fn reply(&self, what: &'static str, data: Value) -> Result<Reply, RemoteError> {
        let observation = match data.get("observation") {
            Some(o @ Value::Object(_)) => o.clone(),
            _ => return Err(self.protocol(what, format!("no observation object in {data}"))),
        };
        let reward = match data.get("reward") {
            None | Some(Value::Null) => None,
            Some(Value::Bool(b)) => Some(f64::from(u8::from(*b))),
            Some(Value::Number(n)) => n.as_f64(),
            Some(other) => {
                return Err(self.protocol(what, format!("a reward that is not a number: {other}")));
            }
        };
        let done = match data.get("done") {
            Some(Value::Bool(b)) => *b,
            other => {
                return Err(self.protocol(
                    what,
                    format!(
                        "`done` must be true or false, got {}",
                        other.unwrap_or(&Value::Null)
                    ),
                ));
            }
        };
        Ok(Reply {
            observation,
            reward,
            done,
            metadata: data.get("metadata").filter(|m| !m.is_null()).cloned(),
        })
    }
}

/// At most 200 characters of `text`, for messages.
fn shorten(text: &str) -> String {
    match text.char_indices().nth(200) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::thread::JoinHandle;

    /// A server of one session on a free loopback port: for each expected client
    /// message (checked as JSON), the answer to send (`None`: send nothing and wait for
    /// the client to go). Returns the URL and the thread, which ends when the script
    /// does or the client leaves.
    fn server(script: Vec<(Value, Option<String>)>) -> (String, JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("ws://{}/ws", listener.local_addr().unwrap());
        let handle = std::thread::spawn(move || {
            let (stream, _) = listener.accept().unwrap();
            let mut ws = tungstenite::accept(stream).unwrap();
            for (expected, answer) in script {
                let got = match ws.read() {
                    Ok(Message::Text(t)) => serde_json::from_str::<Value>(t.as_str()).unwrap(),
                    _ => return,
                };
                assert_eq!(got, expected);
                match answer {
                    Some(a) => ws.send(Message::text(a)).unwrap(),
                    // Silent: wait until the client gives up and closes.
                    None => while ws.read().is_ok() {},
                }
            }
            let _ = ws.close(None);
            while ws.read().is_ok() {}
        });
        (url, handle)
    }

    fn connect(url: &str, timeout_ms: u64) -> OpenEnvSession {
        OpenEnvSession::connect(
            url,
            Duration::from_secs(5),
            Duration::from_millis(timeout_ms),
        )
        .unwrap()
    }

    /// The episode of OpenEnv's protocol as an `openenv-core` 0.3.0 server answered it:
    /// reset with a seed, the episode id and a task field; the state; two steps, the
    /// second done; close.
    #[test]
    fn an_episode_round_trip_sends_and_reads_the_servers_messages() {
        let obs = |total: i64, reward: &str, done: bool| {
            format!(
                r#"{{"type":"observation","data":{{"observation":{{"total":{total},"note":""}},"reward":{reward},"done":{done}}}}}"#
            )
        };
        let (url, server) = server(vec![
            (
                json!({"type": "reset", "data": {"seed": 10, "episode_id": "ep-1", "level": 3}}),
                Some(obs(10, "null", false)),
            ),
            (
                json!({"type": "state"}),
                Some(r#"{"type":"state","data":{"episode_id":"ep-1","step_count":0}}"#.into()),
            ),
            (
                json!({"type": "step", "data": {"delta": 2}}),
                Some(obs(12, "2.0", false)),
            ),
            (
                json!({"type": "step", "data": {"delta": 3}}),
                Some(obs(15, "true", true)),
            ),
            (json!({"type": "close"}), None),
        ]);
        let mut s = connect(&url, 5000);
        let mut extra = Map::new();
        extra.insert("level".into(), json!(3));
        let r = s.reset(Some(10), Some("ep-1"), &extra).unwrap();
        assert_eq!(
            r,
            Reply {
                observation: json!({"total": 10, "note": ""}),
                reward: None,
                done: false,
                metadata: None,
            }
        );
        assert_eq!(
            s.state().unwrap(),
            json!({"episode_id": "ep-1", "step_count": 0})
        );
        let r = s.step(&json!({"delta": 2})).unwrap();
        assert_eq!((r.reward, r.done), (Some(2.0), false));
        // A boolean reward reads as 1.
        let r = s.step(&json!({"delta": 3})).unwrap();
        assert_eq!((r.reward, r.done), (Some(1.0), true));
        assert_eq!(r.observation["total"], 15);
        s.close();
        server.join().unwrap();
    }

    #[test]
    fn the_servers_errors_are_named_with_their_code_and_the_url() {
        let (url, server) = server(vec![
            (
                json!({"type": "step", "data": {"delta": "x"}}),
                Some(r#"{"type":"error","data":{"message":"Invalid message","code":"VALIDATION_ERROR","errors":[]}}"#.into()),
            ),
            (json!({"type": "step", "data": {"delta": 1}}), Some("not json".into())),
            (
                json!({"type": "step", "data": {"delta": 1}}),
                Some(r#"{"type":"observation","data":{"observation":{},"done":"no"}}"#.into()),
            ),
        ]);
        let mut s = connect(&url, 5000);
        let e = s.step(&json!({"delta": "x"})).err().unwrap();
        assert_eq!(
            e.to_string(),
            format!("{url}: the server refused `step`: VALIDATION_ERROR: Invalid message")
        );
        let e = s.step(&json!({"delta": 1})).err().unwrap().to_string();
        assert!(
            e.starts_with(&format!("{url}: `step`: an answer that is not JSON (")),
            "{e}"
        );
        assert!(e.ends_with("): not json"), "{e}");
        let e = s.step(&json!({"delta": 1})).err().unwrap();
        assert_eq!(
            e.to_string(),
            format!("{url}: `step`: `done` must be true or false, got \"no\"")
        );
        drop(s);
        server.join().unwrap();
    }

    /// A full server answers the first message with CAPACITY_REACHED and closes; a
    /// server that does not answer is given up on after the message timeout.
    #[test]
    fn a_full_server_and_a_silent_one_fail_the_session_with_the_reason() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("ws://{}/ws", listener.local_addr().unwrap());
        let full = std::thread::spawn(move || {
            let (stream, _) = listener.accept().unwrap();
            let mut ws = tungstenite::accept(stream).unwrap();
            ws.send(Message::text(
                r#"{"type":"error","data":{"message":"Server at capacity: 2/2 sessions active","code":"CAPACITY_REACHED","active_sessions":2,"max_sessions":2}}"#,
            ))
            .unwrap();
            let _ = ws.close(None);
            while ws.read().is_ok() {}
        });
        let mut s = connect(&url, 5000);
        let e = s.reset(None, None, &Map::new()).err().unwrap();
        assert_eq!(
            e.to_string(),
            format!(
                "{url}: the server refused `reset`: CAPACITY_REACHED: Server at capacity: 2/2 sessions active"
            )
        );
        drop(s);
        full.join().unwrap();

        let (url, silent) = server(vec![(json!({"type": "reset", "data": {}}), None)]);
        let mut s = connect(&url, 200);
        let e = s.reset(None, None, &Map::new()).err().unwrap();
        assert_eq!(
            e.to_string(),
            format!("{url}: no answer to `reset` within 0.2 s")
        );
        drop(s);
        silent.join().unwrap();
    }

    #[test]
    fn an_idle_session_answers_the_servers_pings_and_stays_usable() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("ws://{}/ws", listener.local_addr().unwrap());
        let (pong_tx, pong_rx) = std::sync::mpsc::channel();
        let server = std::thread::spawn(move || {
            let (stream, _) = listener.accept().unwrap();
            let mut ws = tungstenite::accept(stream).unwrap();
            // The keep-alive ping of a server whose client is busy elsewhere.
            ws.send(Message::Ping(b"alive?".to_vec().into())).unwrap();
            loop {
                match ws.read() {
                    Ok(Message::Pong(p)) => {
                        pong_tx.send(p.to_vec()).unwrap();
                        break;
                    }
                    Ok(_) => continue,
                    Err(_) => return,
                }
            }
            // The session still takes requests.
            if let Ok(Message::Text(_)) = ws.read() {
                ws.send(Message::text(r#"{"type":"state","data":{"ok":true}}"#))
                    .unwrap();
            }
            while ws.read().is_ok() {}
        });
        let mut s =
            OpenEnvSession::connect(&url, Duration::from_secs(5), Duration::from_secs(5)).unwrap();
        // Until the ping has arrived and been answered (a hang guard of 60 s).
        let mut pong = None;
        for _ in 0..1200 {
            s.keep_alive().unwrap();
            if let Ok(p) = pong_rx.recv_timeout(Duration::from_millis(50)) {
                pong = Some(p);
                break;
            }
        }
        assert_eq!(pong.as_deref(), Some(&b"alive?"[..]));
        assert_eq!(s.state().unwrap(), json!({"ok": true}));
        s.close();
        server.join().unwrap();
    }

    #[test]
    fn an_unreachable_or_unsupported_url_is_a_connect_error() {
        // A port nothing listens on: bound, then released.
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let url = format!("ws://127.0.0.1:{port}/ws");
        let e = OpenEnvSession::connect(&url, Duration::from_secs(2), Duration::from_secs(2))
            .err()
            .unwrap()
            .to_string();
        assert!(e.starts_with(&format!("{url}: cannot connect: ")), "{e}");
        let e = OpenEnvSession::connect(
            "wss://example.org/ws",
            Duration::from_secs(2),
            Duration::from_secs(2),
        )
        .err()
        .unwrap();
        assert_eq!(
            e.to_string(),
            "wss://example.org/ws: cannot connect: only ws:// URLs are supported (no TLS)"
        );
    }
}
