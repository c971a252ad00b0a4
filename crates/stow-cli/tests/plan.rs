//! `stow plan` on the planning traces in `testdata/planning`: valid
//! layouts, clear errors.

mod common;

use common::*;
use std::path::PathBuf;

fn trace(rel: &str) -> PathBuf {
    repo_root().join("testdata/planning").join(rel)
}

#[test]
fn interval_trace_gets_a_valid_layout() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("a.csv");
    let input = trace("minimalloc-challenging/A.1048576.csv");
    let o = stow(&["plan", input.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("lower bound 1,048,576 B"),
        "{}",
        stdout(&o)
    );
    let text = std::fs::read_to_string(&out).unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("id,lower,upper,size,offset"));
    let rows: Vec<Vec<u64>> = lines
        .map(|l| l.split(',').map(|f| f.parse().unwrap()).collect())
        .collect();
    assert_eq!(rows.len(), 154);
    for (i, a) in rows.iter().enumerate() {
        for b in &rows[i + 1..] {
            let time = a[1] < b[2] && b[1] < a[2];
            let space = a[4] < b[4] + b[3] && b[4] < a[4] + a[3];
            assert!(!(time && space), "buffers {} and {} overlap", a[0], b[0]);
        }
    }
}

#[test]
fn conflict_trace_and_capacity() {
    let input = trace("seed-example/conflicts.csv");
    let o = stow(&["plan", input.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("8 buffers") && stdout(&o).contains("lower bound 43 B"),
        "{}",
        stdout(&o)
    );
    let o = stow(&["plan", input.to_str().unwrap(), "--capacity", "40"]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("more than the capacity of 40"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn bad_rows_name_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("bad.csv");
    let out = dir.path().join("out.csv");
    for (body, word) in [
        ("id,lower,upper,size\n0,0,4,16\n1,2,x,8\n", "bad.csv:3"),
        ("id,lower,upper,size\n0,5,4,16\n", "before lower"),
        ("id,size,conflicts\n1,5,2\n", "unknown id 2"),
        ("a,b\n", "neither"),
        // Repeated ids, numeric (checked by sorting) and not.
        (
            "id,lower,upper,size\n1,0,2,8\n2,1,3,8\n1,2,4,8\n",
            "bad.csv:4: id 1 appears twice",
        ),
        (
            "id,lower,upper,size\na,0,2,8\nb,1,3,8\nb,2,4,8\n",
            "bad.csv:4: id b appears twice",
        ),
        (
            "id,size,conflicts\n1,5,\n1,4,\n",
            "bad.csv:3: id 1 appears twice",
        ),
    ] {
        std::fs::write(&input, body).unwrap();
        let o = stow(&["plan", input.to_str().unwrap(), "-o", out.to_str().unwrap()]);
        assert!(!o.status.success(), "{body}");
        assert!(stderr(&o).contains(word), "{body}: {}", stderr(&o));
        assert!(!out.exists());
    }
}

/// Parses the `--compare` table: (strategy, arena bytes) in printed order.
fn compare_rows(text: &str) -> Vec<(String, u64)> {
    text.lines()
        .skip_while(|l| !l.starts_with("strategy"))
        .skip(1)
        .take_while(|l| !l.is_empty() && !l.starts_with(char::is_numeric))
        .filter(|l| l.contains(" B"))
        .map(|l| {
            let name = l.split_whitespace().next().unwrap().to_string();
            let bytes: String = l
                .split(" B")
                .next()
                .unwrap()
                .rsplit(' ')
                .next()
                .unwrap()
                .replace(',', "");
            (name, bytes.parse().unwrap())
        })
        .collect()
}

#[test]
fn compare_lists_every_strategy_best_first() {
    let input = trace("seed-example/conflicts.csv");
    let o = stow(&["plan", input.to_str().unwrap(), "--compare"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let rows = compare_rows(&stdout(&o));
    let mut names: Vec<&str> = rows.iter().map(|(n, _)| n.as_str()).collect();
    names.sort_unstable();
    let mut all: Vec<&str> = stow_plan::Strategy::ALL.iter().map(|s| s.name()).collect();
    all.sort_unstable();
    assert_eq!(names, all, "{}", stdout(&o));
    assert!(rows.windows(2).all(|w| w[0].1 <= w[1].1), "{rows:?}");
    // The seed example's optimum is its heaviest clique, 43; naive is 69.
    assert_eq!(rows[0].1, 43);
    assert_eq!(rows.last().unwrap(), &("naive".to_string(), 69));
}

#[test]
fn dumped_model_problem_plans_to_the_same_bound() {
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("m.stow");
    let csv = dir.path().join("m.csv");
    let model = testdata("two_branch.onnx");
    let o = stow(&[
        "compile",
        model.to_str().unwrap(),
        "-o",
        bundle.to_str().unwrap(),
        "--dump-problem",
        csv.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let bound_line = stdout(&o)
        .lines()
        .find(|l| l.contains("lower bound"))
        .unwrap()
        .to_string();
    let bound = bound_line.split_whitespace().nth(2).unwrap().to_string();
    let o = stow(&["plan", csv.to_str().unwrap(), "--align", "64"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains(&format!("lower bound {bound} B")),
        "compile said {bound_line}, plan said {}",
        stdout(&o)
    );
}

#[test]
fn dump_problem_into_missing_directory_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("m.stow");
    let csv = dir.path().join("nope/m.csv");
    let model = testdata("two_branch.onnx");
    let o = stow(&[
        "compile",
        model.to_str().unwrap(),
        "-o",
        bundle.to_str().unwrap(),
        "--dump-problem",
        csv.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("does not exist"), "{}", stderr(&o));
    assert!(!bundle.exists());
}

#[test]
fn capacity_search_fits_a_challenging_trace() {
    // Instance C fits within its capacity, 2.5 % above its max-live bound,
    // which no greedy strategy reaches.
    let input = trace("minimalloc-challenging/C.1048576.csv");
    let o = stow(&[
        "plan",
        input.to_str().unwrap(),
        "--strategy",
        "search",
        "--capacity",
        "1048576",
        "--time-limit",
        "60",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let greedy = stow(&[
        "plan",
        input.to_str().unwrap(),
        "--strategy",
        "greedy-size",
        "--capacity",
        "1048576",
    ]);
    assert!(!greedy.status.success());
    assert!(stderr(&greedy).contains("short by"), "{}", stderr(&greedy));
}

#[test]
fn bad_time_limit_is_refused() {
    let input = trace("seed-example/conflicts.csv");
    for bad in ["0", "-1", "soon", "1e9"] {
        let arg = format!("--time-limit={bad}");
        let o = stow(&["plan", input.to_str().unwrap(), &arg]);
        assert!(!o.status.success());
        assert!(stderr(&o).contains("--time-limit"), "{}", stderr(&o));
    }
}

#[test]
fn pools_fill_in_preference_order_and_report_shortfalls() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("pools.csv");
    let input = trace("minimalloc-challenging/C.1048576.csv");
    let o = stow(&[
        "plan",
        input.to_str().unwrap(),
        "--pool",
        "sram=262144",
        "--pool",
        "dram",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("pool sram:"), "{}", stdout(&o));
    let text = std::fs::read_to_string(&out).unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("id,lower,upper,size,offset,pool"));
    let rows: Vec<(Vec<u64>, String)> = lines
        .map(|l| {
            let (nums, pool) = l.rsplit_once(',').unwrap();
            (
                nums.split(',').map(|f| f.parse().unwrap()).collect(),
                pool.to_string(),
            )
        })
        .collect();
    let in_sram = rows.iter().filter(|(_, p)| p == "sram").count();
    assert!(in_sram > 0, "the preferred pool took nothing");
    for (a, pa) in &rows {
        if pa == "sram" {
            assert!(a[4] + a[3] <= 262_144, "buffer {} beyond sram", a[0]);
        }
        for (b, pb) in &rows {
            if a[0] < b[0] && pa == pb {
                let time = a[1] < b[2] && b[1] < a[2];
                let space = a[4] < b[4] + b[3] && b[4] < a[4] + a[3];
                assert!(!(time && space), "{} and {} overlap in {pa}", a[0], b[0]);
            }
        }
    }
    let o = stow(&[
        "plan",
        input.to_str().unwrap(),
        "--pool",
        "sram=262144",
        "--pool",
        "dram=100000",
    ]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("pool `dram` short by"),
        "{}",
        stderr(&o)
    );
}
