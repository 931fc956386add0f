//! The printed table (readyprism against HAProxy, with ratios), `results.json`, and the picture:
//! new client connections per 100 ms over time, one panel per scenario, both balancers.

use std::path::Path;

use serde::Serialize;

use crate::checks::find;
use crate::fleet::Kind;
use crate::measure::{Outcome, BUCKET_S};
use crate::scenario::Scenario;

/// The table, markdown, one block of rows per scenario.
pub fn table(scenarios: &[Scenario], outcomes: &[Outcome]) -> String {
    let mut out = String::from(
        "| scenario | measure | readyprism | HAProxy | ratio |\n|---|---|---|---|---|\n",
    );
    for s in scenarios {
        let (Some(r), Some(h)) = (
            find(outcomes, *s, Kind::Readyprism),
            find(outcomes, *s, Kind::Haproxy),
        ) else {
            continue;
        };
        let mut row = |measure: &str, a: Option<f64>, b: Option<f64>| {
            let fmt = |v: Option<f64>| v.map_or("–".to_string(), trim);
            let ratio = match (a, b) {
                (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
                _ => "–".to_string(),
            };
            out.push_str(&format!(
                "| {} | {measure} | {} | {} | {ratio} |\n",
                s.name(),
                fmt(a),
                fmt(b)
            ));
        };
        let n = |v: usize| Some(v as f64);
        row(
            "connections closed by the balancer",
            n(r.closed_by_balancer),
            n(h.closed_by_balancer),
        );
        row(
            "client errors (requests cut + dials failed)",
            n(r.client_errors),
            n(h.client_errors),
        );
        row("dials failed", n(r.dials_failed), n(h.dials_failed));
        row(
            "new client TLS connections after the fault",
            n(r.new_connections),
            n(h.new_connections),
        );
        row(
            "peak new connections per 100 ms",
            n(r.peak_per_100ms),
            n(h.peak_per_100ms),
        );
        row(
            "peak new connections per 1 s",
            n(r.peak_per_s),
            n(h.peak_per_s),
        );
        row(
            "apiserver TLS handshakes after the fault (clients + probes)",
            Some(r.apiserver_handshakes as f64),
            Some(h.apiserver_handshakes as f64),
        );
        if s.has_victim() {
            row(
                "connections on the victim at the fault",
                r.to_move.map(|v| v as f64),
                h.to_move.map(|v| v as f64),
            );
            row(
                "seconds until no connection is on the victim",
                r.all_off_victim_s,
                h.all_off_victim_s,
            );
        }
        if *s == Scenario::Drain {
            row(
                "connections on the draining apiserver at its listener close",
                r.on_victim_at_close.map(|v| v as f64),
                h.on_victim_at_close.map(|v| v as f64),
            );
            row(
                "2 × moved / 5 s (the goal's bound on peak per 1 s)",
                r.spread_bound_per_s,
                h.spread_bound_per_s,
            );
        }
        row(
            "clients connected at the end",
            n(r.connected_at_end),
            n(h.connected_at_end),
        );
    }
    out
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

/// One panel per scenario: new client connections per 100 ms after the fault, both balancers.
pub fn svg(path: &Path, scenarios: &[Scenario], outcomes: &[Outcome]) -> Result<(), String> {
    use plotters::prelude::*;
    let rows = scenarios.len().max(1);
    let root = SVGBackend::new(path, (960, 260 * rows as u32)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let panels = root.split_evenly((rows, 1));
    let colours = [
        (Kind::Readyprism, RGBColor(200, 40, 40)),
        (Kind::Haproxy, RGBColor(30, 90, 200)),
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
                kind.name(),
                o.new_connections,
                o.closed_by_balancer,
                o.client_errors
            );
            chart
                .draw_series(LineSeries::new(points, colour.stroke_width(2)))
                .map_err(|e| e.to_string())?
                .label(label)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK)
            .draw()
            .map_err(|e| e.to_string())?;
    }
    root.present().map_err(|e| e.to_string())
}
