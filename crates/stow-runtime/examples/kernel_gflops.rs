//! How far the product and convolution kernels are from this core's
//! limit (BENCHMARKS.md, "Kernels against the FMA peak"): first the peak,
//! measured with a loop of independent fused multiply-adds on registers
//! only; then the GFLOP/s of `gemm` on square products and of `conv` on
//! the convolution shapes of resnet50 and mobilenet_v2, one thread,
//! scratch as the compiler plans it, and again with the kernel packed
//! ahead of time as a bundle with packed weights stores it. Each figure is the best of REPEAT
//! runs (default 20) after one warm-up.
//!
//!     cargo run --release -p stow-runtime --example kernel_gflops [REPEAT] [FILTER]
//!
//! FILTER keeps only the kernels whose name contains it.

use core::cell::Cell;
use std::hint::black_box;
use std::time::Instant;
use stow_runtime::kernels::cells::Src;
use stow_runtime::kernels::gemm::{self, Dst, Strided};
use stow_runtime::kernels::linalg::{conv, ConvShape};
use stow_runtime::kernels::pool::Window;
use stow_runtime::kernels::prepacked::{self, Panels};

/// Best seconds of `repeat` runs of `f`, after one warm-up.
fn best(repeat: usize, mut f: impl FnMut()) -> f64 {
    f();
    (0..repeat)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

/// A loop of 12 independent 8-lane FMA chains on registers (enough to
/// cover the FMA latency on two pipes): the most this core can multiply
/// and add in f32, whatever a kernel does with memory.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn fma_peak_avx2(iters: usize) -> f32 {
    use core::arch::x86_64::*;
    let a = _mm256_set1_ps(black_box(0.999_999));
    let b = _mm256_set1_ps(black_box(1e-7));
    let mut acc = [_mm256_set1_ps(1.0); 12];
    for _ in 0..iters {
        for v in acc.iter_mut() {
            *v = _mm256_fmadd_ps(*v, a, b);
        }
    }
    let mut lanes = [0f32; 8];
    let sum = acc
        .iter()
        .fold(_mm256_setzero_ps(), |s, &v| _mm256_add_ps(s, v));
    // SAFETY: `lanes` holds 8 floats.
    unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), sum) };
    lanes.iter().sum()
}

/// [`fma_peak_avx2`] with 16-lane registers: on cores with two 512-bit
/// FMA units this is twice the 8-lane figure, on those that split each
/// 512-bit FMA in two it is the same.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn fma_peak_avx512(iters: usize) -> f32 {
    use core::arch::x86_64::*;
    let a = _mm512_set1_ps(black_box(0.999_999));
    let b = _mm512_set1_ps(black_box(1e-7));
    let mut acc = [_mm512_set1_ps(1.0); 12];
    for _ in 0..iters {
        for v in acc.iter_mut() {
            *v = _mm512_fmadd_ps(*v, a, b);
        }
    }
    let sum = acc
        .iter()
        .fold(_mm512_setzero_ps(), |s, &v| _mm512_add_ps(s, v));
    _mm512_reduce_add_ps(sum)
}

/// The FMA peak in GFLOP/s and the lanes that reach it: the better of
/// 8 and 16 lanes where the CPU has both.
fn fma_peak(repeat: usize) -> Option<(f64, usize)> {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
        let iters = 2_000_000;
        // SAFETY: the CPU has AVX2 and FMA (checked just above).
        #[allow(unsafe_code)]
        let secs = best(repeat, || {
            black_box(unsafe { fma_peak_avx2(black_box(iters)) });
        });
        let mut peak = ((iters * 12 * 8 * 2) as f64 / secs / 1e9, 8);
        if std::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512 F (checked just above).
            #[allow(unsafe_code)]
            let secs = best(repeat, || {
                black_box(unsafe { fma_peak_avx512(black_box(iters)) });
            });
            let wide = (iters * 12 * 16 * 2) as f64 / secs / 1e9;
            if wide > peak.0 {
                peak = (wide, 16);
            }
        }
        return Some(peak);
    }
    let _ = repeat;
    None
}

fn cells(n: usize, seed: u32) -> Vec<Cell<f32>> {
    (0..n)
        .map(|i| {
            Cell::new(
                ((i as u32).wrapping_mul(2_654_435_761) ^ seed) as f32 / u32::MAX as f32 - 0.5,
            )
        })
        .collect()
}

fn gemm_gflops(n: usize, repeat: usize) -> f64 {
    let a: Vec<f32> = cells(n * n, 1).iter().map(Cell::get).collect();
    let b: Vec<f32> = cells(n * n, 2).iter().map(Cell::get).collect();
    let c = cells(n * n, 3);
    let scratch = cells(gemm::scratch_elems(n, n, n), 4);
    fn strided(data: &[f32], n: usize) -> Strided<&[f32]> {
        Strided {
            data,
            offset: 0,
            rs: n,
            cs: 1,
            rows: n,
            cols: n,
        }
    }
    let (pa, pb) = (strided(&a, n), strided(&b, n));
    let dst = Dst {
        data: &c,
        offset: 0,
        rs: n,
        cs: 1,
        finish: Default::default(),
        start: gemm::Start::Add,
        residual: None,
    };
    let secs = best(repeat, || gemm::gemm(n, n, n, &pa, &pb, &dst, &scratch));
    (2 * n * n * n) as f64 / secs / 1e9
}

/// A 2-d convolution: `c_in → c_out` channels over `size²`, kernel
/// `kernel²`, stride, padding `kernel / 2`, `groups` groups.
struct Case {
    name: &'static str,
    c_in: usize,
    c_out: usize,
    size: usize,
    kernel: usize,
    stride: usize,
    groups: usize,
}

fn conv_gflops(case: &Case, repeat: usize, packed: bool) -> f64 {
    let pad = case.kernel / 2;
    let out = (case.size + 2 * pad - case.kernel) / case.stride + 1;
    let window = Window {
        planes: case.c_in,
        input: [1, case.size, case.size],
        output: [1, out, out],
        kernel: [1, case.kernel, case.kernel],
        strides: [1, case.stride, case.stride],
        dilations: [1, 1, 1],
        pad: [0, pad, pad],
        pad_after: [0, pad, pad],
    };
    let s = ConvShape {
        batch: 1,
        groups: case.groups,
        in_per_group: case.c_in / case.groups,
        out_per_group: case.c_out / case.groups,
        window,
    };
    let x: Vec<f32> = cells(case.c_in * case.size * case.size, 5)
        .iter()
        .map(Cell::get)
        .collect();
    let w: Vec<f32> = cells(case.c_out * s.k(), 6).iter().map(Cell::get).collect();
    let bias: Vec<f32> = cells(case.c_out, 7).iter().map(Cell::get).collect();
    let y = cells(case.c_out * out * out, 8);
    // The kernel packed as the compiler stores it.
    let panels = (packed && !s.depthwise())
        .then(|| Panels::of_conv(&s, gemm::KC).with_depth_block(gemm::KC));
    let w = match &panels {
        Some(p) => p.pack(&w).expect("a dense kernel"),
        None => w,
    };
    let scratch = cells(
        panels
            .as_ref()
            .map_or(s.scratch_elems(), |p| prepacked::scratch_elems(p, s.n())),
        9,
    );
    let secs = best(repeat, || {
        conv(
            &s,
            panels.as_ref(),
            Src::Weight(&x),
            Src::Weight(&w),
            Some(Src::Weight(&bias)),
            &y,
            Default::default(),
            &scratch,
            (0, 1),
        )
    });
    (2 * case.c_out * s.k() * out * out) as f64 / secs / 1e9
}

fn main() {
    let repeat = std::env::args()
        .nth(1)
        .map_or(20, |r| r.parse().expect("REPEAT is a number"));
    let filter = std::env::args().nth(2).unwrap_or_default();
    let peak = fma_peak(repeat).map(|(p, lanes)| {
        println!("FMA peak (registers only, {lanes} lanes): {p:.1} GFLOP/s");
        p
    });
    if peak.is_none() {
        println!("FMA peak: no AVX2+FMA on this CPU");
    }
    let share = |g: f64| peak.map_or(String::new(), |p| format!("{:5.1} %", 100.0 * g / p));
    println!("{:<34} {:>9} {:>8}", "kernel", "GFLOP/s", "of peak");
    for n in [64, 256, 512] {
        if !format!("gemm {n}").contains(&filter) {
            continue;
        }
        let g = gemm_gflops(n, repeat);
        println!(
            "{:<34} {g:>9.1} {:>8}",
            format!("gemm {n}×{n}×{n}"),
            share(g)
        );
    }
    let cases = [
        Case {
            name: "resnet50 conv1 7×7/2 3→64 224",
            c_in: 3,
            c_out: 64,
            size: 224,
            kernel: 7,
            stride: 2,
            groups: 1,
        },
        Case {
            name: "mobilenet_v2 stem 3×3/2 3→32 224",
            c_in: 3,
            c_out: 32,
            size: 224,
            kernel: 3,
            stride: 2,
            groups: 1,
        },
        Case {
            name: "resnet50 1×1 64→256 56",
            c_in: 64,
            c_out: 256,
            size: 56,
            kernel: 1,
            stride: 1,
            groups: 1,
        },
        Case {
            name: "resnet50 3×3 64→64 56",
            c_in: 64,
            c_out: 64,
            size: 56,
            kernel: 3,
            stride: 1,
            groups: 1,
        },
        Case {
            name: "resnet50 3×3 128→128 28",
            c_in: 128,
            c_out: 128,
            size: 28,
            kernel: 3,
            stride: 1,
            groups: 1,
        },
        Case {
            name: "resnet50 3×3 256→256 14",
            c_in: 256,
            c_out: 256,
            size: 14,
            kernel: 3,
            stride: 1,
            groups: 1,
        },
        Case {
            name: "resnet50 1×1 2048→512 7",
            c_in: 2048,
            c_out: 512,
            size: 7,
            kernel: 1,
            stride: 1,
            groups: 1,
        },
        Case {
            name: "mobilenet_v2 1×1 96→24 56",
            c_in: 96,
            c_out: 24,
            size: 56,
            kernel: 1,
            stride: 1,
            groups: 1,
        },
        Case {
            name: "mobilenet_v2 1×1 16→96 112",
            c_in: 16,
            c_out: 96,
            size: 112,
            kernel: 1,
            stride: 1,
            groups: 1,
        },
        Case {
            name: "mobilenet_v2 dw 3×3 32 112",
            c_in: 32,
            c_out: 32,
            size: 112,
            kernel: 3,
            stride: 1,
            groups: 32,
        },
        Case {
            name: "mobilenet_v2 dw 3×3/2 96 112",
            c_in: 96,
            c_out: 96,
            size: 112,
            kernel: 3,
            stride: 2,
            groups: 96,
        },
        Case {
            name: "mobilenet_v2 dw 3×3 384 14",
            c_in: 384,
            c_out: 384,
            size: 14,
            kernel: 3,
            stride: 1,
            groups: 384,
        },
        Case {
            name: "mobilenet_v2 dw 3×3 960 7",
            c_in: 960,
            c_out: 960,
            size: 7,
            kernel: 3,
            stride: 1,
            groups: 960,
        },
        Case {
            name: "mobilenet_v2 dw 3×3 144 56",
            c_in: 144,
            c_out: 144,
            size: 56,
            kernel: 3,
            stride: 1,
            groups: 144,
        },
        Case {
            name: "mobilenet_v2 dw 3×3/2 144 56",
            c_in: 144,
            c_out: 144,
            size: 56,
            kernel: 3,
            stride: 2,
            groups: 144,
        },
    ];
    for case in cases.iter().filter(|c| c.name.contains(&filter)) {
        let g = conv_gflops(case, repeat, false);
        println!("{:<34} {g:>9.1} {:>8}", case.name, share(g));
        if case.groups < case.c_in {
            let g = conv_gflops(case, repeat, true);
            println!("{:<34} {g:>9.1} {:>8}", "  kernel packed ahead", share(g));
        }
    }
}
