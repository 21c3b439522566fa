//! Promise finder: `spoken_promises` and `speaks` on arbitrary replies.
//!
//! Input: the first line is the expected promise, the rest is the reply.
//! Properties: no panic; every spoken promise is already normalised and has
//! no tag or mask inside; `speaks` agrees with `spoken_promises`; a reply that
//! ends with a plainly spoken tag (after a blank line, outside any open code
//! fence) speaks it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ralph_core::reply::promise::{normalise, speaks, spoken_promises};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let (expected, reply) = text.split_once('\n').unwrap_or((&text, ""));

    let found = spoken_promises(reply);
    for p in &found {
        assert_eq!(&normalise(p), p, "spoken promise not normalised");
        assert!(!p.contains("<promise>"), "nested opening tag kept: {p:?}");
        assert!(!p.contains('\u{E000}'), "masked text leaked: {p:?}");
    }
    let want = normalise(expected);
    assert_eq!(
        speaks(reply, expected),
        !want.is_empty() && found.contains(&want),
        "speaks() disagrees with spoken_promises()"
    );

    // A reply with balanced fences that ends in a bare, plainly spoken tag
    // must speak it (the promise text itself avoids markup characters).
    let clean: String = expected
        .chars()
        .filter(|c| !matches!(c, '<' | '>' | '`' | '~' | '\u{E000}'))
        .collect();
    let fences = reply
        .lines()
        .filter(|l| {
            let t = l.trim_start_matches(' ');
            t.starts_with("```") || t.starts_with("~~~")
        })
        .count();
    // An unclosed `<promise>` earlier in the prose must not swallow the
    // real tag (the first finding of this target, fixed since).
    if !normalise(&clean).is_empty() && fences == 0 {
        let spoken = format!("{reply}\n\n<promise>{clean}</promise>\n");
        assert!(
            speaks(&spoken, &clean),
            "a plainly spoken promise was missed: {spoken:?}"
        );
    }
});
