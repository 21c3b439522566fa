//! The Stop payload: `StopEvent::parse`, and `hook::stop` end to end on a
//! temporary project with a live loop.
//!
//! Input: byte 0 is a mode byte. Mode "raw": the rest is the stdin payload as
//! is. Mode "structured": the rest is split at the first NUL into a reply and
//! a transcript; the payload is built with serde_json (session owner / other /
//! none, reply present or not) and points at a transcript file holding the
//! fuzzed bytes.
//! Properties: no panic; the answer renders to nothing or to one JSON object
//! with the documented keys; a block advances `iteration` by exactly one and
//! leaves a parseable state file; nothing else ever changes the iteration;
//! no temp file is left behind.
#![no_main]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use ralph_core::hook;
use ralph_core::hook::answer::Answer;
use ralph_state::storage::environment::Environment;
use ralph_state::fields::state::LoopState;
use ralph_core::reply::event::StopEvent;
use ralph_state::time::Timestamp;
use serde_json::{Value, json};

fn root() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let base = if Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let d = base.join(format!("ralph-fuzz-stop-{}", std::process::id()));
        std::fs::create_dir_all(d.join(".claude")).expect("temp project");
        d
    })
}

const STATE: &str = "---\nactive: true\niteration: 3\nmax_iterations: 0\nsession_id: \"owner\"\ncompletion_promise: \"DONE\"\nstarted_at: \"2026-11-30T00:00:00Z\"\nstuck_after: 2\nno_progress_after: 0\ntranscript_offset: 7\n---\n\nKeep going.\n";

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let root = root();
    let claude = root.join(".claude");
    let state_path = claude.join("ralph-loop.local.md");
    // Fresh project every run: only the loop file, and no record of armed
    // loops (the owner's first stop adopts the loop, as for a loop armed
    // before ralph kept records).
    let _ = std::fs::remove_dir_all(claude.join("ralph"));
    let _ = std::fs::remove_dir_all(root.join("state"));
    std::fs::write(&state_path, STATE).expect("state");

    let payload: Vec<u8> = if mode & 1 == 0 {
        let _ = StopEvent::parse(rest).map(|e| (e.session().map(str::len), e.reply_in_payload()));
        rest.to_vec()
    } else {
        let (reply, transcript) = match rest.iter().position(|&b| b == 0) {
            Some(i) => (&rest[..i], &rest[i + 1..]),
            None => (rest, &[][..]),
        };
        let transcript_path = root.join("t.jsonl");
        std::fs::write(&transcript_path, transcript).expect("transcript");
        let mut p = json!({
            "hook_event_name": "Stop",
            "stop_hook_active": mode & 2 != 0,
            "cwd": root,
            "transcript_path": transcript_path,
        });
        match mode >> 2 & 3 {
            0 => p["session_id"] = json!("owner"),
            1 => p["session_id"] = json!("someone-else"),
            2 => p["session_id"] = json!("   "),
            _ => {}
        }
        if mode & 16 != 0 {
            p["last_assistant_message"] = json!(String::from_utf8_lossy(reply));
        }
        serde_json::to_vec(&p).expect("payload")
    };

    let ctx = Environment {
        project_dir: Some(root.to_owned()),
        process_cwd: None,
        home: None,
        state_home: Some(root.join("state")),
        block_cap: if mode & 32 != 0 { 0 } else { 8 },
        now: Timestamp(1_796_000_000),
        courier: None,
    };
    let answer = hook::stop(&payload, &ctx);
    let rendered = answer.render();
    if rendered.is_empty() {
        assert_eq!(answer, Answer::Silent);
    } else {
        let v: Value = serde_json::from_str(&rendered).expect("the answer is JSON");
        let obj = v.as_object().expect("an object");
        assert!(
            obj.keys()
                .all(|k| ["decision", "reason", "systemMessage"].contains(&k.as_str()))
        );
    }
    let after = std::fs::read_to_string(&state_path).ok();
    match (&answer, after) {
        (Answer::Block { .. }, Some(text)) => {
            let s = LoopState::parse(&text).expect("a blocked loop's file parses");
            assert_eq!(s.iteration, 4, "a block advances the iteration by one");
        }
        (Answer::Block { .. }, None) => panic!("blocked but the loop file is gone"),
        (_, Some(text)) => {
            let s = LoopState::parse(&text).expect("the loop file parses");
            assert_eq!(s.iteration, 3, "only a block may advance the iteration");
        }
        (_, None) => {} // ended and archived
    }
    for e in std::fs::read_dir(&claude).expect("dir").flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        assert!(!name.ends_with(".tmp"), "temp file left: {name}");
    }
});
