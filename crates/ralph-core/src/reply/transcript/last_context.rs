//! The backward reader for the context fill: what the last main-chain
//! request sent, read from the end of the transcript when the forward scan
//! read nothing (a first look takes the end as its baseline).

use std::path::Path;

use serde::Deserialize;

use super::backward::open;
use super::backward::{BackwardLines, MAX_SCAN};

/// Lines longer than this are skipped (a huge reply's usage is then read
/// from the request before it, never from a line held whole in memory).
const MAX_LINE: usize = 256 * 1024;

#[derive(Deserialize)]
struct Line {
    #[serde(rename = "type")]
    kind: Option<String>,
    #[serde(rename = "isSidechain", default)]
    is_sidechain: bool,
    subtype: Option<String>,
    #[serde(rename = "compactMetadata")]
    compact_metadata: Option<Compact>,
    message: Option<Message>,
}

#[derive(Deserialize)]
struct Compact {
    #[serde(rename = "postTokens")]
    post_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct Message {
    usage: Option<Usage>,
}

#[derive(Deserialize)]
struct Usage {
    #[serde(default, rename = "input_tokens")]
    input: u64,
    #[serde(default, rename = "cache_creation_input_tokens")]
    cache_write: u64,
    #[serde(default, rename = "cache_read_input_tokens")]
    cache_read: u64,
}

/// The context the last main-chain request sent (input + cache creation +
/// cache read), or what the last compaction left; `None` when the last
/// [`MAX_SCAN`] bytes tell neither. A torn last line does not parse and is
/// passed over.
pub fn last_context(path: &Path) -> std::io::Result<Option<u64>> {
    let mut file = open(path)?;
    let len = file.metadata()?.len();
    let mut lines =
        BackwardLines::new(&mut file, len.saturating_sub(MAX_SCAN), len).with_max_line(MAX_LINE);
    while let Some(raw) = lines.next_line()? {
        let Ok(line) = serde_json::from_slice::<Line>(&raw) else {
            continue;
        };
        if line.kind.as_deref() == Some("system")
            && line.subtype.as_deref() == Some("compact_boundary")
        {
            return Ok(line.compact_metadata.and_then(|c| c.post_tokens));
        }
        if line.kind.as_deref() != Some("assistant") || line.is_sidechain {
            continue;
        }
        if let Some(u) = line.message.and_then(|m| m.usage) {
            return Ok(Some(
                u.input
                    .saturating_add(u.cache_write)
                    .saturating_add(u.cache_read),
            ));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    #[test]
    fn the_last_main_chain_usage_read_backward_past_a_torn_line_and_a_subagent() {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        let main = r#"{"type":"assistant","message":{"usage":{"input_tokens":2,"cache_creation_input_tokens":100,"cache_read_input_tokens":1000,"output_tokens":7}}}"#;
        let side =
            r#"{"type":"assistant","isSidechain":true,"message":{"usage":{"input_tokens":90000}}}"#;
        writeln!(f, "{main}\n{side}\n{{\"type\":\"user\"}}").unwrap();
        write!(f, "{}", &main[..40]).unwrap();
        assert_eq!(last_context(f.path()).unwrap(), Some(1_102));
        let boundary = r#"{"type":"system","subtype":"compact_boundary","compactMetadata":{"trigger":"auto","preTokens":5}}"#;
        writeln!(f, "\n{boundary}").unwrap();
        assert_eq!(
            last_context(f.path()).unwrap(),
            None,
            "compacted, no figure"
        );
    }
}
