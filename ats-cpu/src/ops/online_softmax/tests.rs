//! Every path of the update against the portable one, and the grouping of
//! heads against one at a time.

use super::*;

fn values(n: usize, seed: f32) -> Vec<f32> {
    (0..n)
        .map(|i| ((i as f32 + seed) * 0.731).sin() * 2.0)
        .collect()
}

/// `x` in f16.
fn halves(x: &[f32]) -> Vec<f16> {
    x.iter().map(|&v| f16::from_f32(v)).collect()
}

/// Runs [`update`] and [`update_scalar`] twice on `b` (from a fresh
/// state, then on top of it: the rescale) and compares the states.
fn check(q: &[f32], b: Block<'_>, what: &str) {
    check_with(update, q, b, what)
}

/// [`check`] for the update `f`.
fn check_with(f: impl Fn(&[f32], Block<'_>, f32, State<'_>), q: &[f32], b: Block<'_>, what: &str) {
    let hd = q.len();
    let (mut m1, mut l1, mut a1) = (f32::NEG_INFINITY, 0f32, vec![0f32; hd]);
    let (mut m2, mut l2, mut a2) = (f32::NEG_INFINITY, 0f32, vec![0f32; hd]);
    for s in [0.1, 0.7] {
        let st1 = State {
            m: &mut m1,
            l: &mut l1,
            acc: &mut a1,
        };
        f(q, b, s, st1);
        let st2 = State {
            m: &mut m2,
            l: &mut l2,
            acc: &mut a2,
        };
        update_scalar(q, b, s, st2);
    }
    // the portable path sums a score in 64-value pieces, the AVX2 one in
    // eight lanes: a few ulp apart, carried by the exponentials
    let tol = 3e-5;
    assert!(
        (m1 - m2).abs() <= tol * m2.abs().max(1.0),
        "{what}: m {m1} vs {m2}"
    );
    assert!((l1 - l2).abs() <= tol * l2, "{what}: l {l1} vs {l2}");
    for (x, y) in a1.iter().zip(&a2) {
        assert!((x - y).abs() <= tol * l2, "{what}: acc {x} vs {y}");
    }
}

#[test]
fn simd_update_matches_the_portable_one_in_f32_and_f16() {
    for (hd, n, stride) in [
        (64, 16, 192),
        (128, 64, 1024),
        (8, 1, 8),
        (256, 37, 512),
        (80, 5, 80),
    ] {
        let q = values(hd, 1.0);
        let k = values(n * stride, 2.0);
        let v = values(n * stride, 3.0);
        let kv = KvData::F32 { k: &k, v: &v };
        check(&q, Block { kv, stride, n }, &format!("f32 hd {hd}"));
        let (kh, vh) = (halves(&k), halves(&v));
        let kv = KvData::F16 { k: &kh, v: &vh };
        check(&q, Block { kv, stride, n }, &format!("f16 hd {hd}"));
    }
}

/// Both x86 paths against the portable one, whichever `update` picks
/// here: the 512-bit one takes every head length the AVX2 one takes
/// that is a multiple of 16.
#[cfg(target_arch = "x86_64")]
#[test]
fn each_x86_path_matches_the_portable_one() {
    let mut ran = 0;
    for (hd, n, stride) in [(64, 64, 192), (64, 13, 64), (128, 33, 256), (256, 7, 256)] {
        let q = values(hd, 1.0);
        let k = values(n * stride, 2.0);
        let v = values(n * stride, 3.0);
        let (kh, vh) = (halves(&k), halves(&v));
        for kv in [KvData::F32 { k: &k, v: &v }, KvData::F16 { k: &kh, v: &vh }] {
            let b = Block { kv, stride, n };
            if avx2_takes(hd, &b) {
                // SAFETY: the AVX2 kernels take it (checked just now).
                let f =
                    |q: &[f32], b: Block<'_>, s, st: State<'_>| unsafe { update_avx2(q, b, s, st) };
                check_with(f, &q, b, &format!("avx2, hd {hd}, {n} keys"));
                ran += 1;
            }
            if wide_takes(hd, &b) {
                // SAFETY: the 512-bit kernels take it (checked just now).
                let f = |q: &[f32], b: Block<'_>, s, st: State<'_>| unsafe {
                    update_wide([q], b, s, [st])
                };
                check_with(f, &q, b, &format!("avx512, hd {hd}, {n} keys"));
                ran += 1;
            }
        }
    }
    eprintln!("{ran} x86 cases");
}

#[cfg(target_arch = "x86_64")]
#[test]
fn the_vector_maximum_is_the_scalar_fold() {
    if !crate::ops::vec::has_avx2() {
        return;
    }
    let mut x = values(64, 4.0);
    x[37] = 9.5;
    // NaNs in the first and last eight, in every lane of the last
    x[5] = f32::NAN;
    x[56..64].fill(f32::NAN);
    x[50] = f32::NEG_INFINITY;
    for from in [f32::NEG_INFINITY, 0.5, 12.0] {
        let want = x.iter().fold(from, |m, &v| m.max(v));
        // SAFETY: AVX2 detected above.
        let got = unsafe { avx2::max8(&x, from) };
        assert_eq!(got.to_bits(), want.to_bits(), "from {from}");
    }
}

#[test]
fn heads_two_at_a_time_give_the_bits_of_one_at_a_time() {
    for (heads, hd, n, stride) in [
        (3, 64, 37, 192),
        (7, 64, 20, 448),
        (8, 64, 64, 512),
        (9, 64, 3, 576),
        (2, 80, 64, 80),
        (4, 8, 1, 8),
        (5, 256, 9, 512),
        (2, 128, 4, 128),
    ] {
        let q = values(heads * hd, 1.0);
        let k = values(n * stride, 2.0);
        let v = values(n * stride, 3.0);
        let (kh, vh) = (halves(&k), halves(&v));
        for kv in [KvData::F32 { k: &k, v: &v }, KvData::F16 { k: &kh, v: &vh }] {
            let b = Block { kv, stride, n };
            let fresh = || {
                (
                    vec![f32::NEG_INFINITY; heads],
                    vec![0f32; heads],
                    vec![0f32; heads * hd],
                )
            };
            let (mut m1, mut l1, mut a1) = fresh();
            let (mut m2, mut l2, mut a2) = fresh();
            // twice: from fresh states, then on top of them (the rescale)
            for s in [0.1, 0.7] {
                let st = Heads {
                    m: &mut m1,
                    l: &mut l1,
                    acc: &mut a1,
                };
                update_heads(&q, b, s, st);
                for h in 0..heads {
                    let st = State {
                        m: &mut m2[h],
                        l: &mut l2[h],
                        acc: &mut a2[h * hd..][..hd],
                    };
                    update(&q[h * hd..][..hd], b, s, st);
                }
            }
            let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            let what = format!("{heads} heads of {hd}, {n} keys");
            assert_eq!(bits(&m1), bits(&m2), "{what}: m");
            assert_eq!(bits(&l1), bits(&l2), "{what}: l");
            assert_eq!(bits(&a1), bits(&a2), "{what}: acc");
            assert!(
                a1.iter().any(|&x| x != 0.0),
                "{what}: something accumulated"
            );
        }
    }
}

#[test]
fn f16_blocks_give_what_their_f32_values_give() {
    // the f16 path widens in registers: exactly the f32 path on the
    // same (f16-representable) values
    let (hd, n, stride) = (64, 37, 192);
    let q = values(hd, 1.0);
    let kh: Vec<f16> = values(n * stride, 2.0)
        .iter()
        .map(|&x| f16::from_f32(x))
        .collect();
    let vh: Vec<f16> = values(n * stride, 3.0)
        .iter()
        .map(|&x| f16::from_f32(x))
        .collect();
    let (k, v): (Vec<f32>, Vec<f32>) = (
        kh.iter().map(|x| x.to_f32()).collect(),
        vh.iter().map(|x| x.to_f32()).collect(),
    );
    let run = |kv: KvData<'_>| {
        let (mut m, mut l, mut a) = (f32::NEG_INFINITY, 0f32, vec![0f32; hd]);
        let b = Block { kv, stride, n }.rows(2, 30).cols(64);
        let st = State {
            m: &mut m,
            l: &mut l,
            acc: &mut a,
        };
        update(&q, b, 0.3, st);
        (m, l, a)
    };
    let want = run(KvData::F32 { k: &k, v: &v });
    assert_eq!(run(KvData::F16 { k: &kh, v: &vh }), want);
    // another head's columns give another answer (the test can fail)
    let other = {
        let (mut m, mut l, mut a) = (f32::NEG_INFINITY, 0f32, vec![0f32; hd]);
        let kv = KvData::F32 { k: &k, v: &v };
        let st = State {
            m: &mut m,
            l: &mut l,
            acc: &mut a,
        };
        update(&q, Block { kv, stride, n }.rows(2, 30), 0.3, st);
        (m, l, a)
    };
    assert_ne!(other, want);
}
