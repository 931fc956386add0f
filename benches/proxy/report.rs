//! Per-round values → per-scenario summaries (median of per-round readyprism/HAProxy ratios with
//! min–max, absolute medians), the printed table, `results.json`, and the latency picture.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use crate::chart;
use crate::targets::Kind;

/// How a ratio readyprism/HAProxy is judged.
#[derive(Debug, Clone, Copy, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Goal {
    /// Ratio at most this.
    RatioAtMost(f64),
    /// Ratio at least this.
    RatioAtLeast(f64),
    /// readyprism's own value at most this (absolute, in the metric's unit).
    AbsAtMost(f64),
    /// readyprism's own value exactly this.
    AbsExactly(f64),
    /// Reported only.
    None,
}

/// One measured quantity, one value per round per target.
#[derive(Debug, Serialize)]
pub struct Metric {
    /// Scenario, as in the table.
    pub scenario: &'static str,
    /// What is measured.
    pub measure: &'static str,
    /// Unit of the values.
    pub unit: &'static str,
    /// The target.
    pub goal: Goal,
    /// Per target name, one value per round.
    pub values: BTreeMap<&'static str, Vec<f64>>,
}

impl Metric {
    /// An empty metric.
    pub fn new(
        scenario: &'static str,
        measure: &'static str,
        unit: &'static str,
        goal: Goal,
    ) -> Self {
        Metric {
            scenario,
            measure,
            unit,
            goal,
            values: BTreeMap::new(),
        }
    }

    /// Records `v` for `kind` in the current round.
    pub fn push(&mut self, kind: Kind, v: f64) {
        self.values.entry(kind.name()).or_default().push(v);
    }
}

/// median, min, max.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Spread {
    /// Median.
    pub median: f64,
    /// Smallest.
    pub min: f64,
    /// Largest.
    pub max: f64,
}

impl Spread {
    /// Of `v` (empty: NaN).
    pub fn of(v: &[f64]) -> Spread {
        let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
        if s.is_empty() {
            return Spread {
                median: f64::NAN,
                min: f64::NAN,
                max: f64::NAN,
            };
        }
        s.sort_by(f64::total_cmp);
        let n = s.len();
        let median = if n % 2 == 1 {
            s[n / 2]
        } else {
            (s[n / 2 - 1] + s[n / 2]) / 2.0
        };
        Spread {
            median,
            min: s[0],
            max: s[n - 1],
        }
    }
}

/// A metric summarised.
#[derive(Debug, Serialize)]
pub struct Summary {
    /// Scenario.
    pub scenario: &'static str,
    /// Measure.
    pub measure: &'static str,
    /// Unit.
    pub unit: &'static str,
    /// Target.
    pub goal: Goal,
    /// Per target: median, min, max over rounds.
    pub absolute: BTreeMap<&'static str, Spread>,
    /// Per-round readyprism/HAProxy ratios.
    pub ratios: Vec<f64>,
    /// Their median, min and max.
    pub ratio: Option<Spread>,
    /// Met, on the median ratio (or readyprism's median value for absolute goals).
    pub met: Option<bool>,
    /// Per target, one value per round.
    pub values: BTreeMap<&'static str, Vec<f64>>,
}

/// Summarises `m`.
pub fn summarise(m: Metric) -> Summary {
    let absolute = m.values.iter().map(|(k, v)| (*k, Spread::of(v))).collect();
    let ratios: Vec<f64> = match (m.values.get("readyprism"), m.values.get("haproxy")) {
        (Some(r), Some(h)) => r.iter().zip(h).map(|(r, h)| r / h).collect(),
        _ => Vec::new(),
    };
    let ratio = (!ratios.is_empty()).then(|| Spread::of(&ratios));
    let own: Option<f64> = m.values.get("readyprism").map(|v| Spread::of(v).median);
    let met = match m.goal {
        Goal::RatioAtMost(x) => ratio.map(|r| r.median <= x),
        Goal::RatioAtLeast(x) => ratio.map(|r| r.median >= x),
        Goal::AbsAtMost(x) => own.map(|v| v <= x),
        Goal::AbsExactly(x) => own.map(|v| (v - x).abs() < 0.05),
        Goal::None => None,
    };
    Summary {
        scenario: m.scenario,
        measure: m.measure,
        unit: m.unit,
        goal: m.goal,
        absolute,
        ratios,
        ratio,
        met,
        values: m.values,
    }
}

fn goal_text(g: Goal) -> String {
    match g {
        Goal::RatioAtMost(x) => format!("ratio ≤ {x}"),
        Goal::RatioAtLeast(x) => format!("ratio ≥ {x}"),
        Goal::AbsAtMost(x) => format!("≤ {x}"),
        Goal::AbsExactly(x) => format!("= {x}"),
        Goal::None => "-".into(),
    }
}

fn num(v: f64) -> String {
    if !v.is_finite() {
        "-".into()
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// The table as Markdown: one row per metric.
pub fn markdown(summaries: &[Summary]) -> String {
    let mut out = String::from(
        "| scenario | measure | readyprism | HAProxy | nginx | direct | ratio rp/HAProxy median (min–max) | target | met |\n\
         |---|---|---|---|---|---|---|---|---|\n",
    );
    for s in summaries {
        let abs = |k: &str| s.absolute.get(k).map_or("-".into(), |a| num(a.median));
        let ratio = s.ratio.map_or("-".into(), |r| {
            format!("{} ({}–{})", num(r.median), num(r.min), num(r.max))
        });
        let met = match s.met {
            Some(true) => "yes",
            Some(false) => "**no**",
            None => "-",
        };
        out.push_str(&format!(
            "| {} | {} ({}) | {} | {} | {} | {} | {} | {} | {} |\n",
            s.scenario,
            s.measure,
            s.unit,
            abs("readyprism"),
            abs("haproxy"),
            abs("nginx"),
            abs("direct"),
            ratio,
            goal_text(s.goal),
            met
        ));
    }
    out
}

/// Nearest-rank percentile of sorted `v`.
pub fn pct(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1] as f64
}

/// Cumulative distributions of the 64 B round trips (µs), one line per target, as SVG.
pub fn latency_svg(
    path: &Path,
    title: &str,
    samples: &BTreeMap<Kind, Vec<u64>>,
) -> Result<(), String> {
    use plotters::prelude::*;
    let mut upper = 0.0f64;
    for v in samples.values() {
        upper = upper.max(pct(v, 99.5) / 1000.0);
    }
    let upper = (upper * 1.05).max(1.0);
    let root = SVGBackend::new(path, (900, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(55)
        .build_cartesian_2d(0.0..upper, 0.0..1.0)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc("round-trip time, µs (64 B on an open connection)")
        .y_desc("fraction of round trips ≤ x")
        .draw()
        .map_err(|e| e.to_string())?;
    let colours = [
        (Kind::Direct, RGBColor(120, 120, 120)),
        (Kind::Readyprism, RGBColor(200, 40, 40)),
        (Kind::Haproxy, RGBColor(30, 90, 200)),
        (Kind::Nginx, RGBColor(40, 150, 60)),
    ];
    for (kind, colour) in colours {
        let Some(v) = samples.get(&kind) else {
            continue;
        };
        let n = v.len();
        let step = (n / 400).max(1);
        let points: Vec<(f64, f64)> = (0..n)
            .step_by(step)
            .chain(std::iter::once(n - 1))
            .map(|i| (v[i] as f64 / 1000.0, (i + 1) as f64 / n as f64))
            .filter(|&(x, _)| x <= upper)
            .collect();
        let label = format!(
            "{}: p50 {:.1} µs, p99 {:.1} µs",
            kind.name(),
            pct(v, 50.0) / 1000.0,
            pct(v, 99.0) / 1000.0
        );
        chart::line(&mut chart, points, colour, label)?;
    }
    chart::legend(&mut chart, SeriesLabelPosition::LowerRight)?;
    root.present().map_err(|e| e.to_string())
}

/// Writes `value` as pretty JSON to `path`.
pub fn write_json(path: &Path, value: &impl Serialize) {
    let text = serde_json::to_string_pretty(value).expect("results serialise");
    std::fs::write(path, text).expect("write results.json");
}
