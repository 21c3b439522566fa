//! One function per picture of a loop, each a piece of HTML with inline
//! SVG (no script, nothing fetched). To show a new series, add a function
//! here and call it from `html::loop_section`. Every text from the project
//! goes through [`esc`].

use std::fmt::Write as _;

use super::model::{Breaker, Check, IterationRow, LoopView, costs_per_iteration};
use super::text::{esc, thousands};
use ralph_state::time::format_duration;

/// The drawing area of a chart, in SVG user units.
const WIDTH: f64 = 720.0;
const HEIGHT: f64 = 150.0;
/// Room for the axis labels on the left and below.
const LEFT: f64 = 56.0;
const BOTTOM: f64 = 22.0;

/// Tokens per iteration as bars: each bar stands at the loop's running
/// total after that turn, its top part what the turn added, against the
/// token budget (a dashed line) when there is one. One `g.bar` per
/// iteration, whatever is known of it.
pub(crate) fn tokens(view: &LoopView) -> String {
    let rows = &view.iterations;
    let highest = rows
        .iter()
        .filter_map(|r| r.tokens_total)
        .chain(view.max_tokens)
        .max()
        .unwrap_or(0)
        .max(1);
    let mut svg = open_svg("Tokens per iteration");
    let scale = |v: u64| (v as f64 / highest as f64) * (HEIGHT - BOTTOM - 8.0);
    let slot = (WIDTH - LEFT) / rows.len().max(1) as f64;
    let mut previous = 0;
    for (i, row) in rows.iter().enumerate() {
        let x = LEFT + slot * i as f64 + slot * 0.15;
        let w = (slot * 0.7).max(1.0);
        let total = row.tokens_total.unwrap_or(previous);
        let added = row.tokens_added(previous).unwrap_or(0);
        let base = total.saturating_sub(added);
        let y_total = HEIGHT - BOTTOM - scale(total);
        let y_base = HEIGHT - BOTTOM - scale(base);
        let _ = write!(
            svg,
            "<g class=\"bar\" data-iteration=\"{it}\"><title>iteration {it}: +{} tokens, {} in all</title>\
             <rect class=\"before\" x=\"{x:.1}\" y=\"{y_base:.1}\" width=\"{w:.1}\" height=\"{:.1}\"/>\
             <rect class=\"added\" x=\"{x:.1}\" y=\"{y_total:.1}\" width=\"{w:.1}\" height=\"{:.1}\"/></g>",
            thousands(added),
            thousands(total),
            scale(base),
            scale(added),
            it = row.iteration,
        );
        previous = total;
    }
    if let Some(limit) = view.max_tokens {
        let y = HEIGHT - BOTTOM - scale(limit);
        let _ = write!(
            svg,
            "<line class=\"budget\" x1=\"{LEFT}\" x2=\"{WIDTH}\" y1=\"{y:.1}\" y2=\"{y:.1}\"/>\
             <text class=\"budget-label\" x=\"{:.1}\" y=\"{:.1}\">budget {}</text>",
            LEFT + 4.0,
            label_baseline(y),
            thousands(limit)
        );
    }
    axis(&mut svg, &thousands(highest), rows);
    svg.push_str("</svg>");
    figure(
        "Tokens per iteration (running total; the darker top is what the turn added)",
        &svg,
    )
}

/// A budget label's baseline: above its dashed line, or below it when the
/// line is so near the top that a label above would be cut off.
fn label_baseline(line_y: f64) -> f64 {
    if line_y < 16.0 {
        line_y + 13.0
    } else {
        line_y - 4.0
    }
}

/// Dollars per iteration, when the log has them: each bar is what that
/// iteration itself spent (the logged running totals, differenced exactly).
pub(crate) fn cost(view: &LoopView) -> String {
    let rows = &view.iterations;
    let spent = costs_per_iteration(rows);
    if spent.iter().all(Option::is_none) {
        return String::new();
    }
    let highest = spent
        .iter()
        .flatten()
        .map(|m| m.0)
        .max()
        .unwrap_or(0)
        .max(1);
    let mut svg = open_svg("Dollars per iteration");
    let slot = (WIDTH - LEFT) / rows.len().max(1) as f64;
    for (i, (row, value)) in rows.iter().zip(&spent).enumerate() {
        let micros = value.map_or(0, |m| m.0);
        let h = micros as f64 / highest as f64 * (HEIGHT - BOTTOM - 8.0);
        let x = LEFT + slot * i as f64 + slot * 0.15;
        let _ = write!(
            svg,
            "<g class=\"cost-bar\" data-iteration=\"{}\" data-micro-usd=\"{micros}\"><title>iteration {}: {}</title>\
             <rect class=\"added\" x=\"{x:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{h:.1}\"/></g>",
            row.iteration,
            row.iteration,
            value.map_or_else(
                || "not logged".to_owned(),
                ralph_state::money::Money::dollars
            ),
            HEIGHT - BOTTOM - h,
            (slot * 0.7).max(1.0),
        );
    }
    axis(
        &mut svg,
        &ralph_state::money::Money(highest).dollars(),
        rows,
    );
    svg.push_str("</svg>");
    figure("Dollars per iteration (what each iteration spent)", &svg)
}

/// The iterations one after another on a time line, each as long as it took.
pub(crate) fn timeline(view: &LoopView) -> String {
    let rows = &view.iterations;
    let total: u64 = rows.iter().map(|r| r.seconds.unwrap_or(0)).sum();
    let mut svg = format!(
        "<svg class=\"chart timeline\" viewBox=\"0 0 {WIDTH} 46\" role=\"img\" aria-label=\"Time line\">"
    );
    let mut x = 0.0;
    for row in rows {
        let secs = row.seconds.unwrap_or(0);
        let w = if total == 0 {
            WIDTH / rows.len().max(1) as f64
        } else {
            secs as f64 / total as f64 * WIDTH
        };
        let class = if row.decision == "end" {
            "span end"
        } else {
            "span"
        };
        let _ = write!(
            svg,
            "<g class=\"{class}\"><title>iteration {}: {}</title>\
             <rect x=\"{x:.1}\" y=\"4\" width=\"{:.1}\" height=\"22\"/>",
            row.iteration,
            row.seconds
                .map_or_else(|| "time unknown".to_owned(), format_duration),
            (w - 1.0).max(0.5),
        );
        if w > 28.0 {
            let _ = write!(
                svg,
                "<text x=\"{:.1}\" y=\"19\" text-anchor=\"middle\">{}</text>",
                x + w / 2.0,
                row.iteration
            );
        }
        svg.push_str("</g>");
        x += w;
    }
    let _ = write!(
        svg,
        "<text class=\"axis\" x=\"0\" y=\"42\">0</text>\
         <text class=\"axis\" x=\"{WIDTH}\" y=\"42\" text-anchor=\"end\">{}</text></svg>",
        format_duration(total)
    );
    figure("Time line: each iteration as long as it took", &svg)
}

/// The `--check` results, the `--verify` gate's verdicts and a `--prd`
/// loop's story commands of each iteration, one row each (a row only when the log has any): pass, fail
/// (with the failure count when logged), or none run.
pub(crate) fn checks(view: &LoopView) -> String {
    let rows = &view.iterations;
    let mut out = String::new();
    if rows.iter().any(|r| r.check.is_some()) {
        out.push_str(&verdicts("--check per iteration", rows, |r| {
            r.check.as_ref()
        }));
    }
    if rows.iter().any(|r| r.verify.is_some()) {
        out.push_str(&verdicts("--verify gate per iteration", rows, |r| {
            r.verify.as_ref()
        }));
    }
    if rows.iter().any(|r| r.stories.is_some()) {
        out.push_str(&verdicts("Story commands per iteration", rows, |r| {
            r.stories.as_ref()
        }));
    }
    if out.is_empty() {
        out.push_str(&verdicts("Checks per iteration", rows, |r| {
            r.check.as_ref()
        }));
    }
    out
}

/// One row of verdicts, `pick` choosing which of a line's.
fn verdicts(
    what: &str,
    rows: &[IterationRow],
    pick: impl Fn(&IterationRow) -> Option<&Check>,
) -> String {
    let mut cells = String::new();
    for row in rows {
        let (class, mark, title) = match pick(row) {
            Some(c) if c.passed => ("pass", "✓".to_owned(), format!("passed {}", c.status)),
            Some(c) => (
                "fail",
                c.failures
                    .map_or_else(|| "✗".to_owned(), |n| format!("✗ {n}")),
                format!("failed {}", c.status),
            ),
            None => ("none", "·".to_owned(), "no check ran".to_owned()),
        };
        let _ = write!(
            cells,
            "<li class=\"check {class}\" title=\"{}\"><span class=\"it\">{}</span><span class=\"mark\">{}</span></li>",
            esc(&title),
            row.iteration,
            esc(&mark)
        );
    }
    format!(
        "<figure><figcaption>{} (✓ passed, ✗ failed with the number of failures when known, · none ran)</figcaption><ol class=\"checks\">{cells}</ol></figure>",
        esc(what)
    )
}

/// Each breaker's counter against its limit, as a meter; a breaker that
/// is off is left out (it cannot end the loop), and so is the figure when
/// none is on.
pub(crate) fn breakers(view: &LoopView) -> String {
    let mut rows = String::new();
    for b in view.breakers.iter().filter(|b| b.limit.is_set()) {
        let _ = write!(rows, "{}", breaker_row(b));
    }
    if rows.is_empty() {
        return String::new();
    }
    format!(
        "<figure><figcaption>Breakers: counters against their limits</figcaption><table class=\"breakers\">{rows}</table></figure>"
    )
}

fn breaker_row(b: &Breaker) -> String {
    let shown = |n: u64| {
        if b.dollars {
            ralph_state::money::Money(n).dollars()
        } else {
            thousands(n)
        }
    };
    let (limit, percent) = match b.limit.get() {
        None => ("off".to_owned(), 0.0),
        Some(limit) => (
            shown(limit),
            (b.count as f64 / limit as f64 * 100.0).min(100.0),
        ),
    };
    let hot = if b.limit.reached(b.count) {
        " reached"
    } else {
        ""
    };
    format!(
        "<tr class=\"breaker{hot}\"><th>{}</th><td class=\"num\">{} / {limit}</td>\
         <td><div class=\"meter\"><span style=\"width:{percent:.0}%\"></span></div></td></tr>",
        esc(b.label),
        shown(b.count),
    )
}

fn open_svg(label: &str) -> String {
    format!(
        "<svg class=\"chart\" viewBox=\"0 0 {WIDTH} {HEIGHT}\" role=\"img\" aria-label=\"{}\">",
        esc(label)
    )
}

/// The baseline, the top value and the first and last iteration numbers.
fn axis(svg: &mut String, top: &str, rows: &[IterationRow]) {
    let base = HEIGHT - BOTTOM;
    let _ = write!(
        svg,
        "<line class=\"axis-line\" x1=\"{LEFT}\" x2=\"{WIDTH}\" y1=\"{base}\" y2=\"{base}\"/>\
         <text class=\"axis\" x=\"{:.1}\" y=\"16\" text-anchor=\"end\">{}</text>\
         <text class=\"axis\" x=\"{:.1}\" y=\"{base}\" text-anchor=\"end\">0</text>",
        LEFT - 6.0,
        esc(top),
        LEFT - 6.0,
    );
    if let (Some(first), Some(last)) = (rows.first(), rows.last()) {
        let _ = write!(
            svg,
            "<text class=\"axis\" x=\"{LEFT}\" y=\"{:.1}\">iteration {}</text>\
             <text class=\"axis\" x=\"{WIDTH}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            HEIGHT - 4.0,
            first.iteration,
            HEIGHT - 4.0,
            last.iteration
        );
    }
}

fn figure(caption: &str, body: &str) -> String {
    format!(
        "<figure><figcaption>{}</figcaption>{body}</figure>",
        esc(caption)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_groups_digits() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1_000), "1,000");
        assert_eq!(thousands(u64::MAX), "18,446,744,073,709,551,615");
    }

    #[test]
    fn one_bar_per_iteration_even_when_tokens_are_unknown() {
        let view = LoopView {
            paths: Vec::new(),
            iterations: (1..=4)
                .map(|i| IterationRow {
                    iteration: i,
                    decision: "block".into(),
                    ..IterationRow::default()
                })
                .collect(),
            max_tokens: Some(u64::MAX),
            ..LoopView::default()
        };
        let svg = tokens(&view);
        assert_eq!(svg.matches("<g class=\"bar\"").count(), 4, "{svg}");
        assert!(!svg.contains("NaN") && !svg.contains("inf"), "{svg}");
    }
}
