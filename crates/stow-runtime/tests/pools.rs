//! Bundles whose arena is split across memory pools: they run bit for bit
//! as the same model with one arena, in allocated or caller-given buffers,
//! and bundles written without pools still open and run.
// Opens bundles from files (`Bundle::open`): a `std` feature API.
#![cfg(feature = "std")]

mod common;

use stow_runtime::{Arena, ArenaError, Bundle, Session, SessionError};

/// Fills every input with the same deterministic small values.
fn fill_inputs(bundle: &Bundle, session: &mut Session<'_>) {
    let ids: Vec<u32> = bundle.inputs().map(|t| t.id).collect();
    for id in ids {
        for (i, b) in session.input_bytes_mut(&id).unwrap().iter_mut().enumerate() {
            *b = if i % 4 == 3 { 0x3e } else { (i * 37) as u8 };
        }
    }
}

/// Every output's bytes after one run.
fn outputs(bundle: &Bundle, session: &mut Session<'_>) -> Vec<Vec<u8>> {
    fill_inputs(bundle, session);
    session.run().unwrap();
    common::output_bytes(bundle, session)
}

/// 64-aligned zeroed buffers of the given sizes.
fn buffers(sizes: &[(u64, u64)]) -> Vec<Vec<u128>> {
    // u128 is 16-aligned; over-allocate and start at a 64-byte boundary.
    sizes
        .iter()
        .map(|&(b, _)| vec![0u128; b as usize / 16 + 8])
        .collect()
}

fn aligned(buf: &mut [u128], align: usize) -> &mut [u8] {
    let bytes: &mut [u8] = bytemuck::cast_slice_mut(buf);
    let skip = (align - bytes.as_ptr() as usize % align) % align;
    &mut bytes[skip..]
}

#[test]
fn pooled_bundles_run_bit_for_bit_like_one_arena() {
    let Some(stow) = common::stow_bin("pooled_bundles_run_bit_for_bit_like_one_arena") else {
        return;
    };
    let one = tempfile::tempdir().unwrap();
    let two = tempfile::tempdir().unwrap();
    for model in common::FIXED_SHAPE_MODELS {
        let single = Bundle::open(&common::compile(&stow, model, one.path())).unwrap();
        assert_eq!(single.contents().pool_count(), 1);
        // A fast pool of a quarter of the arena forces a real split.
        let sram = (single.header().arena_bytes / 4).max(64) / 64 * 64;
        let flags = [
            "--pool".to_string(),
            format!("sram={sram}"),
            "--pool".into(),
            "dram".into(),
        ];
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        let pooled = Bundle::open(&common::compile_with(&stow, model, two.path(), &flags)).unwrap();
        let c = pooled.contents();
        assert_eq!(c.pool_count(), 2, "{model}");
        assert_eq!(
            (c.pools[0].name.as_str(), c.pools[1].name.as_str()),
            ("sram", "dram")
        );
        assert!(
            c.pools[0].bytes <= sram,
            "{model}: sram holds {}",
            c.pools[0].bytes
        );
        let in_each = |p: u32| c.tensors.iter().filter(|t| t.pool == p).count();
        assert!(in_each(1) > 0, "{model}: nothing went to dram");

        let want = outputs(&single, &mut Session::new(&single).unwrap());
        let got = outputs(&pooled, &mut Session::new(&pooled).unwrap());
        assert_eq!(got, want, "{model}: pooled outputs differ");

        // The same in caller-given buffers, one per pool.
        let sizes = c.pool_sizes();
        let mut storage = buffers(&sizes);
        let lent: Vec<&mut [u8]> = storage.iter_mut().map(|b| aligned(b, 64)).collect();
        let mut session = Session::in_buffers(&pooled, lent, 1).unwrap();
        assert_eq!(outputs(&pooled, &mut session), want, "{model}: in buffers");
    }
}

#[test]
fn a_pooled_bundle_wants_one_buffer_per_pool() {
    let Some(stow) = common::stow_bin("a_pooled_bundle_wants_one_buffer_per_pool") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let path = common::compile_with(
        &stow,
        "residual_cnn",
        dir.path(),
        &["--pool", "sram=32768", "--pool", "dram"],
    );
    let bundle = Bundle::open(&path).unwrap();
    let sizes = bundle.contents().pool_sizes();
    let mut storage = buffers(&sizes);
    let e = Arena::in_buffer(&bundle, aligned(&mut storage[0], 64)).unwrap_err();
    assert!(
        matches!(
            e,
            ArenaError::PoolCount {
                given: 1,
                need: 2,
                ..
            }
        ),
        "{e}"
    );
    // A pool's buffer one byte short is refused, naming the sizes.
    let mut storage = buffers(&sizes);
    let mut lent: Vec<&mut [u8]> = storage.iter_mut().map(|b| aligned(b, 64)).collect();
    let need = sizes[1].0 as usize;
    let short = std::mem::take(&mut lent[1]);
    lent[1] = &mut short[..need - 1];
    let e = Session::in_buffers(&bundle, lent, 1).unwrap_err();
    assert!(
        matches!(e, SessionError::Arena(ArenaError::TooSmall { .. })),
        "{e}"
    );
}

#[test]
fn a_bundle_written_before_pools_still_opens_and_runs() {
    let path = common::root().join("testdata/no_std/residual_cnn.stow");
    let bundle = Bundle::open(&path).unwrap();
    assert_eq!(bundle.header().flags, 0);
    assert!(bundle.contents().pools.is_empty());
    assert_eq!(bundle.contents().pool_count(), 1);
    assert!(bundle.contents().tensors.iter().all(|t| t.pool == 0));
    let mut session = Session::new(&bundle).unwrap();
    let out = outputs(&bundle, &mut session);
    assert!(out.iter().all(|o| !o.is_empty()));
    // In one caller buffer, as before.
    let mut storage = buffers(&bundle.contents().pool_sizes());
    let mut session = Session::in_buffer(&bundle, aligned(&mut storage[0], 64), 1).unwrap();
    assert_eq!(outputs(&bundle, &mut session), out);
}

/// `--placement threshold=BYTES` (method M3's layer-group threshold): the
/// operands of large steps go to dram, the rest to sram; the bundle runs
/// bit for bit like one arena, allocated or in caller buffers.
#[test]
fn threshold_placed_bundles_run_bit_for_bit_like_one_arena() {
    let Some(stow) = common::stow_bin("threshold_placed_bundles_run_bit_for_bit_like_one_arena")
    else {
        return;
    };
    let one = tempfile::tempdir().unwrap();
    let two = tempfile::tempdir().unwrap();
    let mut split = 0;
    for model in common::FIXED_SHAPE_MODELS {
        let single = Bundle::open(&common::compile(&stow, model, one.path())).unwrap();
        let arena = single.header().arena_bytes;
        // Room for every tensor in sram; steps above an eighth of the
        // arena send their operands to dram.
        let flags = [
            "--pool".to_string(),
            format!("sram={arena}"),
            "--pool".into(),
            "dram".into(),
            "--placement".into(),
            format!("threshold={}", arena / 8),
        ];
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        let pooled = Bundle::open(&common::compile_with(&stow, model, two.path(), &flags)).unwrap();
        let c = pooled.contents();
        assert_eq!(c.pool_count(), 2, "{model}");
        let in_each = |p: u32| c.tensors.iter().filter(|t| t.pool == p).count();
        if in_each(1) > 0 && c.pools[0].bytes > 0 {
            split += 1;
        }
        let want = outputs(&single, &mut Session::new(&single).unwrap());
        let got = outputs(&pooled, &mut Session::new(&pooled).unwrap());
        assert_eq!(got, want, "{model}: threshold-placed outputs differ");
        let sizes = c.pool_sizes();
        let mut storage = buffers(&sizes);
        let lent: Vec<&mut [u8]> = storage.iter_mut().map(|b| aligned(b, 64)).collect();
        let mut session = Session::in_buffers(&pooled, lent, 1).unwrap();
        assert_eq!(outputs(&pooled, &mut session), want, "{model}: in buffers");
    }
    assert!(
        split >= 3,
        "only {split} models were split across both pools"
    );
}
