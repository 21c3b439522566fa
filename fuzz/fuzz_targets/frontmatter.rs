//! Frontmatter split / set_fields / LoopState::parse on arbitrary text.
//!
//! Properties: no panic; when `split` succeeds, `set_fields` succeeds, keeps
//! everything outside the frontmatter byte for byte, keeps every other
//! frontmatter line in order, and equals a naive line-by-line model; a file
//! whose frontmatter is plain `key: value` lines and parses still parses after
//! `iteration` is rewritten, with the new iteration.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ralph_state::fields::frontmatter::{quote, set_fields, split};
use ralph_state::fields::state::LoopState;

const KEYS: &[&str] = &[
    "iteration",
    "session_id",
    "active",
    "outcome",
    "transcript_offset",
    "last_message_id",
    "x-new-field",
];

/// The expected rewrite of one field, from the lines alone.
fn model(text: &str, key: &str, value: &str) -> Option<String> {
    let s = split(text).ok()?;
    let yaml = &text[s.yaml.clone()];
    let lines: Vec<&str> = yaml.split_inclusive('\n').collect();
    // `key:`, `key :`, `"key":` or `'key':` at column 0, then a blank or the end.
    let spellings = [key.to_owned(), format!("\"{key}\""), format!("'{key}'")];
    let hit = lines.iter().position(|l| {
        let l = l.trim_end_matches('\n');
        spellings.iter().any(|k| {
            l.strip_prefix(k.as_str())
                .map(|rest| rest.trim_start_matches([' ', '\t']))
                .and_then(|rest| rest.strip_prefix(':'))
                .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '\t', '\r']))
        })
    });
    let mut out = String::from(&text[..s.yaml.start]);
    let new_line = format!("{key}: {value}{}", s.newline);
    match hit {
        Some(i) => {
            // Indented lines continue the value; blank lines only when an
            // indented line follows them.
            let mut j = i + 1;
            let mut k = i + 1;
            while k < lines.len() {
                if lines[k].trim().is_empty() {
                    k += 1;
                } else if lines[k].starts_with([' ', '\t']) {
                    k += 1;
                    j = k;
                } else {
                    break;
                }
            }
            lines[..i].iter().for_each(|l| out.push_str(l));
            out.push_str(&new_line);
            lines[j..].iter().for_each(|l| out.push_str(l));
        }
        None => {
            out.push_str(yaml);
            out.push_str(&new_line);
        }
    }
    out.push_str(&text[s.yaml.end..]);
    Some(out)
}

fn plain_yaml(yaml: &str) -> bool {
    yaml.lines().all(|l| {
        let l = l.strip_suffix('\r').unwrap_or(l);
        l.split_once(": ").is_some_and(|(k, v)| {
            !k.is_empty()
                && k.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
                && v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b' ')
                && !v.trim().is_empty()
        })
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    let parsed = LoopState::parse(&text);
    let _ = ralph_state::fields::state::scan_session_id(&text);

    let Ok(layout) = split(&text) else {
        assert!(parsed.is_err(), "parse succeeded without a frontmatter");
        return;
    };
    let key = KEYS[(selector as usize) % KEYS.len()];
    let value = match selector / 16 % 3 {
        0 => (u64::from(selector) * 7919).to_string(),
        1 => quote(&text[layout.body.clone()]), // any text, quoted
        _ => quote(&text.chars().take(9).collect::<String>()),
    };
    let out = set_fields(&text, &[(key, value.clone())]).expect("split succeeded before");
    assert_eq!(
        Some(out.as_str()),
        model(&text, key, &value).as_deref(),
        "set_fields differs from the line model"
    );
    let after = split(&out).expect("a rewrite keeps the frontmatter");
    assert_eq!(
        &out[after.body.clone()],
        &text[layout.body.clone()],
        "body changed"
    );
    assert_eq!(&out[..after.yaml.start], &text[..layout.yaml.start]);
    let reparsed = LoopState::parse(&out);

    // Strong round trip only for simple frontmatter (no duplicate keys,
    // flow mappings or block scalars, which a line rewrite cannot promise).
    let yaml = &text[layout.yaml.clone()];
    let mut keys: Vec<&str> = yaml
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, _)| k)
        .collect();
    let n = keys.len();
    keys.sort_unstable();
    keys.dedup();
    if let (Ok(before), true, true) = (&parsed, plain_yaml(yaml), keys.len() == n) {
        let next = before.iteration.wrapping_add(1) % 1_000_000;
        let out = set_fields(&text, &[("iteration", next.to_string())]).expect("split");
        let again = LoopState::parse(&out).expect("a simple file parses after a rewrite");
        assert_eq!(again.iteration, next);
        assert_eq!(again.prompt, before.prompt);
        assert_eq!(again.max_iterations, before.max_iterations);
        assert_eq!(again.session_id, before.session_id);
        assert_eq!(again.completion_promise, before.completion_promise);
    }
    let _ = reparsed;

    // A proven rewrite either refuses or reads back exactly.
    if let Ok(out) = ralph_state::rewrite::set_fields(
        std::path::Path::new("fuzz-loop.local.md"),
        &text,
        &[(key, value.clone())],
    ) {
        let again = LoopState::parse(&out).expect("a proven rewrite parses");
        if key == "iteration" {
            assert_eq!(again.iteration.to_string(), value);
        }
    }
});
