//! A scripted model for the Codex and Copilot clients, std only: HTTP/1.1 on
//! `127.0.0.1:<random port>`, one thread per connection, `Connection: close`.
//!
//! - `Wire::Responses` (Codex): `POST /v1/responses` answered with the
//!   Responses API's server-sent events `response.created`,
//!   `response.output_item.done` (one assistant message) and
//!   `response.completed` (with usage).
//! - `Wire::ChatCompletions` (Copilot): `POST /v1/chat/completions` answered
//!   with streamed `chat.completion.chunk`s and `data: [DONE]`.
//!
//! Every POST to that path is a model turn: it takes the next scripted text
//! (the last one repeats) and its JSON body is logged.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use serde_json::{Value, json};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wire {
    Responses,
    ChatCompletions,
}

#[derive(Default)]
struct Shared {
    script: Vec<String>,
    turns: Vec<Value>,
}

pub(crate) struct ScriptedModel {
    addr: SocketAddr,
    shared: Arc<Mutex<Shared>>,
}

impl ScriptedModel {
    pub(crate) fn start(wire: Wire, script: &[&str]) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the scripted model");
        let addr = listener.local_addr().expect("model address");
        let shared = Arc::new(Mutex::new(Shared {
            script: script.iter().map(|s| (*s).to_owned()).collect(),
            turns: Vec::new(),
        }));
        let accept = Arc::clone(&shared);
        // The listener lives as long as the test process; each test has its own port.
        thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let shared = Arc::clone(&accept);
                thread::spawn(move || {
                    let _ = serve(stream, wire, &shared);
                });
            }
        });
        Self { addr, shared }
    }

    /// The provider base URL, `http://127.0.0.1:PORT/v1`.
    pub(crate) fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The request bodies of the model turns, in order.
    pub(crate) fn turns(&self) -> Vec<Value> {
        self.shared
            .lock()
            .map(|s| s.turns.clone())
            .unwrap_or_default()
    }
}

/// The text of the last user message of a turn's request, in either wire
/// format: what the hook fed back on a continuation.
pub(crate) fn last_user_text(body: &Value) -> String {
    let items = body
        .get("input")
        .or_else(|| body.get("messages"))
        .and_then(Value::as_array);
    let Some(last) = items.and_then(|i| i.iter().rev().find(|m| m["role"] == "user")) else {
        return String::new();
    };
    match &last["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

fn serve(stream: TcpStream, wire: Wire, shared: &Mutex<Shared>) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(60)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 || line == "\r\n" || line == "\n" {
            break;
        }
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body)?;
    let mut parts = request_line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let endpoint = match wire {
        Wire::Responses => "/v1/responses",
        Wire::ChatCompletions => "/v1/chat/completions",
    };
    let mut stream = stream;
    if method != "POST" || path != endpoint {
        return stream.write_all(
            b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        );
    }
    let text = {
        let mut s = shared.lock().expect("model state");
        let n = s.turns.len();
        s.turns
            .push(serde_json::from_slice(&body).unwrap_or(Value::Null));
        s.script
            .get(n)
            .or(s.script.last())
            .cloned()
            .unwrap_or_else(|| "ok".to_owned())
    };
    let events = match wire {
        Wire::Responses => responses_events(&text),
        Wire::ChatCompletions => chat_events(&text),
    };
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        events.len()
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(events.as_bytes())?;
    stream.flush()
}

fn responses_events(text: &str) -> String {
    let id = format!("resp_{}", text.len());
    let events = [
        json!({"type": "response.created", "response": {"id": id}}),
        json!({"type": "response.output_item.done", "item": {
            "type": "message", "role": "assistant", "id": format!("msg_{id}"),
            "content": [{"type": "output_text", "text": text}]}}),
        json!({"type": "response.completed", "response": {"id": id, "usage": {
            "input_tokens": 10, "input_tokens_details": null, "output_tokens": 5,
            "output_tokens_details": null, "total_tokens": 15}}}),
    ];
    events
        .iter()
        .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap_or("")))
        .collect()
}

fn chat_events(text: &str) -> String {
    let chunk = |delta: Value, finish: Value| {
        json!({"id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": 1,
               "model": "mock", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    };
    let mut last = chunk(json!({}), json!("stop"));
    last["usage"] = json!({"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15});
    [
        chunk(json!({"role": "assistant", "content": text}), Value::Null),
        last,
    ]
    .iter()
    .map(|c| format!("data: {c}\n\n"))
    .chain(std::iter::once("data: [DONE]\n\n".to_owned()))
    .collect()
}
