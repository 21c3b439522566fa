//! The model's API, metered (issue 46): for a sandboxed `ralph run`, a small
//! HTTP/1.1 forwarding proxy on `127.0.0.1` of the host, in threads of this
//! process, is the agent's `ANTHROPIC_BASE_URL`. Each request goes on to the
//! real endpoint (ralph's own `ANTHROPIC_BASE_URL`, else Anthropic's) and its
//! answer streams back as it arrives, while the `usage` the API itself
//! reports is counted per model: the agent prints its own cost, but it does
//! not write the API's answers. When ralph holds `ANTHROPIC_API_KEY`, the
//! proxy adds it and the agent is given a placeholder instead
//! ([`PLACEHOLDER_PREFIX`]).
//!
//! The pure parts (usage out of a JSON body, out of an event stream) are
//! [`json_usage`] and [`SseTally`]; pricing is the core's
//! (`decide::pricing::price_metered`).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::Value;

use ralph_state::money::ModelTokens;

/// How the key the sandboxed agent holds begins, when ralph holds the real
/// one: a random word of this run's meter, which opens nothing but the
/// meter (another process on this machine, without it, is refused the
/// real key the meter adds).
pub(crate) const PLACEHOLDER_PREFIX: &str = "ralph-meter-placeholder-";

/// Where the API is when ralph's environment names none.
const ANTHROPIC: &str = "https://api.anthropic.com";
/// The most a request's head and body may hold.
const MAX_HEAD: usize = 64 * 1024;
const MAX_BODY: usize = 64 * 1024 * 1024;
/// The most of a JSON answer kept to read its usage (the whole answer still
/// streams to the client).
const MAX_JSON_KEPT: usize = 16 * 1024 * 1024;
/// The longest event-stream line kept (usage events are a few hundred bytes).
const MAX_LINE: usize = 1024 * 1024;
/// How long, once the agent has exited, its answers still in flight are
/// waited for (each is counted as far as it went).
const DRAIN: Duration = Duration::from_secs(30);

/// Tokens the API reported, one entry per message it answered.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Metered {
    pub messages: Vec<(String, ModelTokens)>,
    /// The API itself answered a rate or usage limit ([`says_limit`]): only
    /// then is an agent that reports one believed.
    pub limited: bool,
}

impl Metered {
    /// Per model, summed, for the price table.
    pub fn per_model(&self) -> Vec<(String, ModelTokens)> {
        let mut out: Vec<(String, ModelTokens)> = Vec::new();
        for (model, tokens) in &self.messages {
            match out.iter_mut().find(|(m, _)| m == model) {
                Some((_, sum)) => sum.add(tokens),
                None => out.push((model.clone(), *tokens)),
            }
        }
        out
    }
}

/// One `usage` object's tokens (a 1-hour cache write is priced apart).
pub fn tokens_of(usage: &Value) -> ModelTokens {
    let field = |k: &str| usage.get(k).and_then(Value::as_u64).unwrap_or(0);
    let written = field("cache_creation_input_tokens");
    let hour = usage
        .get("cache_creation")
        .and_then(|c| c.get("ephemeral_1h_input_tokens"))
        .and_then(Value::as_u64)
        .unwrap_or(0)
        .min(written);
    ModelTokens {
        input: field("input_tokens"),
        output: field("output_tokens"),
        cache_write: written - hour,
        cache_write_1h: hour,
        cache_read: field("cache_read_input_tokens"),
    }
}

/// Column by column, the larger: `message_delta`'s counts are the
/// message's totals so far, never an increment over `message_start`'s.
fn larger(a: ModelTokens, b: ModelTokens) -> ModelTokens {
    ModelTokens {
        input: a.input.max(b.input),
        output: a.output.max(b.output),
        cache_write: a.cache_write.max(b.cache_write),
        cache_write_1h: a.cache_write_1h.max(b.cache_write_1h),
        cache_read: a.cache_read.max(b.cache_read),
    }
}

/// Whether an answer is the API's rate or usage limit: HTTP 429, or an
/// error (a JSON body, a stream's `error` event) of type
/// `rate_limit_error` or `billing_error`, as Claude Code reads them.
pub(crate) fn says_limit(status: u16, error: Option<&Value>) -> bool {
    let kind = error
        .and_then(|e| e.get("error"))
        .and_then(|e| e.get("type"))
        .and_then(Value::as_str);
    status == 429 || matches!(kind, Some("rate_limit_error" | "billing_error"))
}

/// The usage of a whole JSON answer (a message, not streamed), and its
/// model (else `asked`, the request's); `None` when it reports none.
pub(crate) fn json_usage(body: &[u8], asked: &str) -> Option<(String, ModelTokens)> {
    let value: Value = serde_json::from_slice(body).ok()?;
    let usage = value.get("usage").filter(|u| u.is_object())?;
    let model = value.get("model").and_then(Value::as_str).unwrap_or(asked);
    Some((model.to_owned(), tokens_of(usage)))
}

/// The usage of an event stream, read as its bytes arrive: each
/// `message_start` opens a message (`message.usage`, `message.model`), each
/// `message_delta` raises its counts (`usage`).
#[derive(Debug, Default)]
pub(crate) struct SseTally {
    line: Vec<u8>,
    /// The line in hand grew past [`MAX_LINE`]: skipped to its end.
    skipping: bool,
    asked: String,
    messages: Vec<(String, ModelTokens)>,
    /// An `error` event said a rate or usage limit.
    limited: bool,
}

impl SseTally {
    /// A tally for an answer to a request that named `asked` as its model.
    pub(crate) fn new(asked: &str) -> Self {
        Self {
            asked: asked.to_owned(),
            ..Self::default()
        }
    }

    /// Reads the next bytes; whether a usage was counted in them.
    pub(crate) fn feed(&mut self, bytes: &[u8]) -> bool {
        let mut counted = false;
        for &byte in bytes {
            if byte == b'\n' {
                if !self.skipping {
                    let line = std::mem::take(&mut self.line);
                    counted |= self.event_line(&line);
                }
                self.line.clear();
                self.skipping = false;
            } else if self.line.len() >= MAX_LINE {
                self.skipping = true;
                self.line.clear();
            } else if !self.skipping {
                self.line.push(byte);
            }
        }
        counted
    }

    /// The messages counted so far.
    pub(crate) fn messages(&self) -> &[(String, ModelTokens)] {
        &self.messages
    }

    /// Whether an `error` event of the stream said a rate or usage limit.
    pub(crate) fn limited(&self) -> bool {
        self.limited
    }

    fn event_line(&mut self, line: &[u8]) -> bool {
        let Some(data) = line.strip_prefix(b"data:") else {
            return false;
        };
        let Ok(value) = serde_json::from_slice::<Value>(data) else {
            return false;
        };
        match value.get("type").and_then(Value::as_str) {
            Some("message_start") => {
                let message = value.get("message");
                let model = message
                    .and_then(|m| m.get("model"))
                    .and_then(Value::as_str)
                    .unwrap_or(&self.asked);
                let usage = message.and_then(|m| m.get("usage"));
                let tokens = usage.map(tokens_of).unwrap_or_default();
                self.messages.push((model.to_owned(), tokens));
                true
            }
            Some("error") => {
                self.limited |= says_limit(0, Some(&value));
                false
            }
            Some("message_delta") => {
                let Some(usage) = value.get("usage") else {
                    return false;
                };
                let tokens = tokens_of(usage);
                match self.messages.last_mut() {
                    Some((_, counted)) => *counted = larger(*counted, tokens),
                    // A delta with no start: counted as a message of its own.
                    None => self.messages.push((self.asked.clone(), tokens)),
                }
                true
            }
            _ => false,
        }
    }
}

/// The API ralph itself talks to: its `ANTHROPIC_BASE_URL`, else Anthropic's.
pub(crate) fn upstream_from_env() -> String {
    let named = std::env::var("ANTHROPIC_BASE_URL").unwrap_or_default();
    let base = if named.trim().is_empty() {
        ANTHROPIC
    } else {
        named.trim()
    };
    base.trim_end_matches('/').to_owned()
}

/// The key ralph holds (`ANTHROPIC_API_KEY`), if any.
pub(crate) fn key_from_env() -> Option<String> {
    std::env::var("ANTHROPIC_API_KEY")
        .ok()
        .filter(|k| !k.trim().is_empty())
}

/// What every connection shares: where to, the key, and the counts (one
/// list of messages per connection).
struct Shared {
    upstream: String,
    key: Option<String>,
    /// The placeholder the agent holds in the key's place (with a key only).
    placeholder: Option<String>,
    agent: ureq::Agent,
    counts: Mutex<Vec<Vec<(String, ModelTokens)>>>,
    connections: Mutex<Vec<JoinHandle<()>>>,
    /// Some answer was the API's rate or usage limit.
    limited: AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The running proxy: listening until [`Meter::finish`].
pub(crate) struct Meter {
    port: u16,
    shared: Arc<Shared>,
    stop: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
}

impl Meter {
    /// Listens on an ephemeral port of `127.0.0.1`, forwarding to
    /// `upstream` (a base URL), adding `key` when given.
    pub(crate) fn start(upstream: String, key: Option<String>) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .timeout_connect(Some(Duration::from_secs(30)))
            .user_agent(ureq::config::AutoHeaderValue::None)
            .build()
            .into();
        let placeholder = match key {
            Some(_) => Some(placeholder()?),
            None => None,
        };
        let shared = Arc::new(Shared {
            upstream,
            key,
            placeholder,
            agent,
            counts: Mutex::new(Vec::new()),
            connections: Mutex::new(Vec::new()),
            limited: AtomicBool::new(false),
        });
        let stop = Arc::new(AtomicBool::new(false));
        let accept = {
            let (shared, stop) = (Arc::clone(&shared), Arc::clone(&stop));
            std::thread::spawn(move || accept_loop(&listener, &shared, &stop))
        };
        Ok(Self {
            port,
            shared,
            stop,
            accept: Some(accept),
        })
    }

    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    /// The base URL the agent is given.
    pub(crate) fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The key the agent is given in place of ralph's, if ralph holds one.
    pub(crate) fn placeholder(&self) -> Option<&str> {
        self.shared.placeholder.as_deref()
    }

    /// Points the agent's process at the meter: its base URL, and the
    /// placeholder for the key ralph holds; its port, which the sandbox
    /// waits for before the agent starts (`sandbox/bwrap.rs`).
    pub(crate) fn point(&self, process: &mut std::process::Command) {
        process.env("ANTHROPIC_BASE_URL", self.base_url());
        process.env("RALPH_METER_PORT", self.port.to_string());
        if let Some(placeholder) = self.placeholder() {
            process.env("ANTHROPIC_API_KEY", placeholder);
        }
    }

    /// Stops listening, waits (at most [`DRAIN`]) for the answers still in
    /// flight, and gives what was counted.
    pub(crate) fn finish(mut self) -> Metered {
        self.stop_listening();
        let deadline = Instant::now() + DRAIN;
        loop {
            let running = {
                let mut connections = lock(&self.shared.connections);
                connections.retain(|c| !c.is_finished());
                connections.len()
            };
            if running == 0 || Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Metered {
            messages: lock(&self.shared.counts).concat(),
            limited: self.shared.limited.load(Ordering::SeqCst),
        }
    }

    fn stop_listening(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(accept) = self.accept.take() {
            // Wakes the accept loop so that it sees the flag.
            let _ = TcpStream::connect_timeout(
                &std::net::SocketAddr::from(([127, 0, 0, 1], self.port)),
                Duration::from_secs(1),
            );
            let _ = accept.join();
        }
    }
}

impl Drop for Meter {
    fn drop(&mut self) {
        self.stop_listening();
    }
}

/// A fresh placeholder: [`PLACEHOLDER_PREFIX`] and 128 random bits.
fn placeholder() -> std::io::Result<String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| std::io::Error::other(e.to_string()))?;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!("{PLACEHOLDER_PREFIX}{hex}"))
}

/// Whether a request may use the key ralph adds: it carries this meter's
/// placeholder (`x-api-key`, or `Authorization: Bearer`); any request when
/// ralph adds none.
pub(crate) fn admitted(headers: &[(String, String)], placeholder: Option<&str>) -> bool {
    let Some(placeholder) = placeholder else {
        return true;
    };
    headers.iter().any(|(name, value)| {
        let name = name.to_ascii_lowercase();
        (name == "x-api-key" && value == placeholder)
            || (name == "authorization" && value.strip_prefix("Bearer ") == Some(placeholder))
    })
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>, stop: &AtomicBool) {
    for stream in listener.incoming() {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let Ok(stream) = stream else { continue };
        let slot = {
            let mut counts = lock(&shared.counts);
            counts.push(Vec::new());
            counts.len() - 1
        };
        let for_thread = Arc::clone(shared);
        let handle = std::thread::spawn(move || {
            // A broken connection loses only its own answer; what it
            // counted before stays counted.
            let _ = serve(stream, &for_thread, slot);
        });
        lock(&shared.connections).push(handle);
    }
}

/// A request as the client sent it.
struct Request {
    method: String,
    target: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

/// Headers that belong to one connection, never forwarded either way
/// (and those the proxy sets itself).
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
    "content-length",
    "expect",
    "accept-encoding",
];

/// Whether a request header goes on to the API: not hop-by-hop, nor the
/// client's key when ralph adds its own.
pub fn forwarded(name: &str, adds_key: bool) -> bool {
    let name = name.to_ascii_lowercase();
    let the_clients_key = adds_key && matches!(name.as_str(), "x-api-key" | "authorization");
    !HOP_BY_HOP.contains(&name.as_str()) && !the_clients_key
}

/// Endpoints whose cost no answer reports as `usage` (a batch is paid for
/// when it runs, long after its answer; the legacy text completions report
/// none): refused, so the key ralph adds never buys what the meter cannot see.
pub(crate) fn unmetered_endpoint(target: &str) -> bool {
    let path = target
        .split(['?', '#'])
        .next()
        .unwrap_or(target)
        .to_ascii_lowercase();
    // A path written another way (`//v1/complete`, `/v1/%63omplete`,
    // `/x/../v1/complete`) is refused too: the client writes none such.
    let oblique = ["//", "/.", "%", "\\"].iter().any(|w| path.contains(w));
    oblique || path.starts_with("/v1/messages/batches") || path.starts_with("/v1/complete")
}

/// An answer of ralph's own, never the API's: `status` and Anthropic's error shape.
fn refuse(client: &mut TcpStream, status: &str, message: &str) -> std::io::Result<()> {
    let body =
        serde_json::json!({"type": "error", "error": {"type": "api_error", "message": message}})
            .to_string();
    let head = format!(
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    client.write_all(head.as_bytes())?;
    client.write_all(body.as_bytes())
}

fn serve(client: TcpStream, shared: &Shared, slot: usize) -> std::io::Result<()> {
    client.set_read_timeout(Some(Duration::from_secs(120)))?;
    let mut reader = BufReader::new(client.try_clone()?);
    let mut writer = client;
    let request = read_request(&mut reader, &mut writer)?;
    let asked = serde_json::from_slice::<Value>(&request.body)
        .ok()
        .and_then(|v| v.get("model").and_then(Value::as_str).map(str::to_owned))
        .unwrap_or_else(|| "(no model named)".to_owned());
    if !admitted(&request.headers, shared.placeholder.as_deref()) {
        return refuse(
            &mut writer,
            "401 Unauthorized",
            "ralph's meter answers only the agent it was started for",
        );
    }
    if unmetered_endpoint(&request.target) {
        return refuse(
            &mut writer,
            "403 Forbidden",
            "ralph's meter does not forward this endpoint: its cost is reported in no answer it could count",
        );
    }
    let head_only = request.method.eq_ignore_ascii_case("HEAD");
    let answer = match forward(shared, request) {
        Ok(answer) => answer,
        Err(e) => {
            let why = format!("ralph's meter could not reach the API: {e}");
            return refuse(&mut writer, "502 Bad Gateway", &why);
        }
    };
    if head_only {
        return relay_head(&answer, &mut writer);
    }
    relay(answer, &mut writer, shared, slot, &asked)
}

fn read_request(
    reader: &mut BufReader<TcpStream>,
    writer: &mut TcpStream,
) -> std::io::Result<Request> {
    let bad = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_owned());
    let mut head_bytes = 0usize;
    let mut next_line = |reader: &mut BufReader<TcpStream>| -> std::io::Result<String> {
        let mut line = String::new();
        let n = reader
            .by_ref()
            .take((MAX_HEAD - head_bytes.min(MAX_HEAD)) as u64)
            .read_line(&mut line)?;
        head_bytes += n;
        if n == 0 || !line.ends_with('\n') {
            return Err(bad("a request head cut short or too long"));
        }
        Ok(line.trim_end().to_owned())
    };
    let first = next_line(reader)?;
    let mut words = first.split_whitespace();
    let (Some(method), Some(target)) = (words.next(), words.next()) else {
        return Err(bad("no request line"));
    };
    if !target.starts_with('/') {
        return Err(bad("only a path may be asked for"));
    }
    let (method, target) = (method.to_owned(), target.to_owned());
    let mut headers = Vec::new();
    loop {
        let line = next_line(reader)?;
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            headers.push((name.trim().to_owned(), value.trim().to_owned()));
        }
    }
    let header = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    };
    if header("expect").is_some_and(|v| v.eq_ignore_ascii_case("100-continue")) {
        writer.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")?;
    }
    let body = if header("transfer-encoding")
        .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"))
    {
        read_chunked(reader)?
    } else {
        let length: usize = header("content-length")
            .map(|v| {
                v.parse()
                    .map_err(|_| bad("a content-length that is no number"))
            })
            .transpose()?
            .unwrap_or(0);
        if length > MAX_BODY {
            return Err(bad("a request body too large"));
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body)?;
        body
    };
    Ok(Request {
        method,
        target,
        headers,
        body,
    })
}

fn read_chunked(reader: &mut BufReader<TcpStream>) -> std::io::Result<Vec<u8>> {
    let bad = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_owned());
    let mut body = Vec::new();
    loop {
        let mut size_line = String::new();
        reader.by_ref().take(1024).read_line(&mut size_line)?;
        let hex = size_line.trim().split(';').next().unwrap_or("");
        let size =
            usize::from_str_radix(hex, 16).map_err(|_| bad("a chunk size that is no number"))?;
        if size == 0 {
            // Trailers, up to the empty line.
            loop {
                let mut line = String::new();
                if reader.by_ref().take(8192).read_line(&mut line)? == 0 || line.trim().is_empty() {
                    return Ok(body);
                }
            }
        }
        if body.len().saturating_add(size) > MAX_BODY {
            return Err(bad("a request body too large"));
        }
        let start = body.len();
        body.resize(start + size, 0);
        reader.read_exact(&mut body[start..])?;
        let mut crlf = String::new();
        reader.by_ref().take(8).read_line(&mut crlf)?;
    }
}

/// The request sent on to the API: the same method, path, headers (but
/// those of the connection, and the client's key when ralph adds its own)
/// and body; answers asked uncompressed, so their usage can be read.
fn forward(
    shared: &Shared,
    request: Request,
) -> Result<ureq::http::Response<ureq::Body>, ureq::Error> {
    let mut builder = ureq::http::Request::builder()
        .method(request.method.as_str())
        .uri(format!("{}{}", shared.upstream, request.target));
    for (name, value) in &request.headers {
        if forwarded(name, shared.key.is_some()) {
            builder = builder.header(name.as_str(), value.as_str());
        }
    }
    builder = builder.header("accept-encoding", "identity");
    if let Some(key) = &shared.key {
        builder = builder.header("x-api-key", key.as_str());
    }
    if request.body.is_empty() {
        shared.agent.run(builder.body(())?)
    } else {
        shared.agent.run(builder.body(request.body)?)
    }
}

/// The answer back to the client as it arrives (chunked, then the
/// connection closed), its usage counted on the way. A client that went
/// away does not stop the count: the rest is still read.
fn relay(
    answer: ureq::http::Response<ureq::Body>,
    client: &mut TcpStream,
    shared: &Shared,
    slot: usize,
    asked: &str,
) -> std::io::Result<()> {
    let (parts, body) = answer.into_parts();
    let head = status_and_headers(
        parts.status,
        &parts.headers,
        "transfer-encoding: chunked\r\n",
    );
    let kind = parts
        .headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    let streamed = kind.contains("text/event-stream");
    let mut tally = SseTally::new(asked);
    let mut kept = Vec::new();
    let mut client_here = client.write_all(head.as_bytes()).is_ok();
    let mut reader = body.into_reader();
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        let n = reader.read(&mut buffer)?;
        if n == 0 {
            break;
        }
        let bytes = &buffer[..n];
        if streamed {
            if tally.feed(bytes) {
                lock(&shared.counts)[slot] = tally.messages().to_vec();
            }
        } else if kept.len() + n <= MAX_JSON_KEPT {
            kept.extend_from_slice(bytes);
        }
        if client_here {
            client_here = write_chunk(client, bytes).is_ok();
        }
    }
    if !streamed && let Some(message) = json_usage(&kept, asked) {
        lock(&shared.counts)[slot] = vec![message];
    }
    let error = serde_json::from_slice::<Value>(&kept).ok();
    if tally.limited() || says_limit(parts.status.as_u16(), error.as_ref()) {
        shared.limited.store(true, Ordering::SeqCst);
    }
    if client_here {
        client.write_all(b"0\r\n\r\n")?;
        client.flush()?;
    }
    Ok(())
}

/// The answer's status line and headers (but the connection's own), then
/// `framing` and the close.
fn status_and_headers(
    status: ureq::http::StatusCode,
    headers: &ureq::http::HeaderMap,
    framing: &str,
) -> String {
    let mut head = format!(
        "HTTP/1.1 {} {}\r\n",
        status.as_u16(),
        status.canonical_reason().unwrap_or("")
    );
    for (name, value) in headers {
        if !HOP_BY_HOP.contains(&name.as_str()) {
            head.push_str(&format!(
                "{name}: {}\r\n",
                String::from_utf8_lossy(value.as_bytes())
            ));
        }
    }
    head.push_str(framing);
    head.push_str("connection: close\r\n\r\n");
    head
}

/// The answer to a `HEAD`: its head alone, no body.
fn relay_head(
    answer: &ureq::http::Response<ureq::Body>,
    client: &mut TcpStream,
) -> std::io::Result<()> {
    let head = status_and_headers(answer.status(), answer.headers(), "");
    client.write_all(head.as_bytes())?;
    client.flush()
}

fn write_chunk(client: &mut TcpStream, bytes: &[u8]) -> std::io::Result<()> {
    client.write_all(format!("{:x}\r\n", bytes.len()).as_bytes())?;
    client.write_all(bytes)?;
    client.write_all(b"\r\n")?;
    client.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(input: u64, output: u64, cache_write: u64, cache_read: u64) -> ModelTokens {
        ModelTokens {
            input,
            output,
            cache_write,
            cache_write_1h: 0,
            cache_read,
        }
    }

    #[test]
    fn a_json_answer_gives_its_usage_and_model() {
        let body = br#"{"type":"message","model":"claude-sonnet-4-5","usage":{"input_tokens":12,"output_tokens":30,"cache_creation_input_tokens":100,"cache_read_input_tokens":2000,"cache_creation":{"ephemeral_1h_input_tokens":40}}}"#;
        let (model, counted) = json_usage(body, "asked").unwrap();
        assert_eq!(model, "claude-sonnet-4-5");
        assert_eq!(
            counted,
            ModelTokens {
                input: 12,
                output: 30,
                cache_write: 60,
                cache_write_1h: 40,
                cache_read: 2000,
            }
        );
        assert_eq!(
            json_usage(br#"{"input_tokens":42}"#, "m"),
            None,
            "count_tokens"
        );
        assert_eq!(json_usage(b"not json", "m"), None);
        let unnamed = json_usage(br#"{"usage":{"output_tokens":3}}"#, "asked").unwrap();
        assert_eq!(unnamed, ("asked".to_owned(), tokens(0, 3, 0, 0)));
    }

    #[test]
    fn a_stream_counts_each_message_start_raised_by_its_deltas_in_any_cut() {
        let stream = "event: message_start\n\
            data: {\"type\":\"message_start\",\"message\":{\"model\":\"claude-opus-4-1\",\"usage\":{\"input_tokens\":10,\"output_tokens\":1,\"cache_creation_input_tokens\":5,\"cache_read_input_tokens\":700}}}\n\n\
            event: content_block_delta\n\
            data: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"usage: {\\\"output_tokens\\\": 1}\"}}\n\n\
            event: message_delta\n\
            data: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":40}}\n\n\
            event: message_delta\n\
            data: {\"type\":\"message_delta\",\"usage\":{\"input_tokens\":10,\"output_tokens\":55}}\n\n\
            event: message_start\n\
            data:{\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}}\n\n";
        let expected = vec![
            ("claude-opus-4-1".to_owned(), tokens(10, 55, 5, 700)),
            ("asked".to_owned(), tokens(3, 1, 0, 0)),
        ];
        let whole = {
            let mut t = SseTally::new("asked");
            assert!(t.feed(stream.as_bytes()));
            t.messages().to_vec()
        };
        assert_eq!(whole, expected);
        // Byte by byte, as a slow network hands it over: the same.
        let mut t = SseTally::new("asked");
        for b in stream.as_bytes() {
            t.feed(std::slice::from_ref(b));
        }
        assert_eq!(t.messages(), expected.as_slice());
    }

    #[test]
    fn a_limit_is_the_apis_429_or_its_rate_or_billing_error() {
        let error = |kind: &str| serde_json::json!({"type": "error", "error": {"type": kind}});
        assert!(says_limit(429, None));
        assert!(says_limit(400, Some(&error("billing_error"))));
        assert!(says_limit(200, Some(&error("rate_limit_error"))));
        assert!(!says_limit(529, Some(&error("overloaded_error"))));
        assert!(!says_limit(200, None));
        let mut t = SseTally::new("m");
        t.feed(
            b"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\"}}\n",
        );
        assert!(!t.limited());
        t.feed(
            b"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"rate_limit_error\"}}\n",
        );
        assert!(t.limited());
    }

    #[test]
    fn an_overlong_line_is_skipped_and_the_next_one_read() {
        let mut t = SseTally::new("m");
        t.feed(&vec![b'x'; MAX_LINE + 10]);
        t.feed(b"\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":7}}\n");
        assert_eq!(t.messages(), [("m".to_owned(), tokens(0, 7, 0, 0))]);
    }

    #[test]
    fn usage_is_summed_per_model() {
        let metered = Metered {
            limited: false,
            messages: vec![
                ("a".into(), tokens(1, 2, 3, 4)),
                ("b".into(), tokens(1, 1, 1, 1)),
                ("a".into(), tokens(10, 20, 30, 40)),
            ],
        };
        assert_eq!(
            metered.per_model(),
            [
                ("a".to_owned(), tokens(11, 22, 33, 44)),
                ("b".to_owned(), tokens(1, 1, 1, 1))
            ]
        );
    }

    #[test]
    fn the_clients_key_and_the_connections_headers_stay_behind() {
        assert!(forwarded("anthropic-version", true));
        assert!(
            forwarded("X-Api-Key", false),
            "OAuth or the client's own key"
        );
        assert!(!forwarded("X-Api-Key", true));
        assert!(!forwarded("Authorization", true));
        assert!(!forwarded("Connection", false));
        assert!(!forwarded("Host", false));
        assert!(!forwarded("accept-encoding", false));
    }

    #[test]
    fn only_the_agent_holding_this_meters_placeholder_is_given_the_key() {
        let h = |name: &str, value: &str| vec![(name.to_owned(), value.to_owned())];
        assert!(admitted(&h("X-Api-Key", "ph-1"), Some("ph-1")));
        assert!(admitted(&h("authorization", "Bearer ph-1"), Some("ph-1")));
        assert!(!admitted(&h("x-api-key", "ph-2"), Some("ph-1")));
        assert!(
            !admitted(&[], Some("ph-1")),
            "another process on this machine"
        );
        assert!(
            admitted(&[], None),
            "no key added: the client's own credentials"
        );
        assert_ne!(placeholder().unwrap(), placeholder().unwrap());
    }

    #[test]
    fn endpoints_whose_cost_no_answer_reports_are_refused() {
        assert!(unmetered_endpoint("/v1/messages/batches"));
        assert!(unmetered_endpoint("/v1/messages/batches/b1/results?x=1"));
        assert!(unmetered_endpoint("/v1/complete"));
        assert!(unmetered_endpoint("//v1/complete"));
        assert!(unmetered_endpoint("/V1/%63omplete"));
        assert!(unmetered_endpoint("/x/../v1/complete"));
        assert!(!unmetered_endpoint("/v1/messages?beta=true"));
        assert!(!unmetered_endpoint("/v1/messages/count_tokens"));
        assert!(!unmetered_endpoint("/v1/models"));
    }

    /// An upstream that sends its answer's head and `message_start`, then waits for the
    /// client to have read that through the meter before it sends the rest: a meter that
    /// held the stream back would never let the test go on (the read times out, it fails).
    #[test]
    fn the_meter_streams_each_event_as_it_comes_and_sends_ralphs_key() {
        let upstream = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", upstream.local_addr().unwrap());
        let (go_on, wait) = std::sync::mpsc::channel::<()>();
        let server = std::thread::spawn(move || {
            let (stream, _) = upstream.accept().unwrap();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut head = String::new();
            loop {
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                if line.trim().is_empty() {
                    break;
                }
                head.push_str(&line);
            }
            let mut out = stream;
            let start = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"claude-haiku-4-5\",\"usage\":{\"input_tokens\":7,\"output_tokens\":1}}}\n\n";
            let rest = "event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":9}}\n\n";
            out.write_all(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n",
            )
            .unwrap();
            out.write_all(start.as_bytes()).unwrap();
            out.flush().unwrap();
            wait.recv().unwrap();
            out.write_all(rest.as_bytes()).unwrap();
            head
        });
        let meter = Meter::start(url, Some("sk-real".to_owned())).unwrap();
        let placeholder = meter.placeholder().unwrap().to_owned();
        assert!(placeholder.starts_with(PLACEHOLDER_PREFIX) && placeholder.len() > 40);
        let mut client = TcpStream::connect(("127.0.0.1", meter.port())).unwrap();
        client
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        let body = r#"{"model":"claude-haiku-4-5","stream":true}"#;
        write!(
            client,
            "POST /v1/messages HTTP/1.1\r\nhost: x\r\nx-api-key: {placeholder}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut seen = Vec::new();
        let mut buffer = [0u8; 4096];
        while !String::from_utf8_lossy(&seen).contains("message_start") {
            let n = client
                .read(&mut buffer)
                .expect("the first event, before the rest was sent");
            assert!(n > 0, "closed early: {}", String::from_utf8_lossy(&seen));
            seen.extend_from_slice(&buffer[..n]);
        }
        go_on.send(()).unwrap();
        client.read_to_end(&mut seen).unwrap();
        let seen = String::from_utf8_lossy(&seen);
        assert!(seen.starts_with("HTTP/1.1 200 OK\r\n"), "{seen}");
        assert!(
            seen.contains("message_delta") && seen.ends_with("0\r\n\r\n"),
            "{seen}"
        );
        let head = server.join().unwrap().to_ascii_lowercase();
        assert!(
            head.contains("x-api-key: sk-real") && !head.contains(PLACEHOLDER_PREFIX),
            "{head}"
        );
        assert!(head.contains("accept-encoding: identity"), "{head}");
        assert_eq!(
            meter.finish().messages,
            [("claude-haiku-4-5".to_owned(), tokens(7, 9, 0, 0))]
        );
    }
}
