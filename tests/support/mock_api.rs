//! A tiny scripted mock of the Anthropic Messages API, std only.
//!
//! HTTP/1.1 on `127.0.0.1:<random port>`, one thread per connection, `Connection: close`.
//! `POST /v1/messages` is answered with an SSE stream (docs/claude-code-notes.md and the
//! protocol notes describe the event sequence). Every request is logged so a test can count
//! the model turns and read what the Stop hook fed back.
//!
//! Requests are classified: a *model turn* is a `POST /v1/messages` whose body carries a
//! non-empty `tools` array (the agent loop always sends its tools). Anything else (token
//! counts, model lists, a title or quota request without tools) is a side request: it is
//! logged and answered, but it never consumes a scripted reply and is not counted.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use serde_json::{Value, json};

/// One scripted reply of the model.
#[derive(Clone, Debug)]
pub(crate) enum Reply {
    /// A reply of one text block that ends the turn (`stop_reason: end_turn`).
    Text(String),
    /// A text block, then a `Bash` tool call (`stop_reason: tool_use`).
    TextAndBash { text: String, command: String },
    /// A text block, then a call of tool `name` with `input` (`stop_reason: tool_use`).
    TextAndTool {
        text: String,
        name: String,
        input: Value,
    },
    /// HTTP 429 with Anthropic's error JSON and its reset headers (`retry-after`,
    /// `anthropic-ratelimit-requests-reset`), as the API answers a rate-limited request.
    RateLimited,
}

impl Reply {
    pub(crate) fn text(s: impl Into<String>) -> Self {
        Reply::Text(s.into())
    }
    pub(crate) fn bash(text: impl Into<String>, command: impl Into<String>) -> Self {
        Reply::TextAndBash {
            text: text.into(),
            command: command.into(),
        }
    }
    pub(crate) fn tool(text: impl Into<String>, name: impl Into<String>, input: Value) -> Self {
        Reply::TextAndTool {
            text: text.into(),
            name: name.into(),
            input,
        }
    }

    /// A `Write` tool call: the model asks to create `file_path` with `content`.
    pub(crate) fn write(text: impl Into<String>, file_path: &str, content: &str) -> Self {
        Reply::TextAndTool {
            text: text.into(),
            name: "Write".into(),
            input: json!({"file_path": file_path, "content": content}),
        }
    }
}

/// One logged HTTP request.
#[derive(Clone, Debug)]
pub(crate) struct LoggedRequest {
    pub method: String,
    pub path: String,
    /// The body parsed as JSON (`Value::Null` when empty or not JSON).
    pub body: Value,
    /// Whether this request is a model turn (see the module docs).
    pub is_turn: bool,
    /// Its `x-api-key` header, as the mock received it.
    pub api_key: Option<String>,
    /// The content of the watched file when the request arrived (`None`: no file watched,
    /// or it did not exist).
    pub watched_file: Option<String>,
}

impl LoggedRequest {
    /// All text of the request's `messages` (text blocks and tool results), joined by
    /// newlines: what the model was shown.
    pub(crate) fn messages_text(&self) -> String {
        let mut out = String::new();
        if let Some(messages) = self.body.get("messages").and_then(Value::as_array) {
            for m in messages {
                collect_text(m.get("content").unwrap_or(&Value::Null), &mut out);
            }
        }
        out
    }

    /// The text of the last `role: user` message: on a Stop-hook continuation, the
    /// feedback the hook sent.
    pub(crate) fn last_user_text(&self) -> String {
        let mut out = String::new();
        if let Some(m) = self
            .body
            .get("messages")
            .and_then(Value::as_array)
            .and_then(|messages| messages.iter().rev().find(|m| m["role"] == "user"))
        {
            collect_text(m.get("content").unwrap_or(&Value::Null), &mut out);
        }
        out
    }

    pub(crate) fn model(&self) -> &str {
        self.body.get("model").and_then(Value::as_str).unwrap_or("")
    }
}

fn collect_text(content: &Value, out: &mut String) {
    match content {
        Value::String(s) => {
            out.push_str(s);
            out.push('\n');
        }
        Value::Array(items) => {
            for item in items {
                if let Some(t) = item.get("text").and_then(Value::as_str) {
                    out.push_str(t);
                    out.push('\n');
                } else if let Some(c) = item.get("content") {
                    collect_text(c, out);
                }
            }
        }
        _ => {}
    }
}

#[derive(Default)]
struct Shared {
    script: Vec<Reply>,
    turns: usize,
    log: Vec<LoggedRequest>,
    watch: Option<PathBuf>,
    /// A turn whose request does not hold this text anywhere gets this reply instead of the
    /// script's next one (another conversation than the scripted one, e.g. a `ralph run`'s).
    without: Option<(String, Reply)>,
    /// Tokens each reply says were read from the cache (`cache_read_input_tokens`): how
    /// large a context the mock claims every request sent.
    cache_read: u64,
}

/// The running mock. Dropping it stops the server.
pub(crate) struct MockApi {
    addr: SocketAddr,
    shared: Arc<Mutex<Shared>>,
    stop: Arc<AtomicBool>,
    accept_thread: Option<JoinHandle<()>>,
}

impl MockApi {
    /// Starts a mock that answers the n-th model turn with `script[n]`; once the script is
    /// used up, the last reply is repeated (an empty script answers "ok").
    pub(crate) fn start(script: Vec<Reply>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the mock API");
        let addr = listener.local_addr().expect("mock address");
        let shared = Arc::new(Mutex::new(Shared {
            script,
            ..Shared::default()
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let accept_thread = {
            let shared = Arc::clone(&shared);
            let stop = Arc::clone(&stop);
            thread::spawn(move || {
                for stream in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(stream) = stream else { continue };
                    let shared = Arc::clone(&shared);
                    thread::spawn(move || {
                        // A broken connection only loses that request; the test notices.
                        let _ = serve(stream, &shared);
                    });
                }
            })
        };
        MockApi {
            addr,
            shared,
            stop,
            accept_thread: Some(accept_thread),
        }
    }

    /// The base URL for `ANTHROPIC_BASE_URL`.
    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Answers `reply` to every model turn whose request does not hold `text` (say, the first
    /// message of the scripted conversation); the others follow the script.
    pub(crate) fn answer_without(&self, text: &str, reply: Reply) {
        lock(&self.shared).without = Some((text.to_owned(), reply));
    }

    /// Answers every model turn from now on with `reply`.
    pub(crate) fn answer_from_now(&self, reply: Reply) {
        let mut shared = lock(&self.shared);
        shared.script = vec![reply];
        shared.turns = 0;
    }

    /// Every reply from now on reports a request of `tokens` context (10 input, the rest
    /// read from the cache), as a long session's would.
    pub(crate) fn report_context(&self, tokens: u64) {
        lock(&self.shared).cache_read = tokens.saturating_sub(10);
    }

    /// Records the content of `path` with every request from now on.
    pub(crate) fn watch_file(&self, path: impl Into<PathBuf>) {
        lock(&self.shared).watch = Some(path.into());
    }

    /// Every request so far, in arrival order.
    pub(crate) fn requests(&self) -> Vec<LoggedRequest> {
        lock(&self.shared).log.clone()
    }

    /// The model turns so far, in order.
    pub(crate) fn turns(&self) -> Vec<LoggedRequest> {
        self.requests().into_iter().filter(|r| r.is_turn).collect()
    }

    /// A short listing of all requests, for assertion messages.
    pub(crate) fn describe(&self) -> String {
        let mut out = String::new();
        for (i, r) in self.requests().iter().enumerate() {
            let last = r.last_user_text();
            let last: String = last
                .chars()
                .rev()
                .take(300)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            out.push_str(&format!(
                "#{i} {} {} turn={} model={} last user text: …{last:?}\n",
                r.method,
                r.path,
                r.is_turn,
                r.model()
            ));
        }
        out
    }
}

impl Drop for MockApi {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so that it sees the flag.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(t) = self.accept_thread.take() {
            let _ = t.join();
        }
    }
}

fn lock(shared: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    shared
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn serve(stream: TcpStream, shared: &Mutex<Shared>) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut request_line = String::new();
    if reader.read_line(&mut request_line)? == 0 {
        return Ok(()); // the wake-up connection of Drop, or a probe
    }
    let mut parts = request_line.split_whitespace();
    let method = parts.next().unwrap_or("").to_string();
    let target = parts.next().unwrap_or("").to_string();
    let path = target.split('?').next().unwrap_or("").to_string();

    let mut content_length = 0usize;
    let mut chunked = false;
    let mut api_key = None;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            break;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            let (name, value) = (name.trim().to_ascii_lowercase(), value.trim());
            if name == "content-length" {
                content_length = value.parse().unwrap_or(0);
            } else if name == "transfer-encoding" && value.eq_ignore_ascii_case("chunked") {
                chunked = true;
            } else if name == "x-api-key" {
                api_key = Some(value.to_owned());
            }
        }
    }
    let body = if chunked {
        read_chunked(&mut reader)?
    } else {
        read_exact_vec(&mut reader, content_length)?
    };
    let json_body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);

    let is_messages = method == "POST" && path == "/v1/messages";
    let is_turn = is_messages
        && json_body
            .get("tools")
            .and_then(Value::as_array)
            .is_some_and(|t| !t.is_empty());

    let reply = {
        let mut s = lock(shared);
        let watched_file = s
            .watch
            .as_ref()
            .and_then(|p| std::fs::read_to_string(p).ok());
        s.log.push(LoggedRequest {
            method: method.clone(),
            path: path.clone(),
            body: json_body.clone(),
            is_turn,
            api_key,
            watched_file,
        });
        let other = s
            .without
            .as_ref()
            .filter(|(text, _)| is_turn && !json_body.to_string().contains(text.as_str()))
            .map(|(_, reply)| reply.clone());
        if let Some(reply) = other {
            reply
        } else if is_turn {
            let n = s.turns;
            s.turns += 1;
            s.script
                .get(n)
                .or(s.script.last())
                .cloned()
                .unwrap_or_else(|| Reply::text("ok"))
        } else {
            // A side request (title, summary, …) gets a short neutral answer.
            Reply::text("Side reply")
        }
    };

    let mut stream = stream;
    if is_messages && matches!(reply, Reply::RateLimited) {
        let body = json!({"type": "error", "error": {"type": "rate_limit_error",
            "message": "Number of request tokens has exceeded your per-minute rate limit"}});
        let body = body.to_string();
        let head = format!(
            "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
             request-id: req_mock\r\nretry-after: 37\r\n\
             anthropic-ratelimit-requests-reset: 2030-01-01T00:00:00Z\r\nConnection: close\r\n\r\n",
            body.len()
        );
        stream.write_all(head.as_bytes())?;
        stream.write_all(body.as_bytes())?;
        stream.flush()
    } else if is_messages {
        let model = json_body
            .get("model")
            .and_then(Value::as_str)
            .unwrap_or("claude-mock");
        let (n, cache_read) = {
            let shared = lock(shared);
            (shared.log.len(), shared.cache_read)
        };
        let sse = sse_stream(&reply, model, n, cache_read);
        write_response(&mut stream, "200 OK", "text/event-stream", sse.as_bytes())
    } else if method == "POST" && path == "/v1/messages/count_tokens" {
        write_response(
            &mut stream,
            "200 OK",
            "application/json",
            br#"{"input_tokens":42}"#,
        )
    } else if method == "GET" && path.starts_with("/v1/models") {
        let body = json!({
            "data": [{"type": "model", "id": "claude-mock", "display_name": "Mock", "created_at": "2025-01-01T00:00:00Z"}],
            "has_more": false, "first_id": "claude-mock", "last_id": "claude-mock"
        });
        write_response(
            &mut stream,
            "200 OK",
            "application/json",
            body.to_string().as_bytes(),
        )
    } else if method == "HEAD" {
        write_response(&mut stream, "200 OK", "text/plain", b"")
    } else {
        // Anything else (telemetry, quota, …): a harmless empty JSON object.
        write_response(&mut stream, "200 OK", "application/json", b"{}")
    }
}

fn read_exact_vec(reader: &mut impl Read, len: usize) -> std::io::Result<Vec<u8>> {
    let mut body = vec![0; len];
    reader.read_exact(&mut body)?;
    Ok(body)
}

fn read_chunked(reader: &mut impl BufRead) -> std::io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let mut size_line = String::new();
        reader.read_line(&mut size_line)?;
        let size_hex = size_line.trim().split(';').next().unwrap_or("0");
        let size = usize::from_str_radix(size_hex, 16).unwrap_or(0);
        if size == 0 {
            // Trailers until the empty line.
            loop {
                let mut l = String::new();
                if reader.read_line(&mut l)? == 0 || l.trim().is_empty() {
                    return Ok(body);
                }
            }
        }
        body.extend(read_exact_vec(reader, size)?);
        let mut crlf = String::new();
        reader.read_line(&mut crlf)?;
    }
}

fn write_response(
    stream: &mut TcpStream,
    status: &str,
    content_type: &str,
    body: &[u8],
) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         request-id: req_mock\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(body)?;
    stream.flush()
}

fn event(out: &mut String, name: &str, data: Value) {
    out.push_str(&format!("event: {name}\ndata: {data}\n\n"));
}

/// The SSE stream of one reply, as the Messages API sends it.
fn sse_stream(reply: &Reply, model: &str, n: usize, cache_read: u64) -> String {
    let (text, tool) = match reply {
        Reply::Text(t) => (t.as_str(), None),
        Reply::TextAndBash { text, command } => (
            text.as_str(),
            Some((
                "Bash",
                json!({"command": command, "description": "Run a command"}),
            )),
        ),
        Reply::TextAndTool { text, name, input } => {
            (text.as_str(), Some((name.as_str(), input.clone())))
        }
        // Answered with an HTTP error before any stream (see `serve`).
        Reply::RateLimited => ("", None),
    };
    let mut out = String::new();
    event(
        &mut out,
        "message_start",
        json!({
            "type": "message_start",
            "message": {
                "id": format!("msg_mock_{n}"), "type": "message", "role": "assistant", "model": model,
                "content": [], "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": 10, "output_tokens": 1,
                          "cache_creation_input_tokens": 0, "cache_read_input_tokens": cache_read}
            }
        }),
    );
    event(
        &mut out,
        "content_block_start",
        json!({
            "type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}
        }),
    );
    event(
        &mut out,
        "content_block_delta",
        json!({
            "type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}
        }),
    );
    event(
        &mut out,
        "content_block_stop",
        json!({"type": "content_block_stop", "index": 0}),
    );
    let uses_tool = tool.is_some();
    if let Some((name, input)) = tool {
        let input = input.to_string();
        event(
            &mut out,
            "content_block_start",
            json!({
                "type": "content_block_start", "index": 1,
                "content_block": {"type": "tool_use", "id": format!("toolu_mock_{n}"), "name": name, "input": {}}
            }),
        );
        event(
            &mut out,
            "content_block_delta",
            json!({
                "type": "content_block_delta", "index": 1,
                "delta": {"type": "input_json_delta", "partial_json": input}
            }),
        );
        event(
            &mut out,
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 1}),
        );
    }
    let stop_reason = if uses_tool { "tool_use" } else { "end_turn" };
    event(
        &mut out,
        "message_delta",
        json!({
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": null},
            "usage": {"output_tokens": 5}
        }),
    );
    event(&mut out, "message_stop", json!({"type": "message_stop"}));
    out
}
