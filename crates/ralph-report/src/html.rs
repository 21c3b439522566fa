//! The report as one self-contained HTML page: inline CSS (a light and a
//! dark theme, a print layout) and inline SVG, no script, nothing to fetch.
//! A Content-Security-Policy that forbids every load and every script
//! stands behind the escaping: even a string that got through unescaped
//! could not run or call out.

use std::fmt::Write as _;

use super::charts;
use super::model::{IterationRow, LoopView, Report, StoryRow};
pub(crate) use super::text::esc;
use super::text::{esc_block, thousands};
use ralph_state::fields::limit::Limit;
use ralph_state::fields::outcome::Outcome;
use ralph_state::time::format_duration;

/// The whole page.
pub fn render(report: &Report) -> String {
    let title = match report.loops.as_slice() {
        [one] if report.stories.is_empty() => format!("ralph report: {}", one.name),
        _ => "ralph report".to_owned(),
    };
    let mut body = String::new();
    let _ = write!(
        body,
        "<header><h1>{}</h1><p class=\"meta\">{} · made {}</p></header>",
        esc(&title),
        esc(&report.project),
        esc(&report.generated_at)
    );
    if !report.stories.is_empty() {
        body.push_str(&fleet(&report.stories));
    }
    for view in &report.loops {
        body.push_str(&loop_section(view));
    }
    if report.loops.is_empty() && report.stories.is_empty() {
        body.push_str("<p>No loops in this project yet.</p>");
    }
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{}</title><style>{STYLE}</style></head><body>{body}</body></html>\n",
        esc(&title)
    )
}

/// One loop: its outcome and why, its figures, then one chart per series.
fn loop_section(view: &LoopView) -> String {
    let (tone, words) = headline(view);
    let mut out = format!(
        "<section class=\"loop {}\" id=\"loop-{}\"><h2><span class=\"badge {tone}\">{}</span> <code>{}</code> <span class=\"outcome\">{}</span></h2>",
        esc(&view.state),
        esc(&view.name),
        esc(view.outcome.as_deref().unwrap_or(&view.state)),
        esc(&view.name),
        esc(&words),
    );
    if let Some(why) = &view.why {
        let _ = write!(out, "<p class=\"reason\">{}</p>", esc_block(why));
    }
    if !view.task.is_empty() {
        let _ = write!(
            out,
            "<p class=\"task\">task: <q>{}</q></p>",
            esc(&view.task)
        );
    }
    for rule in &view.paths {
        let _ = write!(out, "<p class=\"task\">{}</p>", esc(rule));
    }
    out.push_str(&facts(view));
    if let Some(e) = &view.error {
        let _ = write!(out, "<p class=\"error\">error: {}</p>", esc(e));
    }
    if view.iterations.is_empty() {
        out.push_str("<p>No iteration logged yet.</p>");
    } else {
        out.push_str(&charts::timeline(view));
        out.push_str(&charts::tokens(view));
        out.push_str(&charts::cost(view));
        out.push_str(&charts::checks(view));
    }
    out.push_str(&charts::breakers(view));
    out.push_str(&receipt(view));
    out.push_str(&iteration_table(view));
    out.push_str("</section>");
    out
}

/// The tone of the outcome's badge (a CSS class) and its words, as the
/// end notice says them. Text, not an emoji: a printer or a system without
/// an emoji font shows it too.
fn headline(view: &LoopView) -> (&'static str, String) {
    match view.outcome.as_deref() {
        Some(word) => match Outcome::from_word(word) {
            Some(Outcome::Completed) => ("ok", Outcome::Completed.headline().1.to_owned()),
            Some(o @ (Outcome::MaxIterations | Outcome::Cancelled | Outcome::Guard(_))) => {
                ("warn", o.headline().1.to_owned())
            }
            Some(o) => ("bad", o.headline().1.to_owned()),
            None => ("bad", "ended".to_owned()),
        },
        None => ("live", format!("{}, still running", view.state)),
    }
}

fn facts(view: &LoopView) -> String {
    let mut items = Vec::new();
    match (view.iteration, view.max_iterations) {
        (Some(i), Some(Limit::Unlimited)) => items.push(format!("iteration {i} (no limit)")),
        (Some(i), Some(m)) => items.push(format!("iteration {i} of {m}")),
        _ => {}
    }
    if let Some(s) = view.elapsed_secs {
        items.push(format!("ran {}", format_duration(s)));
    }
    if let Some(t) = view.tokens_used {
        let budget = view
            .max_tokens
            .map(|m| format!(" of {}", thousands(m)))
            .unwrap_or_default();
        let tokens = ralph_state::plural::noun(t, "token", "tokens");
        items.push(format!("{} {tokens}{budget}", thousands(t)));
    }
    if let Some(c) = view.cost_usd {
        let budget = view
            .max_cost_usd
            .map(|m| format!(" of {}", m.dollars()))
            .unwrap_or_default();
        items.push(format!("{} spent{budget}", c.dollars()));
    }
    if let Some(s) = &view.started_at {
        items.push(format!("started {s}"));
    }
    if let Some(e) = &view.ended_at {
        items.push(format!("ended {e}"));
    }
    let list: String = items
        .iter()
        .map(|i| format!("<li>{}</li>", esc(i)))
        .collect();
    format!("<ul class=\"facts\">{list}</ul>")
}

fn receipt(view: &LoopView) -> String {
    if view.receipt.is_empty() {
        return String::new();
    }
    let rows: String = view
        .receipt
        .iter()
        .map(|(k, v)| format!("<tr><th>{}</th><td>{}</td></tr>", esc(k), esc(v)))
        .collect();
    format!(
        "<figure class=\"receipt\"><figcaption>Receipt</figcaption><table>{rows}</table></figure>"
    )
}

/// `41% of 200k`, `82k, window unknown`, `–`; `compacted (auto)` after
/// it when the client compacted during the iteration.
fn context_words(r: &IterationRow) -> String {
    let fill = r.context.map_or_else(|| "–".to_owned(), |f| f.words());
    match &r.compacted {
        Some(trigger) => format!("{fill} · compacted ({trigger})"),
        None => fill,
    }
}

/// Every iteration in words, for print and for readers without the charts.
fn iteration_table(view: &LoopView) -> String {
    if view.iterations.is_empty() {
        return String::new();
    }
    let mut rows = String::new();
    let mut previous = 0;
    let spent = super::model::costs_per_iteration(&view.iterations);
    for (r, cost) in view.iterations.iter().zip(spent) {
        let added = r
            .tokens_added(previous)
            .map_or_else(|| "–".to_owned(), thousands);
        previous = r.tokens_total.unwrap_or(previous);
        let _ = write!(
            rows,
            "<tr><td class=\"num\">{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td><td class=\"num\">{}</td><td>{}</td><td>{}</td><td class=\"why\">{}</td></tr>",
            r.iteration,
            esc(&if r.resumed {
                format!("{} (after a resume)", r.decision)
            } else {
                r.decision.clone()
            }),
            r.seconds.map_or_else(|| "–".to_owned(), format_duration),
            added,
            esc(&context_words(r)),
            cost.map_or_else(|| "–".to_owned(), ralph_state::money::Money::dollars),
            esc(&verdict_words(r.check.as_ref())),
            esc(&verdict_words(r.verify.as_ref())),
            esc_block(&r.why),
        );
    }
    format!(
        "<details open><summary>Iterations</summary><table class=\"iterations\"><thead><tr><th>#</th><th>decision</th><th>took</th><th>tokens</th><th>context</th><th>$</th><th>--check</th><th>--verify</th><th>why</th></tr></thead><tbody>{rows}</tbody></table></details>"
    )
}

/// A verdict in words for the table: `passed`, `failed exit 1, 3 failures`, `–`.
fn verdict_words(verdict: Option<&super::model::Check>) -> String {
    match verdict {
        Some(c) if c.passed => "passed".to_owned(),
        Some(c) => format!(
            "failed {}{}",
            c.status,
            c.failures
                .map(|n| format!(", {}", ralph_state::plural::count(n, "failure", "failures")))
                .unwrap_or_default()
        ),
        None => "–".to_owned(),
    }
}

/// A `--parallel` run: one row per story.
fn fleet(stories: &[StoryRow]) -> String {
    let longest = stories.iter().map(|s| s.seconds).max().unwrap_or(0).max(1);
    let mut rows = String::new();
    for s in stories {
        let percent = s.seconds as f64 / longest as f64 * 100.0;
        let _ = write!(
            rows,
            "<tr class=\"story {}\"><th>{}</th><td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
             <td><div class=\"meter\"><span style=\"width:{percent:.0}%\"></span></div>{}</td><td><code>{}</code></td><td>{}</td></tr>",
            esc(&s.state),
            esc(&s.story),
            esc(&s.state),
            esc(&s.outcome),
            s.iterations,
            thousands(s.tokens),
            esc(&format_duration(s.seconds)),
            esc(&s.branch),
            esc(&s.note),
        );
    }
    format!(
        "<section class=\"fleet\"><h2>Stories of the parallel run</h2><table class=\"stories\"><thead><tr><th>story</th><th>state</th><th>outcome</th><th>iterations</th><th>tokens</th><th>time</th><th>branch</th><th>note</th></tr></thead><tbody>{rows}</tbody></table></section>"
    )
}

const STYLE: &str = "
:root{--bg:#fff;--fg:#1d2330;--muted:#5b6475;--card:#f5f7fa;--line:#d5dae3;--accent:#2f6fde;--accent2:#9dbcf2;--ok:#1f8a4c;--bad:#c2362b;--warn:#b26a00}
@media (prefers-color-scheme:dark){:root{--bg:#14171d;--fg:#e6e9ef;--muted:#9aa3b5;--card:#1d222b;--line:#333a47;--accent:#6ea1ff;--accent2:#33507f;--ok:#4cc47f;--bad:#ff6b5e;--warn:#e0a040}}
*{box-sizing:border-box}
body{margin:0 auto;max-width:960px;padding:24px;background:var(--bg);color:var(--fg);font:15px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif}
h1{font-size:22px;margin:0}h2{font-size:18px;margin:0 0 6px}
.meta,.task,figcaption,.axis{color:var(--muted)}
section{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:16px;margin:18px 0}
.outcome{font-weight:normal}.reason{margin:4px 0;font-weight:600;white-space:pre-wrap}
.badge{display:inline-block;font-size:13px;padding:1px 8px;border-radius:10px;color:#fff;background:var(--warn);vertical-align:2px}.badge.ok{background:var(--ok)}.badge.bad{background:var(--bad)}.badge.live{background:var(--accent)}
.facts{display:flex;flex-wrap:wrap;gap:6px 18px;padding:0;margin:8px 0;list-style:none}
figure{margin:14px 0}figcaption{font-size:13px;margin-bottom:4px}
.chart{width:100%;height:auto;display:block}
.bar .before,.cost-bar .before{fill:var(--accent2)}.bar .added,.cost-bar .added{fill:var(--accent)}
.budget{stroke:var(--bad);stroke-width:1.5;stroke-dasharray:6 4}.budget-label{fill:var(--bad);font-size:11px}
.axis{font-size:11px;fill:var(--muted)}.axis-line{stroke:var(--line)}
.timeline .span rect{fill:var(--accent)}.timeline .span:nth-child(even) rect{fill:var(--accent2)}.timeline .end rect{fill:var(--ok)}
.timeline .span text{font-size:11px;fill:var(--bg)}
.checks{display:flex;flex-wrap:wrap;gap:4px;list-style:none;padding:0;margin:0}
.check{min-width:34px;text-align:center;border-radius:4px;padding:2px 4px;font-size:12px;border:1px solid var(--line)}
.check .it{display:block;color:var(--muted);font-size:10px}.check.pass{color:var(--ok)}.check.fail{color:var(--bad);font-weight:600}
table{border-collapse:collapse;width:100%}th,td{text-align:left;padding:3px 8px;border-bottom:1px solid var(--line);vertical-align:top}
.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.meter{height:10px;min-width:80px;background:var(--bg);border:1px solid var(--line);border-radius:5px;overflow:hidden}
.meter span{display:block;height:100%;background:var(--accent)}.breaker.reached .meter span{background:var(--bad)}
.breakers th{font-weight:normal;width:40%}
td.why{color:var(--muted);word-break:break-word;white-space:pre-wrap}
.story.merged th,.story.ready th{color:var(--ok)}.story.conflict th,.story.verify_failed th,.story.merge_failed th{color:var(--bad)}
.error{color:var(--bad)}
code,q{word-break:break-all}
@media print{:root{--bg:#fff;--fg:#000;--muted:#444;--card:#fff;--line:#bbb;--accent:#2f6fde;--accent2:#9dbcf2}
body{max-width:none;padding:0}section{break-inside:avoid;border-color:#999}details{display:block}
*{-webkit-print-color-adjust:exact;print-color-adjust:exact}}
";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::IterationRow;

    #[test]
    fn hostile_text_is_shown_never_parsed() {
        assert_eq!(
            esc("<script>alert('x')</script> & \"q\""),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;q&quot;"
        );
        let view = LoopView {
            paths: Vec::new(),
            name: "n\"><img src=x onerror=alert(1)>".into(),
            task: "<script>alert(1)</script>".into(),
            why: Some("</p><iframe src=http://x>".into()),
            iterations: vec![IterationRow {
                iteration: 1,
                decision: "end".into(),
                why: "<b onmouseover=x>".into(),
                ..IterationRow::default()
            }],
            ..LoopView::default()
        };
        let page = render(&Report {
            loops: vec![view],
            stories: vec![StoryRow {
                story: "<svg onload=alert(1)>".into(),
                note: "<script>".into(),
                ..StoryRow::default()
            }],
            ..Report::default()
        });
        for bad in ["<script", "<img", "<iframe", "<b ", "onload=alert(1)>"] {
            assert!(!page.contains(bad), "{bad} in {page}");
        }
        assert!(page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    }

    #[test]
    fn the_page_loads_nothing_and_runs_nothing() {
        let page = render(&Report::default());
        assert!(page.contains("default-src 'none'"));
        for bad in ["http://", "https://", "<script", "url(", "@import"] {
            assert!(!page.contains(bad), "{bad}");
        }
        assert!(page.contains("prefers-color-scheme:dark") && page.contains("@media print"));
    }
}
