//! A static SVG picture of the arena.
//!
//! The plot group `<g id="plot">` carries its geometry as `data-` attributes
//! (left, top, width, height in pixels; steps; bytes at the top edge) so
//! that tests and tools can map a tensor to pixels without parsing paths.
//! Step `s` spans `[s, s + 1)` on x; offset 0 is at the bottom.

use super::layout::{Layout, OpKind};
use super::text::{axis_unit, human_bytes, nice_step, tick_label, xml_escape};
use std::fmt::Write as _;
use stow_bundle::AliasKind;

/// Picture width in pixels.
pub const WIDTH: f64 = 1200.0;
/// Picture height in pixels.
pub const HEIGHT: f64 = 780.0;
const LEFT: f64 = 80.0;
const TOP: f64 = 70.0;
const RIGHT: f64 = 170.0;
const BOTTOM: f64 = 130.0;
/// Space above the arena line, so the line and the empty space over it
/// show.
const HEADROOM: f64 = 1.06;

/// Line colours; far from every [`OpKind::colour`].
const ARENA_LINE: &str = "#000000";
const BOUND_LINE: &str = "#d62728";
const PEAK_FILL: &str = "#ffe08a";

/// Maps steps and bytes to pixels.
#[derive(Clone, Copy, Debug)]
pub struct Geometry {
    /// Left edge of the plot.
    pub x0: f64,
    /// Top edge of the plot.
    pub y0: f64,
    /// Plot width.
    pub width: f64,
    /// Plot height.
    pub height: f64,
    /// Steps across the plot.
    pub steps: f64,
    /// Bytes at the top edge.
    pub ymax: f64,
}

impl Geometry {
    /// The geometry of `l`'s picture.
    pub fn of(l: &Layout<'_>) -> Geometry {
        let top = l.arena_bytes().max(l.lower_bound_bytes()).max(1) as f64;
        Geometry {
            x0: LEFT,
            y0: TOP,
            width: WIDTH - LEFT - RIGHT,
            height: HEIGHT - TOP - BOTTOM,
            steps: f64::from(l.steps.max(1)),
            ymax: top * HEADROOM,
        }
    }

    /// x of the left edge of `step`.
    pub fn x(&self, step: f64) -> f64 {
        self.x0 + self.width * (step / self.steps).clamp(0.0, 1.0)
    }

    /// y of byte offset `bytes`, kept inside the plot.
    pub fn y(&self, bytes: f64) -> f64 {
        self.y0 + self.height * (1.0 - (bytes / self.ymax).clamp(0.0, 1.0))
    }
}

/// Renders `l` as a standalone SVG document.
pub fn render(l: &Layout<'_>) -> String {
    let g = Geometry::of(l);
    let mut s = String::with_capacity(512 + l.blocks.len() * 400);
    let _ = write!(
        s,
        r##"<?xml version="1.0" encoding="UTF-8"?>
<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">
<rect width="{WIDTH}" height="{HEIGHT}" fill="#ffffff"/>
"##
    );
    header(&mut s, l);
    let _ = writeln!(
        s,
        r#"<g id="plot" data-x="{}" data-y="{}" data-width="{}" data-height="{}" data-steps="{}" data-ymax="{}">"#,
        g.x0, g.y0, g.width, g.height, g.steps, g.ymax
    );
    y_axis(&mut s, l, &g);
    peak_band(&mut s, l, &g);
    blocks(&mut s, l, &g);
    links(&mut s, l, &g);
    peak_outline(&mut s, l, &g);
    limit_lines(&mut s, l, &g);
    s.push_str("</g>\n");
    x_axis(&mut s, l, &g);
    legend(&mut s, std::slice::from_ref(l), &g);
    s.push_str("</svg>\n");
    s
}

/// Height of one pool's panel in [`render_panels`], in pixels.
pub const PANEL_HEIGHT: f64 = 300.0;
/// Space between two panels, for the next panel's title.
const PANEL_GAP: f64 = 44.0;

/// Renders the panels of a bundle with several memory pools
/// ([`Layout::panels`]) as one SVG document: one `<g class="pool-panel">`
/// per pool, stacked fastest first, each with its own address axis sized
/// to its pool, its name and fill in its title, and the same steps across.
/// One layout is drawn as [`render`] draws it.
pub fn render_panels(panels: &[Layout<'_>]) -> String {
    match panels {
        [] => String::new(),
        [one] => render(one),
        [first, ..] => {
            let n = panels.len() as f64;
            let height = TOP + n * PANEL_HEIGHT + (n - 1.0) * PANEL_GAP + BOTTOM;
            let mut s = String::with_capacity(
                1024 + panels.iter().map(|l| l.blocks.len() * 400).sum::<usize>(),
            );
            let _ = write!(
                s,
                r##"<?xml version="1.0" encoding="UTF-8"?>
<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">
<rect width="{WIDTH}" height="{height}" fill="#ffffff"/>
"##
            );
            let p = &first.contents.provenance;
            let model = if p.source_model.is_empty() {
                "bundle"
            } else {
                &p.source_model
            };
            let _ = writeln!(
                s,
                r#"<text x="{LEFT}" y="22" font-size="16" font-weight="bold">{}: {} memory pools over execution steps</text>"#,
                xml_escape(model),
                panels.len()
            );
            let _ = writeln!(
                s,
                r#"<text x="{LEFT}" y="40">{}</text>"#,
                xml_escape(&format!(
                    "pools {} bytes in all, one panel per pool, fastest first, each over its own addresses",
                    panels.iter().map(|l| l.arena_bytes()).fold(0u64, u64::saturating_add)
                ))
            );
            let mut g = Geometry::of(first);
            for (i, l) in panels.iter().enumerate() {
                let top = TOP + i as f64 * (PANEL_HEIGHT + PANEL_GAP);
                g = Geometry {
                    y0: top,
                    height: PANEL_HEIGHT,
                    ..Geometry::of(l)
                };
                let name = l.pool.as_ref().map_or("arena", |p| p.name.as_str());
                let _ = writeln!(
                    s,
                    r#"<g class="pool-panel" data-pool="{}" data-x="{}" data-y="{}" data-width="{}" data-height="{}" data-steps="{}" data-ymax="{}" data-bytes="{}" data-peak="{}">"#,
                    xml_escape(name),
                    g.x0,
                    g.y0,
                    g.width,
                    g.height,
                    g.steps,
                    g.ymax,
                    l.arena_bytes(),
                    l.peak_bytes()
                );
                let _ = writeln!(
                    s,
                    r#"<text class="pool-title" x="{}" y="{:.2}" font-weight="bold">{}</text>"#,
                    g.x0,
                    top - 8.0,
                    xml_escape(&l.summary())
                );
                y_axis(&mut s, l, &g);
                peak_band(&mut s, l, &g);
                blocks(&mut s, l, &g);
                links(&mut s, l, &g);
                peak_outline(&mut s, l, &g);
                limit_lines(&mut s, l, &g);
                s.push_str("</g>\n");
            }
            // The steps are the same in every panel: one axis under the
            // last, marking the peak of the fastest pool.
            x_axis(&mut s, first, &g);
            legend(&mut s, panels, &g);
            s.push_str("</svg>\n");
            s
        }
    }
}

fn header(s: &mut String, l: &Layout<'_>) {
    let p = &l.contents.provenance;
    let model = if p.source_model.is_empty() {
        "bundle"
    } else {
        &p.source_model
    };
    let _ = writeln!(
        s,
        r#"<text x="{LEFT}" y="22" font-size="16" font-weight="bold">{}: arena over execution steps</text>"#,
        xml_escape(model)
    );
    let _ = writeln!(
        s,
        r#"<text x="{LEFT}" y="40">{}</text>"#,
        xml_escape(&l.summary())
    );
    let _ = writeln!(
        s,
        r#"<text x="{LEFT}" y="57" fill="{BOUND_LINE}">{}</text>"#,
        xml_escape(&l.peak_text())
    );
}

fn y_axis(s: &mut String, l: &Layout<'_>, g: &Geometry) {
    let (unit, per) = axis_unit(g.ymax);
    let step = nice_step(g.ymax / per, 6);
    let bottom = g.y0 + g.height;
    let _ = writeln!(
        s,
        r##"<line x1="{x}" y1="{bottom}" x2="{x}" y2="{top}" stroke="#444444"/>"##,
        x = g.x0,
        top = g.y0
    );
    let mut i = 0u32;
    loop {
        let v = f64::from(i) * step;
        let bytes = v * per;
        if bytes > g.ymax || i > 1000 {
            break;
        }
        let y = g.y(bytes);
        // Grid lines stop at the arena line: nothing is drawn above it.
        if bytes <= l.arena_bytes() as f64 && i > 0 {
            let _ = writeln!(
                s,
                r##"<line x1="{}" y1="{y:.2}" x2="{}" y2="{y:.2}" stroke="#ececec"/>"##,
                g.x0,
                g.x0 + g.width
            );
        }
        let _ = writeln!(
            s,
            r##"<line x1="{}" y1="{y:.2}" x2="{}" y2="{y:.2}" stroke="#444444"/><text x="{}" y="{:.2}" text-anchor="end">{} {unit}</text>"##,
            g.x0 - 5.0,
            g.x0,
            g.x0 - 8.0,
            y + 4.0,
            tick_label(v)
        );
        i += 1;
    }
    let mid = g.y0 + g.height / 2.0;
    let _ = writeln!(
        s,
        r#"<text x="18" y="{mid}" text-anchor="middle" transform="rotate(-90 18 {mid})">{} offset ({unit})</text>"#,
        l.memory_name()
    );
}

fn peak_band(s: &mut String, l: &Layout<'_>, g: &Geometry) {
    let p = f64::from(l.peak_step);
    let (x1, x2) = (g.x(p), g.x(p + 1.0));
    let (top, bottom) = (g.y(l.arena_bytes() as f64), g.y(0.0));
    let _ = writeln!(
        s,
        r#"<rect id="peak" x="{x1:.2}" y="{top:.2}" width="{:.2}" height="{:.2}" fill="{PEAK_FILL}"><title>{}</title></rect>"#,
        (x2 - x1).max(1.0),
        bottom - top,
        xml_escape(&l.peak_text())
    );
}

/// The peak column's edge, drawn over the tensors that fill it.
fn peak_outline(s: &mut String, l: &Layout<'_>, g: &Geometry) {
    let p = f64::from(l.peak_step);
    let (x1, x2) = (g.x(p), g.x(p + 1.0));
    let (top, bottom) = (g.y(l.arena_bytes() as f64), g.y(0.0));
    let _ = writeln!(
        s,
        r#"<rect id="peak-outline" x="{x1:.2}" y="{top:.2}" width="{:.2}" height="{:.2}" fill="none" stroke="{BOUND_LINE}" stroke-width="1.5"/>"#,
        (x2 - x1).max(1.0),
        bottom - top,
    );
}

fn blocks(s: &mut String, l: &Layout<'_>, g: &Geometry) {
    for (b, blk) in l.blocks.iter().enumerate() {
        let x1 = g.x(f64::from(blk.first));
        let x2 = g.x(f64::from(blk.last) + 1.0);
        let y1 = g.y(blk.end() as f64);
        let y2 = g.y(blk.offset() as f64);
        let (w, h) = (x2 - x1, y2 - y1);
        // Outlines only where they leave room for the fill: a white edge
        // separates neighbours, a dashed dark one marks shared bytes.
        let stroke = if w < 3.0 || h < 3.0 {
            String::new()
        } else if blk.alias.is_some() {
            r##" stroke="#222222" stroke-width="0.8" stroke-dasharray="3 2""##.into()
        } else {
            r##" stroke="#ffffff" stroke-width="0.6""##.into()
        };
        let _ = writeln!(
            s,
            r#"<rect data-id="{}" data-kind="{}" x="{x1:.2}" y="{y1:.2}" width="{w:.2}" height="{h:.2}" fill="{}"{stroke}><title>{}</title></rect>"#,
            blk.id,
            blk.kind.name(),
            blk.kind.colour(),
            xml_escape(&l.describe(b))
        );
    }
}

fn link_dash(kind: AliasKind) -> &'static str {
    match kind {
        AliasKind::InPlace | AliasKind::DepthwiseInPlace => "",
        AliasKind::View => r#" stroke-dasharray="5 3""#,
        AliasKind::ConcatSlice | AliasKind::InputRows => r#" stroke-dasharray="1 2""#,
    }
}

fn links(s: &mut String, l: &Layout<'_>, g: &Geometry) {
    let centre = |b: usize| {
        let blk = &l.blocks[b];
        (
            (g.x(f64::from(blk.first)) + g.x(f64::from(blk.last) + 1.0)) / 2.0,
            (g.y(blk.offset() as f64) + g.y(blk.end() as f64)) / 2.0,
        )
    };
    for (b, blk) in l.blocks.iter().enumerate() {
        let Some((kind, of)) = blk.alias else {
            continue;
        };
        let ((xa, ya), (xb, yb)) = (centre(of), centre(b));
        let _ = writeln!(
            s,
            r##"<g class="link" stroke="#111111" fill="#111111"><line x1="{xa:.2}" y1="{ya:.2}" x2="{xb:.2}" y2="{yb:.2}" stroke-width="1"{}/><circle cx="{xb:.2}" cy="{yb:.2}" r="1.8"/><title>{} alias: {} of {}</title></g>"##,
            link_dash(kind),
            kind.name(),
            xml_escape(&blk.tensor.name),
            xml_escape(&l.blocks[of].tensor.name),
        );
    }
}

fn limit_lines(s: &mut String, l: &Layout<'_>, g: &Geometry) {
    let x2 = g.x0 + g.width;
    let ya = g.y(l.arena_bytes() as f64);
    let yb = g.y(l.lower_bound_bytes() as f64);
    let _ = writeln!(
        s,
        r#"<line id="arena-line" x1="{}" y1="{ya:.2}" x2="{x2}" y2="{ya:.2}" stroke="{ARENA_LINE}" stroke-width="1.5"/>"#,
        g.x0
    );
    let _ = writeln!(
        s,
        r#"<line id="bound-line" x1="{}" y1="{yb:.2}" x2="{x2}" y2="{yb:.2}" stroke="{BOUND_LINE}" stroke-width="1.5" stroke-dasharray="6 4"/>"#,
        g.x0
    );
    // Labels sit in the right margin; when the lines nearly meet, the
    // bound's label moves below the arena's.
    let label_yb = if (yb - ya).abs() < 14.0 {
        ya + 16.0
    } else {
        yb + 4.0
    };
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{:.2}">{} {}</text><text x="{}" y="{label_yb:.2}" fill="{BOUND_LINE}">{} {}</text>"#,
        x2 + 6.0,
        ya + 4.0,
        l.pool.as_ref().map_or("arena", |p| p.name.as_str()),
        human_bytes(l.arena_bytes()),
        x2 + 6.0,
        if l.pool.is_some() {
            "peak"
        } else {
            "lower bound"
        },
        human_bytes(l.lower_bound_bytes())
    );
}

fn x_axis(s: &mut String, l: &Layout<'_>, g: &Geometry) {
    let y = g.y0 + g.height;
    let _ = writeln!(
        s,
        r##"<line x1="{}" y1="{y}" x2="{}" y2="{y}" stroke="#444444"/>"##,
        g.x0,
        g.x0 + g.width
    );
    let every = nice_step(g.steps, 10).round().max(1.0);
    let mut step = 0.0;
    while step < g.steps {
        let x = g.x(step + 0.5);
        let _ = writeln!(
            s,
            r##"<line x1="{x:.2}" y1="{y}" x2="{x:.2}" y2="{}" stroke="#444444"/><text x="{x:.2}" y="{}" text-anchor="middle">{step}</text>"##,
            y + 4.0,
            y + 24.0
        );
        step += every;
    }
    let px = g.x(f64::from(l.peak_step) + 0.5);
    let _ = writeln!(
        s,
        r#"<path id="peak-marker" d="M{px:.2} {} l-5 8 h10 z" fill="{BOUND_LINE}"/><text x="{:.2}" y="{}" fill="{BOUND_LINE}" font-size="11">peak</text>"#,
        y + 2.0,
        px + 7.0,
        y + 11.0
    );
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">execution step</text>"#,
        g.x0 + g.width / 2.0,
        y + 42.0
    );
}

fn legend(s: &mut String, panels: &[Layout<'_>], g: &Geometry) {
    let all = || panels.iter().flat_map(|l| &l.blocks);
    let mut kinds: Vec<OpKind> = all().map(|b| b.kind).collect();
    kinds.sort();
    kinds.dedup();
    let mut aliases: Vec<AliasKind> = all().filter_map(|b| b.alias.map(|a| a.0)).collect();
    aliases.sort_by_key(|k| *k as u32);
    aliases.dedup();
    let mut x = g.x0;
    let mut y = g.y0 + g.height + 62.0;
    // Items flow left to right and wrap; text width is estimated, as the
    // renderer's font is unknown here.
    let mut room = |text_len: usize| {
        let w = 26.0 + 6.5 * text_len as f64;
        if x + w > WIDTH - 10.0 {
            x = g.x0;
            y += 20.0;
        }
        let at = (x, y);
        x += w;
        at
    };
    s.push_str("<g id=\"legend\">\n");
    for k in kinds {
        let (lx, ly) = room(k.name().len());
        let _ = writeln!(
            s,
            r#"<rect data-kind="{}" x="{lx}" y="{}" width="14" height="12" fill="{}"/><text x="{}" y="{ly}">{}</text>"#,
            k.name(),
            ly - 10.0,
            k.colour(),
            lx + 18.0,
            k.name()
        );
    }
    for k in aliases {
        let text = format!("{} alias", k.name());
        let (lx, ly) = room(text.len());
        let _ = writeln!(
            s,
            r##"<line x1="{lx}" y1="{}" x2="{}" y2="{}" stroke="#111111"{}/><text x="{}" y="{ly}">{text}</text>"##,
            ly - 4.0,
            lx + 14.0,
            ly - 4.0,
            link_dash(k),
            lx + 18.0
        );
    }
    let (lx, ly) = room(9);
    let _ = writeln!(
        s,
        r#"<rect x="{lx}" y="{}" width="14" height="12" fill="{PEAK_FILL}"/><text x="{}" y="{ly}">peak step</text>"#,
        ly - 10.0,
        lx + 18.0
    );
    for (text, colour, dash) in [
        ("arena size", ARENA_LINE, ""),
        ("lower bound", BOUND_LINE, r#" stroke-dasharray="6 4""#),
    ] {
        let (lx, ly) = room(text.len());
        let _ = writeln!(
            s,
            r#"<line x1="{lx}" y1="{}" x2="{}" y2="{}" stroke="{colour}" stroke-width="1.5"{dash}/><text x="{}" y="{ly}">{text}</text>"#,
            ly - 4.0,
            lx + 14.0,
            ly - 4.0,
            lx + 18.0
        );
    }
    s.push_str("</g>\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::picture::layout::tests::sample;

    #[test]
    fn every_arena_tensor_gets_a_titled_rectangle() {
        let mut c = sample();
        c.tensors[0].name = "in<&>".into();
        let l = Layout::new(&c);
        let svg = render(&l);
        assert_eq!(svg.matches("<rect data-id=").count(), 3);
        assert!(svg.contains("<title>in&lt;&amp;&gt;\nop: graph input"));
        assert!(
            svg.contains(r#"class="link""#),
            "the view is linked to its source"
        );
        assert!(svg.contains(r#"data-kind="matmul""#));
    }

    #[test]
    fn geometry_puts_offset_zero_at_the_bottom() {
        let c = sample();
        let g = Geometry::of(&Layout::new(&c));
        assert_eq!(g.y(0.0), g.y0 + g.height);
        assert!(g.y(128.0) > g.y0, "headroom above the arena");
        assert_eq!(g.x(2.0), g.x0 + g.width);
        assert_eq!(g.y(1e30), g.y0);
    }
}
