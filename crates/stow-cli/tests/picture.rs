//! `stow inspect --svg / --html / --chart`: the SVG is rendered with resvg
//! and its pixels checked against the tensor table of `inspect --json`; the
//! chart's width, the page's contents and bad output paths are checked from
//! the outside.

mod common;

use common::*;
use serde_json::Value;
use std::path::Path;
use stow_cli::picture::OpKind;

/// The plot geometry the SVG declares on `<g id="plot">`.
#[derive(Debug)]
struct Plot {
    x0: f64,
    y0: f64,
    width: f64,
    height: f64,
    steps: f64,
    ymax: f64,
}

impl Plot {
    fn x(&self, step: f64) -> f64 {
        self.x0 + self.width * step / self.steps
    }
    fn y(&self, bytes: f64) -> f64 {
        self.y0 + self.height * (1.0 - bytes / self.ymax)
    }
}

fn attr(tag: &str, name: &str) -> f64 {
    let key = format!("{name}=\"");
    let start = tag.find(&key).unwrap_or_else(|| panic!("{name} in {tag}")) + key.len();
    let end = start + tag[start..].find('"').unwrap();
    tag[start..end].parse().unwrap()
}

fn plot_of(svg: &str) -> Plot {
    let start = svg.find("<g id=\"plot\"").expect("plot group");
    let tag = &svg[start..start + svg[start..].find('>').unwrap()];
    Plot {
        x0: attr(tag, "data-x"),
        y0: attr(tag, "data-y"),
        width: attr(tag, "data-width"),
        height: attr(tag, "data-height"),
        steps: attr(tag, "data-steps"),
        ymax: attr(tag, "data-ymax"),
    }
}

/// The fill of the legend swatch for `kind`.
fn legend_colour(svg: &str, kind: OpKind) -> [u8; 3] {
    let legend = &svg[svg.find("<g id=\"legend\">").expect("legend")..];
    let key = format!("data-kind=\"{}\"", kind.name());
    let at = legend
        .find(&key)
        .unwrap_or_else(|| panic!("legend entry for {}", kind.name()));
    let fill = &legend[at..];
    let hex = &fill[fill.find("fill=\"#").unwrap() + 7..][..6];
    let byte = |i: usize| u8::from_str_radix(&hex[i..i + 2], 16).unwrap();
    [byte(0), byte(2), byte(4)]
}

struct Raster {
    pixmap: resvg::tiny_skia::Pixmap,
}

impl Raster {
    fn render(svg: &str) -> Raster {
        let tree = resvg::usvg::Tree::from_str(svg, &resvg::usvg::Options::default())
            .expect("resvg parses the SVG");
        let size = tree.size().to_int_size();
        let mut pixmap = resvg::tiny_skia::Pixmap::new(size.width(), size.height()).unwrap();
        resvg::render(
            &tree,
            resvg::tiny_skia::Transform::default(),
            &mut pixmap.as_mut(),
        );
        Raster { pixmap }
    }

    fn rgb(&self, x: f64, y: f64) -> [u8; 3] {
        let p = self
            .pixmap
            .pixel(x.floor() as u32, y.floor() as u32)
            .expect("inside the picture")
            .demultiply();
        [p.red(), p.green(), p.blue()]
    }
}

/// Arena tensors of `inspect --json` as (id, offset, size, first, last).
fn arena_tensors(json: &Value) -> Vec<(u64, u64, u64, u64, u64)> {
    json["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["region"] == "arena")
        .map(|t| {
            let n = |k: &str| t[k].as_u64().unwrap();
            (
                n("id"),
                n("offset"),
                n("size"),
                n("first_step"),
                n("last_step"),
            )
        })
        .collect()
}

fn producer_type(json: &Value, id: u64) -> Option<String> {
    json["ops"].as_array().unwrap().iter().find_map(|o| {
        o["outputs"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x.as_u64() == Some(id))
            .then(|| o["op_type"].as_str().unwrap().to_string())
    })
}

fn compile_to(dir: &Path, model: &str) -> (String, Value) {
    let bundle = dir.join(model.replace(".onnx", ".stow"));
    let json = compile_and_inspect(&testdata(model), &bundle, &[]);
    (bundle.display().to_string(), json)
}

#[test]
fn svg_pixels_show_each_lone_tensor_in_its_op_colour_and_nothing_above_the_arena() {
    let dir = tempfile::tempdir().unwrap();
    for model in ["residual_cnn.onnx", "transformer_block.onnx", "mlp.onnx"] {
        let (bundle, json) = compile_to(dir.path(), model);
        let out = dir.path().join(model.replace(".onnx", ".svg"));
        let o = stow(&["inspect", &bundle, "--svg", &out.display().to_string()]);
        assert!(o.status.success(), "{}", stderr(&o));
        let svg = std::fs::read_to_string(&out).unwrap();
        let plot = plot_of(&svg);
        let raster = Raster::render(&svg);
        let tensors = arena_tensors(&json);
        assert_eq!(
            plot.steps as usize,
            json["ops"].as_array().unwrap().len(),
            "{model}: one column per step"
        );

        // Cells (step, tensor) that no other tensor shares: there the
        // picture must show that tensor's colour, whatever is drawn
        // elsewhere. Only cells big enough to sample away from edges.
        let mut checked = 0;
        for &(id, off, size, first, last) in &tensors {
            let Some(op_type) = producer_type(&json, id) else {
                continue;
            };
            let want = legend_colour(&svg, OpKind::of(&op_type));
            for step in first..=last {
                let alone = tensors
                    .iter()
                    .all(|&(other, o_off, o_size, o_first, o_last)| {
                        other == id
                            || step < o_first
                            || step > o_last
                            || o_off >= off + size
                            || off >= o_off + o_size
                    });
                let (x1, x2) = (plot.x(step as f64), plot.x(step as f64 + 1.0));
                let (y1, y2) = (plot.y((off + size) as f64), plot.y(off as f64));
                if !alone || x2 - x1 < 16.0 || y2 - y1 < 16.0 {
                    continue;
                }
                // Alias links (a line and a dot) may cross the cell, and
                // edges are anti-aliased: most of the cell's inside, not
                // every pixel, must have the colour.
                let (mut hits, mut all) = (0, 0);
                let mut y = (y1 + 2.0).ceil();
                while y < y2 - 2.0 {
                    let mut x = (x1 + 2.0).ceil();
                    while x < x2 - 2.0 {
                        all += 1;
                        if raster.rgb(x, y) == want {
                            hits += 1;
                        }
                        x += 1.0;
                    }
                    y += 1.0;
                }
                assert!(
                    hits * 10 >= all * 7,
                    "{model}: tensor {id} ({op_type}) at step {step}: {hits}/{all} pixels of {want:?} in ({x1:.0},{y1:.0})-({x2:.0},{y2:.0}), centre is {:?}",
                    raster.rgb((x1 + x2) / 2.0, (y1 + y2) / 2.0)
                );
                checked += 1;
            }
        }
        assert!(checked > 0, "{model}: no tensor cell large enough to check");

        // Nothing between the top of the plot and the arena line, and the
        // arena line itself is drawn.
        let arena = json["arena_bytes"].as_f64().unwrap();
        let arena_y = plot.y(arena);
        assert!(
            arena_y - plot.y0 > 10.0,
            "{model}: room above the arena line"
        );
        let mut y = plot.y0.ceil();
        while y < arena_y - 2.0 {
            let mut x = plot.x0 + 2.0;
            while x < plot.x0 + plot.width - 2.0 {
                assert_eq!(
                    raster.rgb(x, y),
                    [255, 255, 255],
                    "{model}: drawn above the arena line at ({x},{y})"
                );
                x += 1.0;
            }
            y += 1.0;
        }
        // The lower-bound line is dashed and may lie on the arena line: the
        // arena's black shows between its dashes.
        let row: Vec<[u8; 3]> = (0..plot.width as u32)
            .map(|dx| raster.rgb(plot.x0 + f64::from(dx), arena_y))
            .collect();
        let black = row.iter().filter(|p| p.iter().all(|&c| c < 80)).count();
        assert!(
            black * 5 >= row.len(),
            "{model}: arena line at y={arena_y:.1}: {black}/{} black pixels",
            row.len()
        );
        // And the peak (the most bytes live) is marked in the title.
        assert!(svg.contains("peak at step "), "{model}");
    }
}

#[test]
fn chart_has_a_row_per_step_and_fits_100_columns() {
    let dir = tempfile::tempdir().unwrap();
    for model in testdata_models() {
        let bundle = dir.path().join("m.stow");
        let json = compile_and_inspect(&model, &bundle, &[]);
        let o = stow(&["inspect", "--chart", &bundle.display().to_string()]);
        assert!(o.status.success(), "{}", stderr(&o));
        let text = stdout(&o);
        for line in text.lines() {
            assert!(
                line.chars().count() <= 100,
                "{}: {} columns: {line}",
                model.display(),
                line.chars().count()
            );
        }
        let rows = text.lines().filter(|l| l.matches('|').count() == 2).count();
        assert_eq!(
            rows,
            json["ops"].as_array().unwrap().len(),
            "{}: one row per step\n{text}",
            model.display()
        );
        assert_eq!(text.matches("<-peak").count(), 1, "{text}");
    }
}

#[test]
fn html_is_one_self_contained_page_with_every_arena_tensor() {
    let dir = tempfile::tempdir().unwrap();
    let (bundle, json) = compile_to(dir.path(), "transformer_block.onnx");
    let out = dir.path().join("t.html");
    let o = stow(&["inspect", &bundle, "--html", &out.display().to_string()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let page = std::fs::read_to_string(&out).unwrap();
    assert!(page.starts_with("<!DOCTYPE html>"));
    for remote in ["http:", "https:", "<link", "src=", "import "] {
        assert!(!page.contains(remote), "page loads {remote}");
    }
    let start = page.find("type=\"application/json\">").unwrap() + 24;
    let end = start + page[start..].find("</script>").unwrap();
    let data: Value = serde_json::from_str(&page[start..end]).unwrap();
    let ids: Vec<u64> = data["blocks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b[0].as_u64().unwrap())
        .collect();
    let mut want: Vec<u64> = arena_tensors(&json).iter().map(|t| t.0).collect();
    let mut got = ids.clone();
    want.sort();
    got.sort();
    assert_eq!(got, want);
    assert_eq!(data["arena"], json["arena_bytes"]);
    assert_eq!(data["bound"], json["lower_bound_bytes"]);
}

#[test]
fn the_peak_is_the_step_with_the_most_live_bytes_and_reaches_the_bound() {
    let dir = tempfile::tempdir().unwrap();
    // Views (transformer), in-place chains (two_branch) and, where the
    // model exists, concat slices.
    let mut models = vec!["two_branch.onnx", "transformer_block.onnx"];
    if testdata("concat_block.onnx").exists() {
        models.push("concat_block.onnx");
    }
    for model in models {
        let (bundle, json) = compile_to(dir.path(), model);
        let out = dir.path().join("t.html");
        assert!(
            stow(&["inspect", &bundle, "--html", &out.display().to_string()])
                .status
                .success()
        );
        let page = std::fs::read_to_string(&out).unwrap();
        let start = page.find("type=\"application/json\">").unwrap() + 24;
        let end = start + page[start..].find("</script>").unwrap();
        let data: Value = serde_json::from_str(&page[start..end]).unwrap();

        // Recount from the tensor table. A tensor and its aliases are one
        // buffer spanning all their steps and bytes; at each step count
        // every byte of the live buffers once.
        let all = json["tensors"].as_array().unwrap();
        let id_of = |name: &str| all.iter().position(|t| t["name"] == name).unwrap();
        let root = |mut i: usize| {
            while let Some(of) = all[i]["alias_of"].as_str() {
                i = id_of(of);
            }
            i
        };
        let mut buffers: std::collections::BTreeMap<usize, (u64, u64, u64, u64)> =
            Default::default();
        for &(id, off, size, first, last) in &arena_tensors(&json) {
            let b = buffers
                .entry(root(id as usize))
                .or_insert((first, last, off, off + size));
            *b = (
                b.0.min(first),
                b.1.max(last),
                b.2.min(off),
                b.3.max(off + size),
            );
        }
        let steps = json["ops"].as_array().unwrap().len() as u64;
        let live: Vec<u64> = (0..steps)
            .map(|s| {
                let mut bytes = std::collections::BTreeSet::new();
                for &(first, last, lo, hi) in buffers.values() {
                    if first <= s && s <= last {
                        bytes.extend(lo..hi);
                    }
                }
                bytes.len() as u64
            })
            .collect();
        let max = *live.iter().max().unwrap();
        let peak = data["peak"].as_u64().unwrap() as usize;
        assert_eq!(live[peak], max, "{model}");
        let shown: Vec<u64> = data["live"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect();
        assert_eq!(shown, live, "{model}");
        assert!(max <= json["arena_bytes"].as_u64().unwrap(), "{model}");
        assert_eq!(max, json["lower_bound_bytes"].as_u64().unwrap(), "{model}");
        assert!(
            !data["peakBlocks"].as_array().unwrap().is_empty(),
            "{model}: the tensors at the peak are listed"
        );
    }
}

#[test]
fn bad_output_paths_fail_in_one_line_and_leave_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let (bundle, _) = compile_to(dir.path(), "mlp.onnx");
    let out_dir = dir.path().join("out");
    std::fs::create_dir(&out_dir).unwrap();
    let good = out_dir.join("good.svg");
    let missing = dir.path().join("no/such/dir/x.svg");
    let cases: Vec<(Vec<String>, String)> = vec![
        (
            vec!["--svg".into(), missing.display().to_string()],
            missing.display().to_string(),
        ),
        (
            vec!["--html".into(), out_dir.display().to_string()],
            out_dir.display().to_string(),
        ),
        (
            // The good picture must not be written when the other path is
            // bad.
            vec![
                "--svg".into(),
                good.display().to_string(),
                "--html".into(),
                dir.path().join("nope/x.html").display().to_string(),
            ],
            "nope/x.html".into(),
        ),
    ];
    for (extra, named) in cases {
        let mut args = vec!["inspect".to_string(), bundle.clone()];
        args.extend(extra);
        let refs: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
        let o = stow(&refs);
        let err = stderr(&o);
        assert!(!o.status.success(), "{args:?} succeeded");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("error: writing "), "{err}");
        assert!(err.contains(&named), "{err} should name {named}");
        let left: Vec<_> = std::fs::read_dir(&out_dir).unwrap().collect();
        assert!(left.is_empty(), "{args:?} left {left:?}");
    }
    assert!(!missing.exists());
}

#[test]
fn thousands_of_tensors_make_a_page_and_a_picture_quickly() {
    use stow_bundle::{Contents, DType, Op, Provenance, Region, Tensor, TensorKind};
    // A chain where tensor i lives for steps i..=i+2 in one of three slots,
    // so bytes are reused every third step.
    let n: u32 = 5000;
    let slot = 4096u64;
    let tensors: Vec<Tensor> = (0..n)
        .map(|i| Tensor {
            name: format!("t{i}"),
            kind: if i == 0 {
                TensorKind::Input
            } else if i == n - 1 {
                TensorKind::Output
            } else {
                TensorKind::Activation
            },
            dtype: DType::F32,
            shape: vec![u64::from(256 + i % 768)],
            region: Region::Arena,
            offset: u64::from(i % 3) * slot,
            size: u64::from(256 + i % 768) * 4,
            first_step: i.saturating_sub(1),
            last_step: (i + 1).min(n - 2),
            alias_of: None,
            pool: 0,
            quant: None,
        })
        .collect();
    let ops: Vec<Op> = (1..n)
        .map(|i| Op {
            name: format!("op{i}"),
            op_type: ["Conv", "Add", "EinSum", "Softmax"][i as usize % 4].into(),
            attributes: vec![],
            inputs: vec![i - 1],
            outputs: vec![i],
        })
        .collect();
    let c = Contents {
        arena_bytes: 3 * slot,
        arena_align: 64,
        tensors,
        inputs: vec![0],
        outputs: vec![n - 1],
        ops,
        provenance: Provenance {
            strategy: "test".into(),
            lower_bound_bytes: 3 * slot,
            source_model: "chain".into(),
            ..Provenance::default()
        },
        pools: Vec::new(),
    };
    let weights: Vec<&[u8]> = vec![&[]; n as usize];
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("chain.stow");
    stow_bundle::write_file(&bundle, &stow_bundle::to_bytes(&c, &weights).unwrap()).unwrap();
    let (svg, html) = (dir.path().join("c.svg"), dir.path().join("c.html"));
    let started = std::time::Instant::now();
    let o = stow(&[
        "inspect",
        &bundle.display().to_string(),
        "--svg",
        &svg.display().to_string(),
        "--html",
        &html.display().to_string(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        started.elapsed().as_secs() < 20,
        "took {:?}",
        started.elapsed()
    );
    let page = std::fs::metadata(&html).unwrap().len();
    assert!(
        page < 200 * u64::from(n),
        "{page} bytes for {n} tensors: the page should stay compact"
    );
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert_eq!(svg.matches("<rect data-id=").count(), n as usize);
}
