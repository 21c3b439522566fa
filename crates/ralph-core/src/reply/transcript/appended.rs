//! The forward reader: what was appended to the transcript since an offset
//! (tokens, tool use, proven edits, whether this turn's reply has landed).
//! The cost of a stop follows the size of the last turn, never of the whole
//! session.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::Path;

use serde::Deserialize;
use serde::de::IgnoredAny;

use super::backward::open;
use super::backward::{BLOCK, BackwardLines};
use super::lenient;
use super::queue::{self, Queue};
use ralph_state::money::ModelTokens;
use ralph_state::time::Timestamp;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Appended {
    /// Where the next scan starts: just past the last complete line.
    pub end_offset: u64,
    /// Tokens of assistant messages not counted before (input, cache
    /// creation and output; cache reads are not counted).
    pub tokens: u64,
    /// Whether an assistant line in the new part called a tool; `None` when
    /// the new part holds no assistant line (the transcript lags).
    pub ran_tool: Option<bool>,
    /// The last assistant message id seen, so it is not counted twice.
    pub last_message_id: Option<String>,
    /// The largest single assistant message counted in this scan (tokens).
    pub largest_reply: u64,
    /// Replies in the new part that ended a turn (main chain, stopped for
    /// another reason than a tool call): one per stop once the transcript
    /// has caught up, none while it lags.
    pub turn_ends: u64,
    /// The transcript does not hold the reply that ended the turn yet: its
    /// last conversation line is a user line or a tool call (the client
    /// writes the transcript after the Stop hook may already run).
    pub reply_missing: bool,
    /// Whether the new part proves a file edit: a call of one of
    /// [`EDIT_TOOLS`] and, also in the new part, its result, not an error.
    /// A call whose result has not landed yet proves nothing.
    pub edit_proven: bool,
    /// The text of the last assistant text block in the new part (main
    /// chain): compared with the reply the Stop event carries, it tells
    /// whether the transcript holds this turn's reply or an older one.
    pub last_text: Option<String>,
    /// Whether any line in the new part, on any chain, called a tool,
    /// carried a tool's result, or stopped for a tool call: `false` means
    /// the agent ran nothing since the last stop (what it says is all it did).
    pub tool_seen: bool,
    /// The tokens counted in this scan, per model and kind (what the dollar
    /// budget prices), in the order the models first came.
    pub per_model: Vec<(String, ModelTokens)>,
    /// The last `/goal` status in the new part: `Some(true)` a goal is
    /// set and not met (its own Stop hook drives the session), `Some(false)`
    /// met; `None`: the new part says nothing about a goal.
    pub goal_active: Option<bool>,
    /// The largest single assistant message counted in this scan, with its
    /// model: what a reply the transcript lacks is priced at.
    pub largest_message: Option<(String, ModelTokens)>,
    /// Messages the user's queue lines in the new part leave waiting
    /// (`queue.rs`): more than 0, the turn should end so that they run.
    pub queued: u64,
    /// The context the last main-chain request in the new part sent (its
    /// `usage`: input + cache creation + cache read), or what a compaction
    /// after it left (`postTokens`); `None` when the new part tells neither
    /// (no usage, or a compaction that did not say).
    pub context: Option<u64>,
    /// Compactions in the new part (`compact_boundary` lines), in order.
    pub compactions: Vec<Compaction>,
}

/// A compaction the transcript records (`{"type":"system","subtype":
/// "compact_boundary","compactMetadata":{"trigger":…,"preTokens":…}}`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compaction {
    /// `manual` (`/compact`) or `auto`.
    pub trigger: Option<String>,
    /// The context before it, when the client said.
    pub pre_tokens: Option<u64>,
    /// The context after it, when the client said.
    pub post_tokens: Option<u64>,
}

impl Appended {
    /// Whether the transcript does not hold the reply that ended the turn:
    /// by its own lines ([`Appended::reply_missing`]), or because its last
    /// text is not the reply the Stop event carries (the transcript can lag
    /// by more than one reply on a loaded machine, and then its last line is
    /// an older reply).
    pub(crate) fn lacks_reply(&self, reply: Option<&str>) -> bool {
        self.reply_missing
            || reply.is_some_and(|reply| {
                let reply = reply.trim();
                !reply.is_empty()
                    && self
                        .last_text
                        .as_deref()
                        .is_some_and(|last| !reply.ends_with(last.trim()))
            })
    }
}

/// Claude Code's tools that change files and nothing else.
pub(crate) const EDIT_TOOLS: &[&str] = &["Edit", "Write", "MultiEdit", "NotebookEdit"];

/// The most one scan reads: a single turn never appends this much. A scan
/// reads at most this far back from the end of the transcript, in blocks,
/// so a stop's time is bounded by it (and its memory by [`MAX_LINE`]).
const MAX_APPENDED: u64 = 64 * 1024 * 1024;

/// Lines up to this long are read whole, then parsed; a longer one is
/// parsed as it is read, keeping none of its strings but the short fields
/// (its text blocks are not kept: see [`Scan::line`]).
const MAX_LINE: usize = 256 * 1024;

/// One transcript line, with only what the scan uses. The content is read
/// into [`Block`]s (never into a `serde_json::Value`) and every other field
/// is skipped as it is parsed, so a large tool result costs no memory.
#[derive(Deserialize)]
struct UsageLine<T> {
    #[serde(rename = "type")]
    kind: Option<String>,
    #[serde(rename = "isSidechain", default)]
    is_sidechain: bool,
    timestamp: Option<String>,
    message: Option<UsageMessage<T>>,
    /// Claude Code's attachments; only a `goal_status` one is read.
    attachment: Option<AttachmentHead>,
    /// A `queue-operation` line's `enqueue`, `dequeue`, `remove` or `popAll`.
    operation: Option<String>,
    /// A `system` line's kind: `compact_boundary` marks a compaction.
    subtype: Option<String>,
    #[serde(rename = "compactMetadata")]
    compact_metadata: Option<CompactMetadata>,
}

#[derive(Deserialize)]
struct CompactMetadata {
    trigger: Option<String>,
    #[serde(rename = "preTokens")]
    pre_tokens: Option<u64>,
    #[serde(rename = "postTokens")]
    post_tokens: Option<u64>,
}

/// `{"type":"goal_status","met":false,"condition":"…"}`: Claude Code 2.1.328
/// writes it when `/goal` sets a goal (a session-scoped Stop hook of its own).
#[derive(Deserialize)]
struct AttachmentHead {
    #[serde(rename = "type")]
    kind: Option<String>,
    met: Option<bool>,
}

#[derive(Deserialize)]
struct UsageMessage<T> {
    id: Option<String>,
    #[serde(default = "lenient::Content::none")]
    content: lenient::Content<T>,
    stop_reason: Option<String>,
    usage: Option<Usage>,
    model: Option<String>,
}

#[derive(Deserialize, Default, Clone, Copy)]
struct Usage {
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    output_tokens: u64,
    #[serde(default)]
    cache_creation_input_tokens: u64,
    #[serde(default)]
    cache_read_input_tokens: u64,
    /// The split of the cache writes by lifetime, when the API gives it.
    cache_creation: Option<CacheCreation>,
}

#[derive(Deserialize, Default, Clone, Copy)]
struct CacheCreation {
    #[serde(default)]
    ephemeral_1h_input_tokens: u64,
}

/// Reads only the part of the transcript after `offset` (the cost of a stop
/// follows the size of the last turn, never of the whole session). An offset
/// of 0 means "first look": the current end becomes the baseline and nothing
/// is counted, so a long session's past is never read.
pub fn scan_appended(
    path: &Path,
    offset: u64,
    last_message_id: Option<&str>,
) -> std::io::Result<Appended> {
    let mut file = open(path)?;
    let len = file.metadata()?.len();
    if offset == 0 || offset > len {
        // A first look counts nothing, but a message queued this turn still waits.
        let mut queue = Queue::default();
        if offset == 0 {
            queue_before(&mut file, len, len, &mut queue)?;
        }
        return Ok(Appended {
            end_offset: len,
            last_message_id: last_message_id.map(str::to_owned),
            queued: queue.waiting,
            ..Appended::default()
        });
    }
    scan_from(
        &mut file,
        len,
        offset,
        last_message_id,
        None,
        Queue::default(),
    )
}

/// The loop's view of the transcript: like [`scan_appended`], but the first
/// look (`offset` 0) counts everything the loop spent so far, the arming turn
/// included: it starts at the first line stamped at or after `started_at`,
/// found by reading backward from the end (bounded, never before the loop).
pub(crate) fn scan_loop(
    path: &Path,
    offset: u64,
    last_message_id: Option<&str>,
    started_at: Option<Timestamp>,
) -> std::io::Result<Appended> {
    let (Some(start), 0) = (started_at, offset) else {
        return scan_appended(path, offset, last_message_id);
    };
    let mut file = open(path)?;
    let len = file.metadata()?.len();
    let from = loop_start_offset(&mut file, len, start)?;
    let mut queue = Queue::default();
    queue_before(&mut file, len, from, &mut queue)?;
    scan_from(&mut file, len, from, last_message_id, Some(start), queue)
}

/// A first look's queue lines before `until` (where counting starts), in the
/// last [`queue::FIRST_LOOK`] bytes of the file: judged by their first bytes
/// alone, every other line skipped unparsed. Nothing is read when counting
/// starts earlier than that (the forward scan then sees every queue line).
fn queue_before(file: &mut File, len: u64, until: u64, queue: &mut Queue) -> std::io::Result<()> {
    let from = len.saturating_sub(queue::FIRST_LOOK);
    if from >= until {
        return Ok(());
    }
    // Starting mid-line (the bound cut a line): that line is not judged.
    let mut at_line_start = from == 0;
    if from > 0 {
        file.seek(SeekFrom::Start(from - 1))?;
        let mut before = [0u8; 1];
        file.read_exact(&mut before)?;
        at_line_start = before[0] == b'\n';
    }
    file.seek(SeekFrom::Start(from))?;
    let mut reader = BufReader::with_capacity(BLOCK, (&mut *file).take(until - from));
    let mut head = Vec::new();
    loop {
        head.clear();
        // The line's first bytes, enough for its operation; the rest is skipped.
        let n = (&mut reader)
            .take(queue::PREFIX.len() as u64 + 64)
            .read_until(b'\n', &mut head)?;
        if n == 0 {
            return Ok(());
        }
        if at_line_start {
            queue.apply_cut(&head);
        }
        if head.last() != Some(&b'\n') {
            UntilNewline::new(&mut reader).finish()?;
        }
        at_line_start = true;
    }
}

/// Where the loop's part of the transcript begins: just past the last line
/// stamped before `started_at` (lines without a stamp do not decide, nor do
/// lines longer than [`MAX_LINE`], which are not kept), at most
/// [`MAX_APPENDED`] from the end.
fn loop_start_offset(file: &mut File, len: u64, started_at: Timestamp) -> std::io::Result<u64> {
    #[derive(Deserialize)]
    struct Stamped {
        timestamp: Option<String>,
    }
    let floor = len.saturating_sub(MAX_APPENDED);
    let mut lines = BackwardLines::new(file, floor, len).with_max_line(MAX_LINE);
    let mut start = len;
    while let Some(raw) = lines.next_line()? {
        let stamp = serde_json::from_slice::<Stamped>(&raw)
            .ok()
            .and_then(|l| l.timestamp)
            .and_then(|t| Timestamp::parse_rfc3339(&t));
        if stamp.is_some_and(|t| t < started_at) {
            return Ok(start);
        }
        start = lines.line_start();
    }
    Ok(floor)
}

/// Counts the assistant messages in `file[offset..len]` (complete lines
/// only); with `not_before`, only lines stamped at or after it. Reads the
/// span in blocks and holds one line at a time (at most [`MAX_LINE`]; a
/// longer one is parsed as it streams by), never the span.
fn scan_from(
    file: &mut File,
    len: u64,
    offset: u64,
    last_message_id: Option<&str>,
    not_before: Option<Timestamp>,
    queue: Queue,
) -> std::io::Result<Appended> {
    let start = offset.max(len.saturating_sub(MAX_APPENDED));
    let mut scan = Scan::new(start, last_message_id, not_before);
    scan.queue = queue;
    file.seek(SeekFrom::Start(start))?;
    let mut reader = BufReader::with_capacity(BLOCK, file.take(len - start));
    let mut line = Vec::new();
    loop {
        line.clear();
        let cap = MAX_LINE as u64 + 1;
        let n = (&mut reader).take(cap).read_until(b'\n', &mut line)?;
        if n == 0 {
            break;
        }
        let queue_line = line.starts_with(queue::PREFIX);
        if line.last() == Some(&b'\n') {
            line.pop();
            let parsed = serde_json::from_slice::<UsageLine<lenient::Str>>(&line).ok();
            if queue_line {
                scan.queue_line(parsed.as_ref(), &line);
            } else {
                scan.line(parsed);
            }
            scan.out.end_offset += n as u64;
            continue;
        }
        if n <= MAX_LINE {
            // The last line, still being written: read whole at the next stop. A queue
            // line that is complete JSON already says what waits.
            if queue_line
                && let Ok(parsed) = serde_json::from_slice::<UsageLine<lenient::Str>>(&line)
            {
                scan.queue_line(Some(&parsed), &line);
            }
            break;
        }
        // A long line: parsed as it is read, up to its newline.
        let mut rest = UntilNewline::new(&mut reader);
        let parsed = {
            let stream = BufReader::with_capacity(BLOCK, line.as_slice().chain(&mut rest));
            serde_json::from_reader::<_, UsageLine<IgnoredAny>>(stream).ok()
        };
        rest.finish()?;
        if !rest.found {
            break; // still being written: the next stop reads it whole
        }
        if queue_line {
            scan.queue_line(parsed.as_ref(), &line);
        } else {
            scan.line(parsed);
        }
        scan.out.end_offset = scan
            .out
            .end_offset
            .saturating_add(n as u64)
            .saturating_add(rest.read)
            .saturating_add(1);
    }
    Ok(scan.finish())
}

/// Reads up to the next newline (which it consumes, not returns).
struct UntilNewline<'a, R> {
    inner: &'a mut R,
    /// Bytes returned so far (the newline not included).
    read: u64,
    found: bool,
}

impl<'a, R: BufRead> UntilNewline<'a, R> {
    fn new(inner: &'a mut R) -> Self {
        Self {
            inner,
            read: 0,
            found: false,
        }
    }

    /// Skips what the parser left of the line.
    fn finish(&mut self) -> std::io::Result<()> {
        std::io::copy(self, &mut std::io::sink()).map(|_| ())
    }
}

impl<R: BufRead> Read for UntilNewline<'_, R> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        if self.found || out.is_empty() {
            return Ok(0);
        }
        let available = self.inner.fill_buf()?;
        let n = match available.iter().position(|&b| b == b'\n') {
            Some(0) => {
                self.inner.consume(1);
                self.found = true;
                return Ok(0);
            }
            // The newline itself is consumed by the next call.
            Some(i) => i.min(out.len()),
            None => available.len().min(out.len()),
        };
        out[..n].copy_from_slice(&available[..n]);
        self.inner.consume(n);
        self.read += n as u64;
        Ok(n)
    }
}

/// The counters of one scan, fed a line at a time.
struct Scan {
    out: Appended,
    not_before: Option<Timestamp>,
    /// A message whose lines are still coming (its usage is the last line's).
    pending: Option<(String, Usage, Option<String>)>,
    edit_calls: Vec<String>,
    last_turn_end: Option<String>,
    queue: Queue,
}

impl Scan {
    fn new(start: u64, last_message_id: Option<&str>, not_before: Option<Timestamp>) -> Self {
        Self {
            out: Appended {
                end_offset: start,
                last_message_id: last_message_id.map(str::to_owned),
                // Nothing of this turn written yet, until a line says otherwise.
                reply_missing: true,
                ..Appended::default()
            },
            not_before,
            pending: None,
            edit_calls: Vec::new(),
            last_turn_end: None,
            queue: Queue::default(),
        }
    }

    /// A line that starts as a queue line does (`start`: its first bytes). Its
    /// stamp does not matter: a message queued before the loop's start waits too.
    fn queue_line<T>(&mut self, line: Option<&UsageLine<T>>, start: &[u8]) {
        match line {
            Some(l) if l.kind.as_deref() == Some("queue-operation") => {
                self.queue.apply(l.operation.as_deref());
            }
            Some(_) => {}
            None => self.queue.apply_cut(start),
        }
    }

    /// One complete line (`None`: not JSON of a known shape, skipped). A
    /// long line's text blocks are not kept: the last text is then unknown
    /// (`last_text` is cleared), so the event's reply is not compared with it.
    fn line<T: lenient::Text>(&mut self, line: Option<UsageLine<T>>) {
        let Some(line) = line else { return };
        let out = &mut self.out;
        if let Some(limit) = self.not_before {
            let stamp = line.timestamp.as_deref().and_then(Timestamp::parse_rfc3339);
            if stamp.is_none_or(|t| t < limit) {
                return;
            }
        }
        if let Some(a) = line
            .attachment
            .as_ref()
            .filter(|a| a.kind.as_deref() == Some("goal_status"))
        {
            out.goal_active = Some(a.met != Some(true));
        }
        if line.kind.as_deref() == Some("system")
            && line.subtype.as_deref() == Some("compact_boundary")
        {
            out.compacted(line.compact_metadata.as_ref());
        }
        if line.kind.as_deref() == Some("user") && !line.is_sidechain {
            out.reply_missing = true; // a prompt, feedback or tool result: a reply is due
        }
        let Some(message) = line.message else {
            return;
        };
        let kind = line.kind.as_deref();
        let blocks = &message.content.0;
        if blocks
            .iter()
            .any(|b| b.is("tool_use") || b.is("tool_result"))
            || (kind == Some("assistant") && message.stop_reason.as_deref() == Some("tool_use"))
        {
            out.tool_seen = true;
        }
        // Edits count on every chain: a subagent's edit changed files too.
        note_edits(kind, blocks, &mut self.edit_calls, &mut out.edit_proven);
        if kind != Some("assistant") || line.is_sidechain {
            return;
        }
        let called_tool = blocks.iter().any(|b| b.is("tool_use"));
        out.ran_tool = Some(out.ran_tool.unwrap_or(false) || called_tool);
        out.reply_missing = called_tool || message.stop_reason.as_deref() == Some("tool_use");
        let ends_turn = !out.reply_missing && message.stop_reason.is_some();
        if ends_turn && message.id.is_some() && message.id != self.last_turn_end {
            // A message written as several lines (one per content block) ends its turn once.
            out.turn_ends = out.turn_ends.saturating_add(1);
            self.last_turn_end.clone_from(&message.id);
        }
        match text_of(blocks) {
            Seen::Text(text) => out.last_text = Some(text),
            Seen::Unknown => out.last_text = None,
            Seen::None => {}
        }
        if let Some(usage) = message.usage {
            out.context = Some(context_of(usage));
        }
        let Some(id) = message.id else { return };
        if out.last_message_id.as_deref() == Some(id.as_str()) && self.pending.is_none() {
            return; // counted by an earlier scan
        }
        let usage = message.usage.unwrap_or_default();
        match &mut self.pending {
            Some((pid, u, _)) if *pid == id => *u = usage,
            _ => {
                if let Some((_, u, model)) = self.pending.take() {
                    out.add(u, model);
                }
                self.pending = Some((id.clone(), usage, message.model));
                out.last_message_id = Some(id);
            }
        }
    }

    fn finish(mut self) -> Appended {
        if let Some((_, u, model)) = self.pending.take() {
            self.out.add(u, model);
        }
        self.out.queued = self.queue.waiting;
        self.out
    }
}

impl Appended {
    /// A compaction: what the last request sent is gone, the next one
    /// sends the summary (its size, when the client said).
    fn compacted(&mut self, meta: Option<&CompactMetadata>) {
        let post_tokens = meta.and_then(|m| m.post_tokens);
        self.context = post_tokens;
        self.compactions.push(Compaction {
            trigger: meta.and_then(|m| m.trigger.clone()),
            pre_tokens: meta.and_then(|m| m.pre_tokens),
            post_tokens,
        });
    }

    fn add(&mut self, usage: Usage, model: Option<String>) {
        let message_tokens = tokens_of(usage);
        self.tokens = self.tokens.saturating_add(message_tokens);
        self.largest_reply = self.largest_reply.max(message_tokens);
        let hour = usage
            .cache_creation
            .map_or(0, |c| c.ephemeral_1h_input_tokens)
            .min(usage.cache_creation_input_tokens);
        let kinds = ModelTokens {
            input: usage.input_tokens,
            output: usage.output_tokens,
            cache_write: usage.cache_creation_input_tokens - hour,
            cache_write_1h: hour,
            cache_read: usage.cache_read_input_tokens,
        };
        // A line without a model is priced as an unknown one: never free.
        let model = model.unwrap_or_else(|| "(no model named)".to_owned());
        if message_tokens >= self.largest_reply {
            self.largest_message = Some((model.clone(), kinds));
        }
        match self.per_model.iter_mut().find(|(m, _)| *m == model) {
            Some((_, sum)) => sum.add(&kinds),
            None => self.per_model.push((model, kinds)),
        }
    }
}

/// Remembers the ids of edit-tool calls (assistant lines) and marks an edit
/// proven when a user line carries a successful result for one of them.
fn note_edits<T>(
    kind: Option<&str>,
    blocks: &[lenient::Block<T>],
    calls: &mut Vec<String>,
    proven: &mut bool,
) {
    for block in blocks {
        match kind {
            Some("assistant")
                if block.is("tool_use")
                    && block
                        .name
                        .0
                        .as_deref()
                        .is_some_and(|n| EDIT_TOOLS.contains(&n)) =>
            {
                calls.extend(block.id.0.clone());
            }
            Some("user")
                if block.is("tool_result")
                    && block.is_error.0 != Some(true)
                    && block
                        .tool_use_id
                        .0
                        .as_ref()
                        .is_some_and(|id| calls.contains(id)) =>
            {
                *proven = true;
            }
            _ => {}
        }
    }
}

enum Seen {
    None,
    Text(String),
    /// Text blocks whose text was not kept (a long line).
    Unknown,
}

/// The text blocks of one assistant line, joined as the client joins them.
fn text_of<T: lenient::Text>(blocks: &[lenient::Block<T>]) -> Seen {
    let mut texts: Vec<&str> = Vec::new();
    for block in blocks.iter().filter(|b| b.is("text")) {
        match block.text.as_ref().map(T::text) {
            Some(Some(text)) => texts.push(text),
            Some(None) if !T::KEPT => return Seen::Unknown,
            _ => {}
        }
    }
    if texts.is_empty() {
        Seen::None
    } else {
        Seen::Text(texts.join("\n\n"))
    }
}

/// What one request sent: its input, written to and read from the cache.
fn context_of(u: Usage) -> u64 {
    u.input_tokens
        .saturating_add(u.cache_creation_input_tokens)
        .saturating_add(u.cache_read_input_tokens)
}

fn tokens_of(u: Usage) -> u64 {
    u.input_tokens
        .saturating_add(u.output_tokens)
        .saturating_add(u.cache_creation_input_tokens)
}

#[cfg(test)]
mod appended_tests {
    use super::*;

    #[test]
    fn an_older_reply_last_in_the_transcript_means_this_turns_reply_is_missing() {
        // Lagging by two replies: the new part ends with the previous turn's reply.
        let lagging = Appended {
            last_text: Some("Checked, step 3.".into()),
            ..Appended::default()
        };
        assert!(lagging.lacks_reply(Some("Checked, step 4.")));
        // The reply is there: the last text block ends the event's reply.
        assert!(!lagging.lacks_reply(Some("Looked around.\n\nChecked, step 3.")));
        // Nothing to compare with: the lines decide (a tool call, a user line).
        assert!(!Appended::default().lacks_reply(Some("anything")));
        assert!(
            Appended {
                reply_missing: true,
                ..Appended::default()
            }
            .lacks_reply(None)
        );
    }
    use std::io::Write;

    fn line(id: &str, tool: bool, input: u64, output: u64) -> String {
        let content = if tool {
            r#"[{"type":"tool_use","name":"Bash"}]"#
        } else {
            r#"[{"type":"text","text":"x"}]"#
        };
        format!(
            r#"{{"type":"assistant","message":{{"id":"{id}","content":{content},"usage":{{"input_tokens":{input},"output_tokens":{output},"cache_read_input_tokens":99999}}}}}}"#
        ) + "\n"
    }

    fn edit_call(id: &str, tool: &str) -> String {
        format!(
            r#"{{"type":"assistant","message":{{"id":"m-{id}","content":[{{"type":"tool_use","id":"{id}","name":"{tool}","input":{{}}}}]}}}}"#
        ) + "\n"
    }

    fn result(id: &str, error: bool) -> String {
        format!(
            r#"{{"type":"user","message":{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"{id}","is_error":{error},"content":"ok"}}]}}}}"#
        ) + "\n"
    }

    fn proven(appended: &str) -> bool {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(b"{\"type\":\"user\"}\n").unwrap();
        let base = scan_appended(f.path(), 0, None).unwrap();
        f.write_all(appended.as_bytes()).unwrap();
        scan_appended(f.path(), base.end_offset, None)
            .unwrap()
            .edit_proven
    }

    #[test]
    fn an_edit_is_proven_only_by_its_successful_result() {
        for tool in EDIT_TOOLS {
            assert!(
                proven(&(edit_call("t1", tool) + &result("t1", false))),
                "{tool}"
            );
        }
        assert!(
            !proven(&(edit_call("t1", "Edit") + &result("t1", true))),
            "an error"
        );
        assert!(
            !proven(&edit_call("t1", "Edit")),
            "no result yet (the transcript lags)"
        );
        assert!(!proven(&result("t1", false)), "a result without its call");
        assert!(
            !proven(&(edit_call("t1", "Bash") + &result("t1", false))),
            "not an edit tool"
        );
        assert!(
            !proven(&(edit_call("t1", "Edit") + &result("t2", false))),
            "another call's result"
        );
        assert!(
            !proven(&line("m1", true, 1, 1)),
            "a tool call without an id"
        );
    }

    /// A line longer than [`MAX_LINE`] is parsed as it streams by: its
    /// usage, tool calls and edits count, its text is not kept, and a long
    /// line still being written is left for the next stop.
    #[test]
    fn a_long_line_counts_without_being_held() {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(b"{\"type\":\"user\"}\n").unwrap();
        let base = scan_appended(f.path(), 0, None).unwrap();
        let big = "z".repeat(MAX_LINE * 3);
        let call = format!(
            r#"{{"type":"assistant","message":{{"id":"m1","content":[{{"type":"text","text":"{big}"}},{{"type":"tool_use","id":"t1","name":"Write","input":{{"content":"{big}"}}}}],"usage":{{"input_tokens":7,"output_tokens":3}}}}}}"#
        ) + "\n";
        let done = format!(
            r#"{{"type":"user","message":{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"t1","content":"{big}"}}]}}}}"#
        ) + "\n";
        f.write_all((call.clone() + &done).as_bytes()).unwrap();
        let a = scan_appended(f.path(), base.end_offset, None).unwrap();
        assert_eq!(
            (a.tokens, a.ran_tool, a.edit_proven),
            (10, Some(true), true)
        );
        assert_eq!((a.last_text.as_deref(), a.tool_seen), (None, true));
        let len = f.as_file().metadata().unwrap().len();
        assert_eq!(a.end_offset, len);
        // Half a long line: nothing counted, the offset stays before it.
        f.write_all(&call.as_bytes()[..call.len() / 2]).unwrap();
        let b = scan_appended(f.path(), a.end_offset, None).unwrap();
        assert_eq!((b.tokens, b.end_offset), (0, len));
    }

    #[test]
    fn tokens_are_summed_per_model_and_kind() {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(b"{\"type\":\"user\"}\n").unwrap();
        let base = scan_appended(f.path(), 0, None).unwrap();
        let msg = |id: &str, model: &str, usage: &str| {
            format!(
                r#"{{"type":"assistant","message":{{"id":"{id}","model":"{model}","stop_reason":"end_turn","content":[{{"type":"text","text":"x"}}],"usage":{usage}}}}}"#
            ) + "\n"
        };
        let u = r#"{"input_tokens":10,"output_tokens":5,"cache_creation_input_tokens":100,"cache_read_input_tokens":1000,"cache_creation":{"ephemeral_1h_input_tokens":40}}"#;
        let text = msg("m1", "claude-opus-4-6", u)
            + &msg(
                "m2",
                "claude-haiku-4-5",
                r#"{"input_tokens":1,"output_tokens":2}"#,
            )
            + &msg("m3", "claude-opus-4-6", u);
        f.write_all(text.as_bytes()).unwrap();
        let a = scan_appended(f.path(), base.end_offset, None).unwrap();
        let opus = ModelTokens {
            input: 20,
            output: 10,
            cache_write: 120,
            cache_write_1h: 80,
            cache_read: 2000,
        };
        let haiku = ModelTokens {
            input: 1,
            output: 2,
            ..ModelTokens::default()
        };
        assert_eq!(
            a.per_model,
            [
                ("claude-opus-4-6".to_owned(), opus),
                ("claude-haiku-4-5".to_owned(), haiku)
            ]
        );
        assert_eq!(a.tokens, 2 * 115 + 3, "the token count is unchanged");
    }

    #[test]
    fn first_look_sets_a_baseline() {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(line("m1", false, 10, 5).as_bytes()).unwrap();
        let a = scan_appended(f.path(), 0, None).unwrap();
        assert_eq!(
            (a.tokens, a.ran_tool, a.end_offset),
            (0, None, f.as_file().metadata().unwrap().len())
        );
    }

    #[test]
    fn counts_each_message_once_across_scans() {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(b"{\"type\":\"user\"}\n").unwrap();
        let base = scan_appended(f.path(), 0, None).unwrap();
        f.write_all((line("m1", false, 10, 5) + &line("m1", true, 10, 7)).as_bytes())
            .unwrap();
        let a = scan_appended(f.path(), base.end_offset, None).unwrap();
        assert_eq!((a.tokens, a.ran_tool), (17, Some(true)));
        f.write_all((line("m1", false, 10, 7) + &line("m2", false, 1, 1)).as_bytes())
            .unwrap();
        f.write_all(b"{\"type\":\"assistant\",\"message\":{\"id\":\"m3\"")
            .unwrap(); // a line still being written
        let b = scan_appended(f.path(), a.end_offset, a.last_message_id.as_deref()).unwrap();
        assert_eq!((b.tokens, b.ran_tool), (2, Some(false)));
        let len = f.as_file().metadata().unwrap().len();
        assert!(b.end_offset < len);
    }
}

/// Transcripts shaped like the ones Claude Code 2.1.328 writes (see
/// docs/claude-code-notes.md): one line per content block, each carrying the
/// message's final usage and stop reason; feedback as a meta user line; the
/// reply that ended the turn sometimes not written yet when the hook runs.
#[cfg(test)]
mod loop_tests {
    use super::*;
    use crate::reply::transcript::backward::BLOCK;
    use std::io::Write;

    fn assistant(id: &str, block: &str, stop: &str, ts: &str) -> String {
        format!(
            r#"{{"parentUuid":"p","isSidechain":false,"type":"assistant","uuid":"u","timestamp":"{ts}","message":{{"id":"{id}","type":"message","role":"assistant","model":"m","content":[{block}],"stop_reason":"{stop}","usage":{{"input_tokens":10,"cache_creation_input_tokens":0,"cache_read_input_tokens":500,"output_tokens":5}}}}}}"#
        ) + "\n"
    }
    fn text(id: &str, ts: &str) -> String {
        assistant(id, r#"{"type":"text","text":"step"}"#, "end_turn", ts)
    }
    fn user(content: &str, meta: bool, ts: &str) -> String {
        format!(
            r#"{{"type":"user","isMeta":{meta},"isSidechain":false,"timestamp":"{ts}","message":{{"role":"user","content":{content}}}}}"#
        ) + "\n"
    }
    fn feedback(ts: &str) -> String {
        user(r#""Stop hook feedback:\nWork""#, true, ts)
    }
    fn other(kind: &str, ts: &str) -> String {
        format!(r#"{{"type":"{kind}","timestamp":"{ts}"}}"#) + "\n"
    }

    const BEFORE: &str = "2026-11-30T15:09:30.100Z";
    const ARMED: &str = "2026-11-30T15:09:37Z";
    const T1: &str = "2026-11-30T15:09:37.855Z";
    const T2: &str = "2026-11-30T15:09:38.739Z";

    fn started() -> Option<Timestamp> {
        Timestamp::parse_rfc3339(ARMED)
    }

    /// The next stop's scan, from where `previous` ended.
    fn next_scan(path: &Path, previous: &Appended) -> Appended {
        let last = previous.last_message_id.as_deref();
        scan_loop(path, previous.end_offset, last, started()).unwrap()
    }

    #[test]
    fn first_stop_counts_the_arming_turn_and_nothing_before() {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        let earlier = user(r#""hello""#, false, BEFORE) + &text("msg_old", BEFORE);
        let arming = user(r#""/ralph:ralph-loop Work""#, false, T1)
            + &other("attachment", T1)
            + &text("msg_1", T1);
        f.write_all((earlier + &arming).as_bytes()).unwrap();
        let a = scan_loop(f.path(), 0, None, started()).unwrap();
        assert_eq!(
            (a.tokens, a.largest_reply, a.reply_missing),
            (15, 15, false)
        );
        assert_eq!(a.last_message_id.as_deref(), Some("msg_1"));
        assert_eq!(a.end_offset, f.as_file().metadata().unwrap().len());
        // Without a start time, the first look is a baseline, as before.
        assert_eq!(scan_loop(f.path(), 0, None, None).unwrap().tokens, 0);
    }

    /// One reply ends each turn: a tool call does not, a message written as
    /// several lines counts once, and a lagging transcript shows none.
    #[test]
    fn replies_that_end_a_turn_are_counted() {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        let call = assistant(
            "msg_1",
            r#"{"type":"tool_use","id":"t1","name":"Bash","input":{}}"#,
            "tool_use",
            T1,
        );
        let result = user(
            r#"[{"type":"tool_result","tool_use_id":"t1","content":"ok"}]"#,
            false,
            T1,
        );
        let two_lines = text("msg_2", T1) + &text("msg_2", T1);
        f.write_all(
            (user(r#""/ralph:ralph-loop Work""#, false, T1) + &call + &result + &two_lines)
                .as_bytes(),
        )
        .unwrap();
        let a = scan_loop(f.path(), 0, None, started()).unwrap();
        assert_eq!((a.turn_ends, a.reply_missing), (1, false));
        // The transcript lags: nothing new, no turn end.
        let b = next_scan(f.path(), &a);
        assert_eq!((b.turn_ends, b.reply_missing), (0, true));
        // Three turns land at once.
        let three = feedback(T2)
            + &text("msg_3", T2)
            + &feedback(T2)
            + &text("msg_4", T2)
            + &feedback(T2)
            + &text("msg_5", T2);
        f.write_all(three.as_bytes()).unwrap();
        let c = next_scan(f.path(), &b);
        assert_eq!((c.turn_ends, c.tokens), (3, 45));
    }

    #[test]
    fn a_lagging_reply_is_reported_missing_then_counted_once() {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        // Stop 1: the arming prompt is there, its reply is not yet.
        f.write_all(user(r#""/ralph:ralph-loop Work""#, false, T1).as_bytes())
            .unwrap();
        let a = scan_loop(f.path(), 0, None, started()).unwrap();
        assert_eq!((a.tokens, a.reply_missing), (0, true));
        // Stop 2: reply 1, the feedback, and reply 2 are in.
        f.write_all((text("msg_1", T1) + &feedback(T2) + &text("msg_2", T2)).as_bytes())
            .unwrap();
        let b = next_scan(f.path(), &a);
        assert_eq!(
            (b.tokens, b.reply_missing, b.ran_tool),
            (30, false, Some(false))
        );
        // Stop 3: only the feedback is written: the reply is missing, nothing counted.
        f.write_all(feedback(T2).as_bytes()).unwrap();
        let c = next_scan(f.path(), &b);
        assert_eq!((c.tokens, c.reply_missing, c.ran_tool), (0, true, None));
    }

    #[test]
    fn a_tool_call_spread_over_lines_counts_once_and_proves_the_tool() {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(feedback(T1).as_bytes()).unwrap();
        let start = f.as_file().metadata().unwrap().len();
        let call = assistant(
            "msg_3",
            r#"{"type":"text","text":"running"}"#,
            "tool_use",
            T2,
        ) + &assistant(
            "msg_3",
            r#"{"type":"tool_use","id":"toolu_1","name":"Bash","input":{"command":"true"}}"#,
            "tool_use",
            T2,
        );
        f.write_all(call.as_bytes()).unwrap();
        let a = scan_loop(f.path(), start, None, started()).unwrap();
        assert_eq!(
            (a.tokens, a.reply_missing, a.ran_tool),
            (15, true, Some(true))
        );
        f.write_all(
            (user(
                r#"[{"type":"tool_result","tool_use_id":"toolu_1","content":""}]"#,
                false,
                T2,
            ) + &text("msg_4", T2))
                .as_bytes(),
        )
        .unwrap();
        let b = scan_loop(f.path(), start, None, started()).unwrap();
        assert_eq!(
            (b.tokens, b.reply_missing, b.ran_tool),
            (30, false, Some(true))
        );
    }

    #[test]
    fn the_loop_start_is_found_across_blocks_and_bounded() {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        let filler = format!(
            r#"{{"type":"user","timestamp":"{BEFORE}","x":"{}"}}"#,
            "y".repeat(BLOCK)
        ) + "\n";
        f.write_all((filler.clone() + &filler + &text("msg_old", BEFORE)).as_bytes())
            .unwrap();
        f.write_all((text("msg_1", T1) + &other("system", T1) + &text("msg_2", T2)).as_bytes())
            .unwrap();
        let a = scan_loop(f.path(), 0, None, started()).unwrap();
        assert_eq!(a.tokens, 30);
        // No line after the start: nothing is counted.
        let later = Timestamp::parse_rfc3339("2026-11-30T16:00:00Z");
        assert_eq!(scan_loop(f.path(), 0, None, later).unwrap().tokens, 0);
    }
}

/// The context fill measured from fixture transcripts: the last main-chain
/// request's usage, against the window the status line reported.
#[cfg(test)]
mod context_tests {
    use std::io::Write;

    use super::*;
    use ralph_state::context::Fill;

    /// An assistant line as Claude Code 2.1.328 writes it, with `usage`
    /// (input, cache creation, cache read, output) or none.
    fn reply(id: &str, usage: Option<(u64, u64, u64, u64)>, sidechain: bool) -> String {
        let usage = usage.map_or(String::new(), |(i, w, r, o)| {
            format!(r#","usage":{{"input_tokens":{i},"cache_creation_input_tokens":{w},"cache_read_input_tokens":{r},"output_tokens":{o}}}"#)
        });
        format!(
            r#"{{"parentUuid":"p","isSidechain":{sidechain},"type":"assistant","uuid":"u-{id}","timestamp":"2026-11-30T01:09:57.935Z","sessionId":"s","version":"2.1.328","message":{{"id":"{id}","type":"message","role":"assistant","model":"claude-opus-4-5","content":[{{"type":"text","text":"done"}}],"stop_reason":"end_turn"{usage}}}}}"#
        ) + "\n"
    }

    fn boundary(post: Option<u64>) -> String {
        let post = post.map_or(String::new(), |p| format!(r#","postTokens":{p}"#));
        format!(
            r#"{{"type":"system","subtype":"compact_boundary","content":"Conversation compacted","isMeta":false,"timestamp":"2026-11-30T01:10:00.000Z","compactMetadata":{{"trigger":"manual","preTokens":183000{post}}}}}"#
        ) + "\n"
    }

    /// The scan of `lines` appended after a first line, as a stop sees it.
    fn scan(lines: &str) -> Appended {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(b"{\"type\":\"user\",\"message\":{\"role\":\"user\",\"content\":\"go\"}}\n")
            .unwrap();
        let base = scan_appended(f.path(), 0, None).unwrap();
        f.write_all(lines.as_bytes()).unwrap();
        scan_appended(f.path(), base.end_offset, None).unwrap()
    }

    fn fill(lines: &str, window: Option<u64>) -> Option<Fill> {
        scan(lines).context.map(|tokens| Fill { tokens, window })
    }

    #[test]
    fn a_200k_window_the_last_request_counts_input_and_both_caches() {
        let lines = reply("m1", Some((10, 2_000, 40_000, 900)), false)
            + &reply("m2", Some((6, 1_000, 81_000, 500)), false);
        let fill = fill(&lines, Some(200_000)).unwrap();
        assert_eq!(fill.tokens, 82_006, "the last request, output not counted");
        assert_eq!(fill.percent(), Some(42));
        assert_eq!(fill.words(), "42% of 200k");
    }

    #[test]
    fn a_1m_window_is_not_read_as_200k() {
        let lines = reply("m1", Some((4, 1_000, 189_000, 300)), false);
        let fill = fill(&lines, Some(1_000_000)).unwrap();
        assert_eq!(fill.percent(), Some(20));
        let unknown = Fill {
            window: None,
            ..fill
        };
        assert_eq!(unknown.percent(), None);
        assert_eq!(unknown.short(), "190k");
    }

    #[test]
    fn usage_missing_says_nothing_and_a_subagent_does_not_count() {
        assert_eq!(scan(&reply("m1", None, false)).context, None);
        // The last line without usage leaves the last measured request.
        let lines = reply("m1", Some((1, 0, 5_000, 1)), false) + &reply("m2", None, false);
        assert_eq!(scan(&lines).context, Some(5_001));
        // A subagent's request is another context.
        let lines = reply("m1", Some((1, 0, 5_000, 1)), false)
            + &reply("m2", Some((1, 0, 90_000, 1)), true);
        assert_eq!(scan(&lines).context, Some(5_001));
    }

    #[test]
    fn a_torn_last_line_is_not_read_until_it_is_whole() {
        let whole = reply("m1", Some((1, 0, 5_000, 1)), false);
        let torn = reply("m2", Some((1, 0, 150_000, 1)), false);
        let torn = &torn[..torn.len() / 2];
        let seen = scan(&(whole.clone() + torn));
        assert_eq!(seen.context, Some(5_001));
        assert!(seen.compactions.is_empty());
    }

    #[test]
    fn after_a_compaction_the_old_figure_is_gone_and_the_compaction_recorded() {
        let before = reply("m1", Some((1, 0, 182_999, 1)), false);
        let seen = scan(&(before.clone() + &boundary(Some(9_000))));
        assert_eq!(seen.context, Some(9_000), "what the compaction left");
        assert_eq!(
            seen.compactions,
            vec![Compaction {
                trigger: Some("manual".into()),
                pre_tokens: Some(183_000),
                post_tokens: Some(9_000),
            }]
        );
        assert_eq!(scan(&(before.clone() + &boundary(None))).context, None);
        let after = reply("m2", Some((3, 12_000, 0, 1)), false);
        assert_eq!(
            scan(&(before + &boundary(None) + &after)).context,
            Some(12_003),
            "the first request after it"
        );
    }
}
