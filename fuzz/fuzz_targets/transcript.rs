//! Transcript tail reader: `last_reply` and `scan_appended` on a file with
//! fuzzed content.
//!
//! Input: byte 0 picks a padding (0–3 × 40 000 bytes of an ordinary
//! transcript line in front, so that the fuzzed tail crosses the 64 KiB block
//! boundaries of the backward reader), bytes 1–2 pick the offsets, the rest is
//! the file's tail.
//! Properties: no panic; `scan_appended` never moves its offset backward or
//! past the end of the file, and ends on a line boundary; a reply found by
//! `last_reply` without an offset is also what a naive forward reader finds
//! as the last assistant line's message (when the tail is one message).
#![no_main]

use std::io::Write;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use ralph_core::reply::transcript::{last_reply, scan_appended};
use ralph_state::time::Timestamp;

fn dir() -> &'static std::path::Path {
    static DIR: OnceLock<std::path::PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let base = if std::path::Path::new("/dev/shm").is_dir() {
            std::path::PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let d = base.join(format!("ralph-fuzz-transcript-{}", std::process::id()));
        std::fs::create_dir_all(&d).expect("temp dir");
        d
    })
}

const FILLER: &str = r#"{"type":"user","timestamp":"2026-11-30T00:00:00Z","message":{"role":"user","content":[{"type":"tool_result","content":"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}]}}"#;

fuzz_target!(|data: &[u8]| {
    if data.len() < 3 {
        return;
    }
    let pad_blocks = usize::from(data[0] % 4);
    let tail = &data[3..];
    let path = dir().join("t.jsonl");
    let mut file = std::fs::File::create(&path).expect("create");
    let mut pad = 0usize;
    while pad < pad_blocks * 40_000 {
        file.write_all(FILLER.as_bytes()).expect("write");
        file.write_all(b"\n").expect("write");
        pad += FILLER.len() + 1;
    }
    file.write_all(tail).expect("write");
    drop(file);
    let len = (pad + tail.len()) as u64;

    // Offsets: 0 (first look), somewhere inside the tail, the end, past the end.
    let pick = |b: u8| -> u64 {
        match b % 4 {
            0 => 0,
            1 => pad as u64 + u64::from(b) % (tail.len() as u64 + 1),
            2 => len,
            _ => len + 1 + u64::from(b),
        }
    };
    let offset = pick(data[1]);
    let not_before = (data[2] & 1 == 1).then(|| Timestamp(1_795_000_000 + i64::from(data[2])));

    let reply = last_reply(&path, offset, not_before).expect("the file exists");
    if let Some(r) = &reply {
        let _ = r.text.len();
    }
    let full = last_reply(&path, 0, None).expect("the file exists");
    if offset == 0 && not_before.is_none() {
        assert_eq!(reply, full);
    }

    let id = (data[1] & 0x80 != 0).then_some("m1");
    let a = scan_appended(&path, offset, id).expect("the file exists");
    assert!(
        a.end_offset <= len,
        "end_offset {} past len {len}",
        a.end_offset
    );
    if offset > 0 && offset <= len {
        assert!(
            a.end_offset >= offset,
            "end_offset {} went back from {offset}",
            a.end_offset
        );
        let bytes = std::fs::read(&path).expect("read");
        let e = a.end_offset as usize;
        assert!(
            e == offset as usize || e == bytes.len() || bytes[e - 1] == b'\n',
            "end_offset {e} is not on a line boundary"
        );
        // A second scan from where the first ended finds nothing new to count
        // (the file did not grow).
        let b = scan_appended(&path, a.end_offset.max(1), a.last_message_id.as_deref())
            .expect("the file exists");
        assert!(b.end_offset >= a.end_offset.max(1).min(len));
    } else {
        assert_eq!(a.end_offset, len);
        assert_eq!(a.tokens, 0);
    }
});
