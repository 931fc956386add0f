//! The printed table (readyprism beside HAProxy and KubePrism, with its ratios to each),
//! `results.json`, and the picture: new client connections per 100 ms over time, one panel per
//! scenario, a line per balancer kind.

use std::path::Path;

use serde::Serialize;

use crate::chart;
use crate::checks::find;
use crate::fleet::Kind;
use crate::measure::{Outcome, BUCKET_S};
use crate::scenario::Scenario;

/// The table, markdown, one block of rows per scenario: a column per kind in `kinds` (readyprism
/// first), then readyprism's ratio to each of the others.
pub fn table(scenarios: &[Scenario], kinds: &[Kind], outcomes: &[Outcome]) -> String {
    let others: Vec<Kind> = kinds
        .iter()
        .copied()
        .filter(|k| *k != Kind::Readyprism)
        .collect();
    let mut out = String::from("| scenario | measure |");
    for k in kinds {
        out.push_str(&format!(" {} |", k.label()));
    }
    for k in &others {
        out.push_str(&format!(" ratio to {} |", k.label()));
    }
    out.push_str(&format!(
        "\n|{}\n",
        "---|".repeat(2 + kinds.len() + others.len())
    ));
    for s in scenarios {
        let Some(per_kind) = kinds
            .iter()
            .map(|k| find(outcomes, *s, *k))
            .collect::<Option<Vec<&Outcome>>>()
        else {
            continue;
        };
        for (measure, value) in rows(*s) {
            let values: Vec<Option<f64>> = per_kind.iter().map(|o| value(o)).collect();
            let ours = kinds
                .iter()
                .position(|k| *k == Kind::Readyprism)
                .and_then(|i| values[i]);
            out.push_str(&format!("| {} | {measure} |", s.name()));
            for v in &values {
                out.push_str(&format!(" {} |", v.map_or("–".to_string(), trim)));
            }
            for (k, v) in kinds.iter().zip(&values) {
                if *k == Kind::Readyprism {
                    continue;
                }
                let ratio = match (ours, v) {
                    (Some(a), Some(b)) if *b > 0.0 => format!("{:.2}", a / b),
                    _ => "–".to_string(),
                };
                out.push_str(&format!(" {ratio} |"));
            }
            out.push('\n');
        }
    }
    out
}

/// One measure of the table: its words and how it is read from an outcome.
type Row = (&'static str, fn(&Outcome) -> Option<f64>);

/// The measures of scenario `s`, in the table's order.
fn rows(s: Scenario) -> Vec<Row> {
    let mut rows: Vec<Row> = vec![
        ("connections closed by the balancer", |o| {
            Some(o.closed_by_balancer as f64)
        }),
        ("client errors (requests cut + dials failed)", |o| {
            Some(o.client_errors as f64)
        }),
        ("dials failed", |o| Some(o.dials_failed as f64)),
        ("new client TLS connections after the fault", |o| {
            Some(o.new_connections as f64)
        }),
        ("peak new connections per 100 ms", |o| {
            Some(o.peak_per_100ms as f64)
        }),
        ("peak new connections per 1 s", |o| {
            Some(o.peak_per_s as f64)
        }),
        (
            "apiserver TLS handshakes after the fault (clients + probes)",
            |o| Some(o.apiserver_handshakes as f64),
        ),
    ];
    if s.has_victim() {
        rows.push(("connections on the victim at the fault", |o| {
            o.to_move.map(|v| v as f64)
        }));
        rows.push(("seconds until no connection is on the victim", |o| {
            o.all_off_victim_s
        }));
    }
    if s == Scenario::Drain {
        rows.push((
            "connections on the draining apiserver at its listener close",
            |o| o.on_victim_at_close.map(|v| v as f64),
        ));
        rows.push(("2 × moved / 5 s (the goal's bound on peak per 1 s)", |o| {
            o.spread_bound_per_s
        }));
    }
    rows.push(("clients connected at the end", |o| {
        Some(o.connected_at_end as f64)
    }));
    rows
}

/// An integer as such, anything else with one decimal.
fn trim(v: f64) -> String {
    if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// Writes `value` as pretty JSON to `path`.
pub fn write_json(path: &Path, value: &impl Serialize) -> Result<(), String> {
    let text = serde_json::to_string_pretty(value).map_err(|e| e.to_string())?;
    std::fs::write(path, text).map_err(|e| e.to_string())
}

/// One panel per scenario: new client connections per 100 ms after the fault, a line per kind.
pub fn svg(path: &Path, scenarios: &[Scenario], outcomes: &[Outcome]) -> Result<(), String> {
    use plotters::prelude::*;
    let rows = scenarios.len().max(1);
    let root = SVGBackend::new(path, (960, 260 * rows as u32)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let panels = root.split_evenly((rows, 1));
    let colours = [
        (Kind::Readyprism, RGBColor(200, 40, 40)),
        (Kind::Paced, RGBColor(230, 150, 30)),
        (Kind::Haproxy, RGBColor(30, 90, 200)),
        (Kind::Kubeprism, RGBColor(30, 150, 60)),
    ];
    for (s, panel) in scenarios.iter().zip(panels.iter()) {
        let series: Vec<(Kind, RGBColor, &Outcome)> = colours
            .iter()
            .filter_map(|&(k, c)| find(outcomes, *s, k).map(|o| (k, c, o)))
            .collect();
        let top = series
            .iter()
            .map(|(_, _, o)| o.peak_per_100ms)
            .max()
            .unwrap_or(0)
            .max(1) as f64
            * 1.1;
        let right = series
            .iter()
            .map(|(_, _, o)| o.window_s)
            .fold(1.0f64, f64::max);
        let clients = series.first().map_or(0, |(_, _, o)| o.clients);
        let mut chart = ChartBuilder::on(panel)
            .caption(
                format!("{} — {clients} clients", s.title()),
                ("sans-serif", 17),
            )
            .margin(10)
            .x_label_area_size(35)
            .y_label_area_size(50)
            .build_cartesian_2d(0.0..right, 0.0..top)
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .x_desc("seconds after the fault began (dashed: the fault's end)")
            .y_desc("new conns / 100 ms")
            .draw()
            .map_err(|e| e.to_string())?;
        // The fault's end (a blink over; the drain's listener closes), dashed.
        let end = s.fault_len().as_secs_f64();
        if end > 0.0 {
            let dashes = (0..20).map(|i| {
                let y0 = top * f64::from(i) / 20.0;
                PathElement::new(vec![(end, y0), (end, y0 + top / 40.0)], BLACK.mix(0.5))
            });
            chart.draw_series(dashes).map_err(|e| e.to_string())?;
        }
        for (kind, colour, o) in series {
            let points: Vec<(f64, f64)> = o
                .per_100ms
                .iter()
                .enumerate()
                .map(|(i, &n)| (i as f64 * BUCKET_S, n as f64))
                .collect();
            let label = format!(
                "{}: {} new, {} closed by it, {} client errors",
                kind.label(),
                o.new_connections,
                o.closed_by_balancer,
                o.client_errors
            );
            chart::line(&mut chart, points, colour, label)?;
        }
        chart::legend(&mut chart, SeriesLabelPosition::UpperRight)?;
    }
    root.present().map_err(|e| e.to_string())
}
