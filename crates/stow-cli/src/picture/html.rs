//! One self-contained HTML page: the arena drawn on a canvas by plain
//! JavaScript, with zoom, pan, hover details, selection (aliases and
//! reuse), search, and a list of the tensors live at the peak step.
//!
//! The page (`page.html`) loads nothing from the network; the bundle's data
//! is embedded as JSON. Drawing is one pass over the tensors per frame,
//! which stays well under a frame's time for thousands of tensors.

use super::layout::{Layout, OpKind};
use serde_json::{json, Value};

const PAGE: &str = include_str!("page.html");
const TITLE_MARK: &str = "__STOW_TITLE__";
const DATA_MARK: &str = "__STOW_DATA__";

/// Renders `l` as a standalone HTML document.
pub fn render(l: &Layout<'_>) -> String {
    let title = super::text::xml_escape(model_name(l));
    let data = script_safe_json(&data(l));
    let (head, rest) = PAGE.split_once(TITLE_MARK).unwrap_or((PAGE, ""));
    let (mid, tail) = rest.split_once(DATA_MARK).unwrap_or((rest, ""));
    let mut out = String::with_capacity(PAGE.len() + title.len() + data.len());
    out.push_str(head);
    out.push_str(&title);
    out.push_str(mid);
    out.push_str(&data);
    out.push_str(tail);
    out
}

/// Renders the panels of a bundle with several memory pools
/// ([`Layout::panels`]) as one self-contained page: a heading, then one
/// panel per pool, fastest first, each the full interactive picture of
/// that pool (its own address axis, the bundle's steps, its name and fill
/// in the title) in an `<iframe srcdoc>`, so the panels zoom and select
/// independently and the page still loads nothing. One layout is drawn as
/// [`render`] draws it.
pub fn render_panels(panels: &[Layout<'_>]) -> String {
    let [first, ..] = panels else {
        return String::new();
    };
    if panels.len() == 1 {
        return render(first);
    }
    let title = super::text::xml_escape(model_name(first));
    let mut out = format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{title}: {n} memory pools</title>\n<style>body{{font-family:sans-serif;margin:12px}} .pool-panel{{margin:0 0 18px}} .pool-panel h2{{font-size:15px;margin:6px 0}} iframe{{width:100%;height:620px;border:1px solid #ccc}}</style></head>\n<body><h1 style=\"font-size:18px\">{title}: {n} memory pools, one panel per pool, fastest first</h1>\n",
        n = panels.len()
    );
    for l in panels {
        let name = l.pool.as_ref().map_or("arena", |p| p.name.as_str());
        let page = render(l);
        out.push_str(&format!(
            "<section class=\"pool-panel\" data-pool=\"{}\"><h2>{}</h2><iframe title=\"{}\" srcdoc=\"{}\"></iframe></section>\n",
            super::text::xml_escape(name),
            super::text::xml_escape(&l.summary()),
            super::text::xml_escape(name),
            super::text::xml_escape(&page)
        ));
    }
    out.push_str("</body></html>\n");
    out
}

fn model_name<'a>(l: &'a Layout<'_>) -> &'a str {
    let m = &l.contents.provenance.source_model;
    if m.is_empty() {
        "bundle"
    } else {
        m
    }
}

/// The page's data. Blocks are arrays rather than objects to keep pages of
/// thousands of tensors small; the page names the positions.
fn data(l: &Layout<'_>) -> Value {
    let kind_index = |k: OpKind| OpKind::ALL.iter().position(|&a| a == k).unwrap_or(0);
    let blocks: Vec<Value> = l
        .blocks
        .iter()
        .map(|b| {
            let (alias_kind, alias_of) = match b.alias {
                Some((k, of)) => (k as u32, i64::try_from(of).unwrap_or(-1)),
                None => (0, -1),
            };
            json!([
                b.id,
                b.tensor.name,
                kind_index(b.kind),
                b.producer.map_or(-1, |(step, _)| i64::from(step)),
                b.type_text(),
                b.offset(),
                b.size(),
                b.first,
                b.last,
                alias_kind,
                alias_of,
            ])
        })
        .collect();
    let ops: Vec<Value> = l
        .contents
        .ops
        .iter()
        .map(|o| json!([o.name, o.op_type]))
        .collect();
    json!({
        "model": match &l.pool {
            Some(p) => format!("{} pool {}", model_name(l), p.name),
            None => model_name(l).to_string(),
        },
        "summary": l.summary(),
        "peakText": l.peak_text(),
        "arena": l.arena_bytes(),
        "bound": l.lower_bound_bytes(),
        "steps": l.steps,
        "peak": l.peak_step,
        "peakBlocks": l.peak_blocks(),
        "live": l.live,
        "kinds": OpKind::ALL.iter().map(|k| json!([k.name(), k.colour()])).collect::<Vec<_>>(),
        "ops": ops,
        "blocks": blocks,
    })
}

/// JSON that can sit inside a `<script>` element: a tensor named
/// `</script>` must not end it. `<` only occurs inside JSON strings, where
/// `\u003c` means the same.
fn script_safe_json(v: &Value) -> String {
    v.to_string().replace('<', "\\u003c")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::picture::layout::tests::sample;

    #[test]
    fn page_embeds_the_data_and_nothing_remote() {
        let mut c = sample();
        c.tensors[0].name = "</script><b>".into();
        c.provenance.source_model = "m<1>.onnx".into();
        let page = render(&Layout::new(&c));
        assert!(!page.contains(TITLE_MARK) && !page.contains(DATA_MARK));
        assert_eq!(
            page.matches("</script>").count(),
            2,
            "only the page's own scripts end"
        );
        assert!(page.contains("<title>m&lt;1&gt;.onnx"));
        assert!(page.contains("\\u003c/script>\\u003cb>"));
        for remote in ["http://", "https://", "//cdn", "src=\""] {
            assert!(!page.contains(remote), "{remote}");
        }
        let start = page.find("type=\"application/json\">").unwrap() + 24;
        let end = start + page[start..].find("</script>").unwrap();
        let v: Value = serde_json::from_str(&page[start..end]).unwrap();
        assert_eq!(v["blocks"].as_array().unwrap().len(), 3);
        assert_eq!(v["blocks"][0][1], "</script><b>");
    }
}
