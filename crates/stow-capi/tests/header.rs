//! `include/stowage.h` (written by hand) and the Rust exports agree: the
//! header declares exactly the `#[no_mangle]` functions of `src/`, and a C
//! program that calls every one of them (`tests/c/every_function.c`)
//! compiles against the header with warnings as errors, links against the
//! static library and prints what the Rust runtime says about the same
//! bundle. Skipped, with a note, without a C compiler (`$CC` or `cc`) or
//! without the static library.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Removes `/* ... */` and `// ...` comments.
fn strip_comments(source: &str) -> String {
    let mut out = String::new();
    let mut rest = source;
    loop {
        let block = rest.find("/*");
        let line = rest.find("//");
        match (block, line) {
            (Some(b), l) if l.is_none_or(|l| b < l) => {
                out.push_str(&rest[..b]);
                rest = rest[b..].find("*/").map_or("", |e| &rest[b + e + 2..]);
            }
            (_, Some(l)) => {
                out.push_str(&rest[..l]);
                rest = rest[l..].find('\n').map_or("", |e| &rest[l + e..]);
            }
            _ => {
                out.push_str(rest);
                return out;
            }
        }
    }
}

/// Identifiers `stow_…` followed by `(` (calls and declarations).
fn called(source: &str) -> BTreeSet<String> {
    let code = strip_comments(source);
    let bytes = code.as_bytes();
    let mut names = BTreeSet::new();
    let mut at = 0;
    while let Some(i) = code[at..].find("stow_") {
        let start = at + i;
        let before = start.checked_sub(1).map(|p| bytes[p]);
        let end = start
            + code[start..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(code.len() - start);
        let boundary = before.is_none_or(|b| !(b.is_ascii_alphanumeric() || b == b'_'));
        if boundary && code[end..].trim_start().starts_with('(') {
            names.insert(code[start..end].to_string());
        }
        at = end;
    }
    names
}

/// The functions `src/` exports to C.
fn exported() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for entry in std::fs::read_dir(crate_dir().join("src")).unwrap() {
        let source = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        let lines: Vec<&str> = source.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            if line.trim() != "#[no_mangle]" {
                continue;
            }
            let decl = lines[i + 1];
            let name = decl
                .split("fn ")
                .nth(1)
                .and_then(|r| r.split('(').next())
                .unwrap_or_else(|| panic!("#[no_mangle] on `{decl}`"));
            assert!(decl.contains("extern \"C\""), "{name} is not extern \"C\"");
            names.insert(name.to_string());
        }
    }
    names
}

#[test]
fn the_header_declares_exactly_the_exported_functions() {
    let header = std::fs::read_to_string(crate_dir().join("include/stowage.h")).unwrap();
    let declared = called(&header);
    let exported = exported();
    assert!(exported.len() >= 20, "found only {exported:?}");
    let missing: Vec<_> = exported.difference(&declared).collect();
    let extra: Vec<_> = declared.difference(&exported).collect();
    assert!(
        missing.is_empty(),
        "exported but not in stowage.h: {missing:?}"
    );
    assert!(extra.is_empty(), "in stowage.h but not exported: {extra:?}");

    let program = std::fs::read_to_string(crate_dir().join("tests/c/every_function.c")).unwrap();
    let calls = called(&program);
    let unused: Vec<_> = declared.difference(&calls).collect();
    assert!(
        unused.is_empty(),
        "every_function.c does not call {unused:?}"
    );
}

#[test]
fn comment_stripping_keeps_code_only() {
    let names =
        called("/* stow_a(x) */ int stow_b(void); // stow_c(\nx = stow_d (1); my_stow_e(2);");
    assert_eq!(
        names,
        BTreeSet::from(["stow_b".to_string(), "stow_d".to_string()])
    );
}

/// `libstow_capi.a` as cargo built it for this test: every crate type of
/// the library is built into `deps/` beside the test binary. The copy
/// one level up is only refreshed by `cargo build`, so after an edit it
/// may be an older build's (the C side then ran older code than the
/// Rust side); it is used only where `deps/` has none.
fn static_library() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let deps = exe.parent()?;
    [
        deps.join("libstow_capi.a"),
        deps.parent()?.join("libstow_capi.a"),
    ]
    .into_iter()
    .find(|lib| lib.is_file())
}

fn compile_and_link(source: &Path, exe: &Path) -> Option<()> {
    let Some(lib) = static_library() else {
        eprintln!("note: C header test skipped: no libstow_capi.a beside the test binary");
        return None;
    };
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let bundle_include = crate_dir().join("../stow-bundle/include");
    let out = Command::new(&cc)
        .args([
            "-std=c11",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-pedantic",
            "-O1",
            "-I",
        ])
        .arg(crate_dir().join("include"))
        .arg("-I")
        .arg(bundle_include)
        .arg(source)
        .arg(lib)
        .args(["-lpthread", "-ldl", "-lm", "-o"])
        .arg(exe)
        .output();
    match out {
        Err(e) => {
            eprintln!("note: C header test skipped: cannot run `{cc}`: {e}");
            None
        }
        Ok(o) => {
            assert!(
                o.status.success(),
                "{} does not compile or link:\n{}",
                source.display(),
                String::from_utf8_lossy(&o.stderr)
            );
            Some(())
        }
    }
}

#[test]
fn a_c_program_calling_every_function_agrees_with_the_runtime() {
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("every_function");
    if compile_and_link(&crate_dir().join("tests/c/every_function.c"), &exe).is_none() {
        return;
    }
    let model = crate_dir().join("../../testdata/mlp.onnx");
    let compiled = stow_compile::compile(&model, &stow_compile::CompileOptions::default()).unwrap();
    let bundle_path = dir.path().join("mlp.stow");
    compiled.write(&bundle_path).unwrap();

    let o = Command::new(&exe).arg(&bundle_path).output().unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "every_function failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );

    // What the Rust runtime says about the same bundle and input.
    let b = stow_runtime::Bundle::open(&bundle_path).unwrap();
    let h = b.header();
    let line = |side: &str, t: stow_runtime::TensorRef<'_>| {
        let dims: String = t.shape().iter().map(|d| format!(" {d}")).collect();
        format!(
            "{side} 0 {} dtype {} rank {} dims{dims} elements {} bytes {}",
            t.name(),
            t.dtype() as u32,
            t.shape().len(),
            t.shape().iter().product::<u64>(),
            t.tensor.size
        )
    };
    let input = b.inputs().next().unwrap();
    let output = b.outputs().next().unwrap();
    let values: Vec<f32> = (0..input.tensor.size / 4)
        .map(|i| 0.01f32 * i as f32 - 0.5)
        .collect();
    let mut s = stow_runtime::Session::new(&b).unwrap();
    s.set_input(&input.id, &values).unwrap();
    s.run().unwrap();
    let got = s.arena().tensor_bytes(&b, &output.id).unwrap();
    let hex: String = got.iter().map(|x| format!("{x:02x}")).collect();
    let want = [
        format!("arena {} align {}", h.arena_bytes, h.arena_align),
        "inputs 1 outputs 1".to_string(),
        line("input", input),
        line("output", output),
        format!("output bytes {hex}"),
        "failures 0".to_string(),
    ];
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines, want, "C and Rust disagree");
}

/// The C block of the README's "From C" section.
fn readme_snippet() -> String {
    let readme = std::fs::read_to_string(crate_dir().join("../../README.md")).unwrap();
    let section = &readme[readme.find("## From C").expect("README has no `## From C`")..];
    let start = section.find("```c\n").expect("no C block in `## From C`") + 5;
    let len = section[start..].find("```").unwrap();
    section[start..start + len].to_string()
}

#[test]
fn the_readme_snippet_compiles_and_runs() {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("app.c");
    std::fs::write(&source, readme_snippet()).unwrap();
    let exe = dir.path().join("app");
    if compile_and_link(&source, &exe).is_none() {
        return;
    }
    let model = crate_dir().join("../../testdata/mlp.onnx");
    let compiled = stow_compile::compile(&model, &stow_compile::CompileOptions::default()).unwrap();
    let bundle_path = dir.path().join("mlp.stow");
    compiled.write(&bundle_path).unwrap();
    let o = Command::new(&exe).arg(&bundle_path).output().unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // mlp ends in a softmax over 10 classes: zeros in, 40 bytes of
    // probabilities out, each in (0, 1).
    let first: f64 = stdout
        .strip_prefix("40 output bytes, first value ")
        .unwrap_or_else(|| panic!("unexpected output: {stdout}"))
        .trim()
        .parse()
        .unwrap();
    assert!(first > 0.0 && first < 1.0, "{stdout}");
    // A bundle that is not one: a message, exit 1.
    let o = Command::new(&exe).arg(&source).output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("is not a valid bundle"));
}
