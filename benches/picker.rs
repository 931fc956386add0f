//! Criterion micro-benchmarks of the picker, the one decision on every new client connection:
//! `pick` and `fallback` over 3 (a typical control plane), 16 and 64 backends.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use readyprism::pick::{fallback, pick, Candidate, WhenNoneReady};
use readyprism::verdict::{Reach, State};

/// `n` backends as a stretched cluster shows them: a third local, latencies spread over 1–40 ms
/// (so tolerance bands hold several), every fifth unready, some with active connections.
fn cluster(n: usize) -> Vec<Candidate> {
    (0..n)
        .map(|i| Candidate {
            state: if i % 5 == 4 {
                State::Unready
            } else {
                State::Ready
            },
            reach: Some(if i % 7 != 0 {
                Reach::answered(200, Duration::from_millis(2))
            } else {
                Reach::Connected
            }),
            local: i % 3 == 0,
            latency: Some(Duration::from_micros(1000 + (i as u64 * 7919) % 39_000)),
            active: (i * 13) % 4,
            paced: false,
            degraded: false,
        })
        .collect()
}

fn bench_pick(c: &mut Criterion) {
    let mut g = c.benchmark_group("pick");
    for n in [3usize, 16, 64] {
        let cands = cluster(n);
        g.bench_with_input(BenchmarkId::new("ready", n), &cands, |b, cands| {
            let mut rr = 0usize;
            b.iter(|| {
                rr = rr.wrapping_add(1);
                pick(black_box(cands), WhenNoneReady::FailOpen, rr)
            })
        });
        let unready: Vec<Candidate> = cands
            .iter()
            .map(|c| Candidate {
                state: State::Unready,
                ..*c
            })
            .collect();
        g.bench_with_input(BenchmarkId::new("none_ready", n), &unready, |b, cands| {
            b.iter(|| pick(black_box(cands), WhenNoneReady::FailOpen, 7))
        });
        g.bench_with_input(BenchmarkId::new("fallback", n), &cands, |b, cands| {
            b.iter(|| fallback(black_box(cands), WhenNoneReady::FailOpen, 7))
        });
    }
    g.finish();
}

criterion_group!(benches, bench_pick);
criterion_main!(benches);
