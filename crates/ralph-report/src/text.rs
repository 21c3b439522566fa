//! Text for the page: HTML escaping (after `display::line`) and digit groups;
//! shared by the charts and the page around them.

/// `text` safe as HTML text and as a quoted attribute value; control and
/// bidirectional characters are shown escaped first (`display::line`).
pub(crate) fn esc(text: &str) -> String {
    let shown = ralph_fs::display::line(text);
    let mut out = String::with_capacity(shown.len());
    for c in shown.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `text` as [`esc`] makes it, but its line breaks kept as line breaks (the
/// page shows them with `white-space: pre-wrap`), never as `\n`.
pub(crate) fn esc_block(text: &str) -> String {
    text.split('\n').map(esc).collect::<Vec<_>>().join("\n")
}

/// `1234567` as `1,234,567`.
pub(crate) fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}
