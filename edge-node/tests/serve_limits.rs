//! `edge-node serve`'s limits, on a real loopback server with the tiny model: the connection
//! cap and what happens at it, the header and idle timeouts, and what one request may ask for.
//! Each test starts its own server with small limits, so that they take seconds.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

const TINY: &str = "tiny-qwen2";

/// An `edge-node serve` on the tiny model, stopped when dropped.
struct Server {
    child: Child,
    port: u16,
}

impl Server {
    fn start(flags: &[&str]) -> Self {
        Self::start_with_descriptors(None, flags)
    }

    /// With `nofile`, the server runs under that descriptor limit (`ulimit -n`).
    fn start_with_descriptors(nofile: Option<u32>, flags: &[&str]) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut command = match nofile {
            None => Command::new(env!("CARGO_BIN_EXE_edge-node")),
            Some(n) => {
                let mut sh = Command::new("sh");
                sh.args(["-c", &format!("ulimit -n {n} && exec \"$0\" \"$@\""), env!("CARGO_BIN_EXE_edge-node")]);
                sh
            }
        };
        let child = command
            .args(["serve", "--model", TINY, "--threads", "1", "--mode", "local", "--listen", &format!("127.0.0.1:{port}")])
            .args(flags)
            .env_remove("DUET_MODEL")
            .env_remove("DUET_CONFIG")
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn edge-node serve");
        let server = Self { child, port };
        let started = Instant::now();
        while server.try_get("/healthz").map(|r| r.status) != Some(200) {
            assert!(started.elapsed() < Duration::from_secs(60), "serve did not come up");
            std::thread::sleep(Duration::from_millis(50));
        }
        server
    }

    fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(("127.0.0.1", self.port)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        s
    }

    fn try_get(&self, path: &str) -> Option<Reply> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes()).ok()?;
        read_reply(&mut s)
    }

    /// POST a JSON body on a new connection; the reply.
    fn post(&self, path: &str, body: &Value) -> Reply {
        let mut s = self.connect();
        let body = body.to_string();
        s.write_all(format!("POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()).as_bytes()).unwrap();
        read_reply(&mut s).expect("a reply")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One HTTP response.
#[derive(Debug)]
struct Reply {
    status: u16,
    head: String,
    body: Value,
}

/// Read one response: its head, then `Content-Length` bytes of body (or to the end).
fn read_reply(s: &mut TcpStream) -> Option<Reply> {
    let mut data = Vec::new();
    let mut buf = [0u8; 4096];
    let end = loop {
        if let Some(i) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = s.read(&mut buf).ok()?;
        if n == 0 {
            return None;
        }
        data.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&data[..end]).to_lowercase();
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    let length = head.lines().find_map(|l| l.strip_prefix("content-length:")).and_then(|v| v.trim().parse::<usize>().ok());
    let mut body = data[end..].to_vec();
    while length.is_none_or(|l| body.len() < l) {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => body.extend_from_slice(&buf[..n]),
        }
    }
    let body = serde_json::from_slice(&body).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned()));
    Some(Reply { status, head, body })
}

/// A socket that has sent part of a request header and nothing more.
fn slowloris(server: &Server) -> TcpStream {
    let mut s = server.connect();
    s.write_all(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ").unwrap();
    s
}

/// How long until the server closes `s` (a read that ends or fails), at most `within`.
fn closed_after(s: &mut TcpStream, within: Duration) -> Option<Duration> {
    let started = Instant::now();
    s.set_read_timeout(Some(within)).unwrap();
    let mut buf = [0u8; 1024];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return Some(started.elapsed()),
            Ok(_) => continue,
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => return None,
            Err(_) => return Some(started.elapsed()),
        }
    }
}

fn completion(max_tokens: usize) -> Value {
    json!({"model": TINY, "prompt": "hello", "max_tokens": max_tokens, "temperature": 0})
}

#[test]
fn slowloris_sockets_beyond_the_cap_do_not_stop_a_normal_request_from_being_served() {
    // More sockets than the server has descriptors, and the header timeout far off: only the
    // cap and what it does at the cap can let the request in.
    let server = Server::start_with_descriptors(Some(128), &["--max-connections", "8", "--header-timeout-ms", "60000"]);
    let held: Vec<TcpStream> = (0..300).map(|_| slowloris(&server)).collect();
    for round in 0..3 {
        let started = Instant::now();
        let reply = server.post("/v1/completions", &completion(2));
        assert_eq!(reply.status, 200, "round {round}: {reply:?}");
        assert!(reply.body["choices"][0]["text"].is_string(), "{reply:?}");
        assert!(started.elapsed() < Duration::from_secs(5), "round {round} took {:?}", started.elapsed());
    }
    drop(held);
}

#[test]
fn a_connection_that_sends_no_complete_header_is_closed_after_the_header_timeout() {
    let server = Server::start(&["--header-timeout-ms", "500", "--idle-timeout-ms", "30000"]);
    let mut partial = slowloris(&server);
    let after = closed_after(&mut partial, Duration::from_secs(10)).expect("closed");
    assert!(after >= Duration::from_millis(300) && after < Duration::from_secs(3), "closed after {after:?}");
    // A socket that sends nothing at all is closed the same way.
    let mut silent = server.connect();
    let after = closed_after(&mut silent, Duration::from_secs(10)).expect("closed");
    assert!(after < Duration::from_secs(3), "closed after {after:?}");
}

#[test]
fn a_kept_alive_connection_waits_the_idle_timeout_for_its_next_request_not_the_header_timeout() {
    let server = Server::start(&["--header-timeout-ms", "300", "--idle-timeout-ms", "2000"]);
    let mut s = server.connect();
    let get = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
    s.write_all(get).unwrap();
    assert_eq!(read_reply(&mut s).expect("first reply").status, 200);
    std::thread::sleep(Duration::from_millis(900));
    s.write_all(get).unwrap();
    assert_eq!(read_reply(&mut s).expect("a second request after three header timeouts").status, 200);
    let after = closed_after(&mut s, Duration::from_secs(10)).expect("closed once idle");
    assert!(after >= Duration::from_millis(1500) && after < Duration::from_secs(5), "closed after {after:?}");
}

#[test]
fn at_the_cap_with_every_connection_busy_a_new_one_is_refused_with_503_and_an_openai_error() {
    let server = Server::start(&["--max-connections", "2", "--header-timeout-ms", "30000"]);
    // Two requests in progress: their headers are in, their bodies are still to come.
    let busy: Vec<TcpStream> = (0..2)
        .map(|_| {
            let mut s = server.connect();
            s.write_all(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{").unwrap();
            s
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let reply = server.post("/v1/completions", &completion(2));
    assert_eq!(reply.status, 503, "{reply:?}");
    assert!(reply.head.contains("connection: close") && reply.head.contains("retry-after: 1"), "{}", reply.head);
    assert_eq!(reply.body["error"]["code"], "too_many_connections", "{reply:?}");
    assert_eq!(reply.body["error"]["type"], "server_error");
    assert!(reply.body["error"]["message"].as_str().unwrap().contains("limit of 2 connections"), "{reply:?}");
    drop(busy);
    let started = Instant::now();
    loop {
        let reply = server.post("/v1/completions", &completion(2));
        if reply.status == 200 {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(5), "served again once the busy connections left: {reply:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_request_body_that_does_not_arrive_within_the_header_timeout_is_refused() {
    let server = Server::start(&["--header-timeout-ms", "500"]);
    let mut s = server.connect();
    s.write_all(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{").unwrap();
    let started = Instant::now();
    let reply = read_reply(&mut s).expect("a reply");
    assert!(started.elapsed() < Duration::from_secs(3), "{:?}", started.elapsed());
    assert_eq!(reply.status, 400, "{reply:?}");
    assert!(reply.body["error"]["message"].as_str().unwrap().contains("--header-timeout-ms"), "{reply:?}");
}

#[test]
fn choices_times_max_tokens_over_the_request_limit_are_refused_naming_n() {
    let server = Server::start(&["--max-request-tokens", "64", "--max-tokens", "16"]);
    let ask = |extra: Value| {
        let mut body = json!({"model": TINY, "prompt": "hello", "temperature": 0});
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        server.post("/v1/completions", &body)
    };
    let r = ask(json!({"n": 8, "max_tokens": 16}));
    assert_eq!((r.status, r.body["error"]["param"].as_str()), (400, Some("n")), "{r:?}");
    let message = r.body["error"]["message"].as_str().unwrap();
    assert!(message.contains("128") && message.contains("limit of 64") && message.contains("--max-request-tokens"), "{message}");
    // The server's default max_tokens counts too.
    let r = ask(json!({"n": 5}));
    assert_eq!((r.status, r.body["error"]["param"].as_str()), (400, Some("n")), "{r:?}");
    let r = ask(json!({"max_tokens": 65}));
    assert_eq!((r.status, r.body["error"]["param"].as_str()), (400, Some("max_tokens")), "{r:?}");
    let r = ask(json!({"prompt": ["a", "b", "c", "d", "e"]}));
    assert_eq!((r.status, r.body["error"]["param"].as_str()), (400, Some("prompt")), "{r:?}");
    let r = ask(json!({"n": 4, "max_tokens": 16}));
    assert_eq!(r.status, 200, "within the limit: {r:?}");
    assert_eq!(r.body["choices"].as_array().map(Vec::len), Some(4));
}

#[test]
fn max_tokens_beyond_the_context_is_refused_naming_the_room_not_cut() {
    let server = Server::start(&["--max-context", "64"]);
    let r = server.post("/v1/completions", &json!({"model": TINY, "prompt": "hello", "max_tokens": 1000}));
    assert_eq!(r.status, 400, "{r:?}");
    assert_eq!(r.body["error"]["param"], "max_tokens");
    assert_eq!(r.body["error"]["code"], "context_length_exceeded");
    let message = r.body["error"]["message"].as_str().unwrap();
    assert!(message.contains("64-token context") && message.contains("at most"), "{message}");
    // Without max_tokens the server's default is cut to the room, and the answer says so.
    let r = server.post("/v1/completions", &json!({"model": TINY, "prompt": "hello", "temperature": 0, "stop": []}));
    assert_eq!(r.status, 200, "{r:?}");
    let tokens = r.body["usage"]["completion_tokens"].as_u64().unwrap();
    if r.body["choices"][0]["finish_reason"] == "length" {
        assert_eq!(tokens + r.body["usage"]["prompt_tokens"].as_u64().unwrap(), 64, "{r:?}");
    }
}

#[test]
fn a_bad_temperature_is_refused_naming_temperature() {
    let server = Server::start(&[]);
    let sample = |key: &str, value: Value| {
        let r = server.post("/v1/chat/completions", &json!({"model": TINY, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, key: value}));
        assert_eq!(r.status, 400, "{key} {value}: {r:?}");
        r.body["error"]["param"].as_str().map(str::to_string)
    };
    // 1e39 is past f32's range: read as infinity.
    assert_eq!(sample("temperature", json!(1e39)).as_deref(), Some("temperature"));
    assert_eq!(sample("temperature", json!(-0.5)).as_deref(), Some("temperature"));
    assert_eq!(sample("top_p", json!(1.5)).as_deref(), Some("top_p"));
}

#[test]
fn a_stop_closes_idle_and_half_sent_connections_at_once_and_exits_cleanly() {
    let mut server = Server::start(&["--header-timeout-ms", "30000"]);
    let mut kept = server.connect();
    kept.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    assert_eq!(read_reply(&mut kept).expect("a reply").status, 200);
    let _half_sent = slowloris(&server);
    std::thread::sleep(Duration::from_millis(200));
    let status = Command::new("kill").args(["-TERM", &server.child.id().to_string()]).status().unwrap();
    assert!(status.success());
    let stopped = Instant::now();
    loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            assert!(status.success(), "{status:?}");
            break;
        }
        assert!(stopped.elapsed() < Duration::from_secs(3), "still running with a kept-alive and a half-sent connection open");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_request_arriving_during_one_with_several_choices_is_served_between_two_of_them() {
    let server = Server::start(&[]);
    let server = &server;
    std::thread::scope(|scope| {
        let started = Instant::now();
        let many = scope.spawn(move || {
            let r = server.post("/v1/completions", &json!({"model": TINY, "prompt": "hi", "n": 6, "max_tokens": 64, "temperature": 1, "seed": 1}));
            assert_eq!(r.status, 200, "{r:?}");
            started.elapsed()
        });
        std::thread::sleep(Duration::from_millis(300));
        let r = server.post("/v1/completions", &completion(4));
        assert_eq!(r.status, 200, "{r:?}");
        let one = started.elapsed();
        let many = many.join().unwrap();
        assert!(one < many, "the short request ({one:?}) waited for all six choices ({many:?})");
    });
}
