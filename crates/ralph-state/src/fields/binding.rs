//! Which fields of a loop file the arming record binds: every field ralph
//! reads except the bookkeeping ralph itself rewrites ([`BOOKKEEPING`], and
//! the guards' counters), hashed as YAML reads them. Below both `state`
//! (which hashes a file's settings once, as it parses it) and `registry`
//! (which keeps the hash in the user's record).

use sha2::{Digest, Sha256};

/// The frontmatter field that carries a loop's nonce.
pub const NONCE_FIELD: &str = "ralph_nonce";

/// The fields ralph itself rewrites as a loop runs (counters, the owner,
/// pause state, clock readings, the ending) and so are not part of what a
/// record binds. Every other field ralph reads is a setting the user chose
/// and is bound: a new setting needs nothing here, a new counter that ralph
/// rewrites at every stop belongs on this list (a unit test below fails
/// for one that is missing; until then ralph re-records after writing it,
/// see `lifecycle::Loop::keep_armed`, so the loop still runs).
pub const BOOKKEEPING: &[&str] = &[
    "active",
    "iteration",
    "session_id",
    "tokens_used",
    "transcript_offset",
    "last_message_id",
    "reply_fingerprint",
    "same_reply_count",
    "tree_fingerprint",
    "no_progress_count",
    "idle_blocks",
    "elapsed_secs",
    "clock_at",
    "largest_reply_tokens",
    "unseen_tokens",
    // `--fresh-at`'s hand-over stage.
    "fresh_stage",
    // `--prd`: the stories accepted as passing (rewritten as they pass;
    // `prd` and `prd_commands` are settings, bound like `verify`).
    "prd_passed",
    "outcome",
    "ended_at",
    NONCE_FIELD,
    // The session hooks' marks (read by line scan, not by the parser).
    "prompt_noticed_at",
    "clear_handover",
];

/// Whether a field of the loop file is bound to the arming.
pub fn is_bound(field: &str) -> bool {
    !BOOKKEEPING.contains(&field) && !crate::fields::guards::COUNTER_FIELDS.contains(&field)
}

/// The hash of every bound field present in a loop file, as YAML reads it
/// (so requoting a value changes nothing, a new value changes the hash).
/// `get` gives a field's raw value by name; the fields are taken in name
/// order and each is length-prefixed, so no text moves between fields
/// unnoticed. A field that is absent adds nothing, so a field ralph learns
/// later leaves the loops that do not set it as they were.
pub(crate) fn settings_hash<'a>(
    fields: &[&'static str],
    get: impl Fn(&str) -> Option<&'a str>,
) -> [u8; 32] {
    let mut bound: Vec<(&str, &str)> = fields
        .iter()
        .filter(|f| is_bound(f))
        .filter_map(|f| get(f).map(|v| (*f, v)))
        .collect();
    bound.sort_unstable();
    let mut h = Sha256::new();
    for (field, value) in bound {
        h.update((field.len() as u64).to_be_bytes());
        h.update(field.as_bytes());
        h.update((value.len() as u64).to_be_bytes());
        h.update(value.as_bytes());
    }
    h.finalize().into()
}
