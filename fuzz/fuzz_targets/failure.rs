//! The breakers' reading of a check's output: `failure::mask` and
//! `failure::failure_count` on arbitrary text.
//!
//! Properties: no panic; masking is idempotent and leaves no ASCII digit
//! outside a placeholder; a count, when found, comes from the text (it is
//! never found in text without a digit, except TAP's zero `not ok` lines
//! and a summary that reports no failures).
#![no_main]

use libfuzzer_sys::fuzz_target;
use ralph_fs::failure::{failure_count, mask};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let once = mask(&text);
    assert_eq!(mask(&once), once, "masking twice changed the text");
    assert!(
        !once.bytes().any(|b| b.is_ascii_digit()),
        "a digit survived masking: {once:?}"
    );
    if let Some(n) = failure_count(&text) {
        assert!(n == 0 || text.bytes().any(|b| b.is_ascii_digit()) || text.contains("not ok"));
    }
});
