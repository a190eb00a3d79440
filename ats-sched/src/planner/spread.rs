//! Spreading residency over the layers: the static DP sees alike items of
//! different layers as equal and keeps whole runs of layers resident, but
//! a copy runs at most a few items ahead of its reader, so a run of
//! non-resident layers waits on the link while a resident run leaves it
//! idle (llama-8b at 4G on a PCIe 5 desktop: 29.0 ms per token clustered,
//! 27.0 ms spread, by the planner's estimate).

use std::collections::BTreeMap;

use ats_core::graph::SubLayer;

use super::context::Ctx;

/// `resident` with each class of alike streamable items (one sub-layer,
/// one size) keeping as many resident, spread evenly over the layers: the
/// same bytes on the GPU. `why` is updated for the items that moved.
pub(super) fn spread(
    ctx: &Ctx<'_>,
    resident: &[bool],
    mut why: Vec<String>,
) -> (Vec<bool>, Vec<String>) {
    let mut out = resident.to_vec();
    for members in classes(ctx) {
        let n = members.len();
        let r = members.iter().filter(|&&i| resident[i]).count();
        for (&i, on) in members.iter().zip(even(n, r)) {
            out[i] = on;
            if out[i] != resident[i] {
                let state = if out[i] { "resident" } else { "not resident" };
                why[i] = format!("{state}: {r} of {n} alike items, spread over the layers");
            }
        }
    }
    (out, why)
}

/// What makes items alike: sub-layer, bytes, routed experts.
type Class = (SubLayer, u64, Option<(usize, usize)>);

/// Streamable per-layer items, in classes of alike ones, each in layer
/// order.
fn classes(ctx: &Ctx<'_>) -> Vec<Vec<usize>> {
    let mut classes: BTreeMap<Class, Vec<usize>> = BTreeMap::new();
    for (i, it) in ctx.items.iter().enumerate() {
        if it.layer.is_some() && ctx.streamable[i] {
            classes
                .entry((it.sublayer, it.bytes(), it.experts))
                .or_default()
                .push(i);
        }
    }
    classes.into_values().collect()
}

/// `r` of `n` places taken evenly: place k where the running share r*k/n
/// steps up.
fn even(n: usize, r: usize) -> impl Iterator<Item = bool> {
    (0..n).map(move |k| (k + 1) * r / n > k * r / n)
}

#[cfg(test)]
mod tests {
    use super::even;

    #[test]
    fn even_takes_r_places_with_no_run_longer_than_needed() {
        for n in 1..=48 {
            for r in 0..=n {
                let v: Vec<bool> = even(n, r).collect();
                assert_eq!(v.iter().filter(|&&b| b).count(), r, "{n} {r}");
                // any window of w places holds floor or ceil of w*r/n
                for w in 1..=n {
                    for s in 0..=n - w {
                        let c = v[s..s + w].iter().filter(|&&b| b).count();
                        let lo = w * r / n;
                        assert!(c >= lo && c <= lo + 1, "{n} {r}: {c} in {s}..{}", s + w);
                    }
                }
            }
        }
    }
}
