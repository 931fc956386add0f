//! Criterion micro-benchmarks of the routing table: the writer's copy-and-edit of a snapshot, the
//! `ArcSwap` store that publishes it, and the accept path's load-and-pick, over 3, 16 and 64
//! backends. Needs the hidden hooks: `cargo bench --bench snapshot --features bench-internals`.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use readyprism::testing::snapshot_bench::SnapshotBench;

fn bench_snapshot(c: &mut Criterion) {
    let mut g = c.benchmark_group("snapshot");
    for n in [3usize, 16, 64] {
        let mut t = SnapshotBench::new(n);
        let mut i = 0usize;
        g.bench_function(BenchmarkId::new("build", n), |b| {
            b.iter(|| {
                i = i.wrapping_add(1);
                black_box(t.build(i))
            })
        });
        g.bench_function(BenchmarkId::new("build_and_swap", n), |b| {
            b.iter(|| {
                i = i.wrapping_add(1);
                t.build(i);
                t.swap();
            })
        });
        g.bench_function(BenchmarkId::new("load_and_pick", n), |b| {
            b.iter(|| {
                i = i.wrapping_add(1);
                black_box(t.load_and_pick(i))
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench_snapshot);
criterion_main!(benches);
