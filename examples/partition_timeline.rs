//! Draws the partition lab's timelines: one panel per scenario record in
//! `target/partition-lab/*.json` (written by `cargo test --test tests partition`), into one SVG.
//!
//! ```sh
//! cargo run --example partition_timeline -- [RESULTS_DIR] [OUT.svg]
//! # defaults: target/partition-lab  target/partition-lab/timelines.svg
//! cargo run --example partition_timeline -- target/partition-lab docs/partition-lab.svg
//! ```
//!
//! Per panel, x is seconds from the fault; one row per site, where each request landed (a dot at
//! its end; a bar from its start when it took a second or more) and where the long-lived stream
//! was (the thick line above the row); a red band while the balancer held that site unready;
//! the fault and the heal as vertical lines; failed requests in the bottom row.

use std::error::Error;
use std::path::{Path, PathBuf};

use plotters::prelude::*;

// The record type the scenario tests write; its fields are read here only in part.
#[allow(dead_code)]
#[path = "../tests/partition/timeline.rs"]
mod timeline;

use timeline::Timeline;

const PANEL_HEIGHT: u32 = 230;
const LEGEND_HEIGHT: u32 = 40;
const WIDTH: u32 = 1100;
/// Rows, bottom to top: failed requests, then the sites.
const ROWS: [&str; 4] = ["failed", "witness", "dc-b", "dc-a"];

const GOOD: RGBColor = RGBColor(30, 140, 60);
const BAD: RGBColor = RGBColor(230, 120, 0);
const BASELINE: RGBColor = RGBColor(110, 110, 110);
const STREAM: RGBColor = RGBColor(40, 90, 200);
const UNREADY: RGBColor = RGBColor(255, 215, 215);
const FAULT: RGBColor = RGBColor(200, 0, 0);
const HEAL: RGBColor = RGBColor(0, 150, 0);

fn row(site: &str) -> f64 {
    ROWS.iter().position(|r| *r == site).unwrap_or(0) as f64
}

/// Green if the request landed on a good backend of the phase it ended in, orange if not, grey
/// before the fault.
fn color(t: &Timeline, end: f64, site: &str) -> RGBColor {
    match t.phases.iter().rev().find(|p| end > p.from && end <= p.to) {
        Some(p) if p.good.iter().any(|g| g == site) => GOOD,
        Some(_) => BAD,
        None if end <= 0.0 => BASELINE,
        None => GOOD,
    }
}

/// Intervals during which the balancer held `site` unready, clipped to `[x0, x1]`.
fn unready_bands(t: &Timeline, site: &str, x0: f64, x1: f64) -> Vec<(f64, f64)> {
    let mut bands = Vec::new();
    let mut since = None;
    for c in t.states.iter().filter(|c| c.site == site) {
        match (c.to.as_str(), since) {
            ("unready", None) => since = Some(c.t.max(x0)),
            ("ready", Some(s)) => {
                bands.push((s, c.t));
                since = None;
            }
            _ => {}
        }
    }
    if let Some(s) = since {
        bands.push((s, x1));
    }
    bands
}

fn panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    t: &Timeline,
) -> Result<(), Box<dyn Error>>
where
    DB::ErrorType: 'static,
{
    let x0 = t
        .requests
        .first()
        .map(|r| r.start)
        .unwrap_or(-3.0)
        .clamp(-3.0, 0.0)
        .floor();
    let x1 = t.phases.iter().map(|p| p.to).fold(1.0, f64::max).ceil();
    let mut chart = ChartBuilder::on(area)
        .caption(
            format!("{}  [fault: {}]", t.title, t.fault),
            ("sans-serif", 14),
        )
        .margin(6)
        .x_label_area_size(30)
        .y_label_area_size(64)
        .build_cartesian_2d(x0..x1, -0.5f64..3.6f64)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .light_line_style(TRANSPARENT)
        .y_labels(10)
        .y_label_formatter(&|y| {
            let r = y.round();
            if (y - r).abs() > 0.01 || r < 0.0 {
                return String::new();
            }
            ROWS.get(r as usize)
                .map(|s| s.to_string())
                .unwrap_or_default()
        })
        .x_desc("seconds from the fault")
        .label_style(("sans-serif", 12))
        .draw()?;

    for site in &t.sites {
        let y = row(site);
        let bands = unready_bands(t, site, x0, x1);
        chart.draw_series(
            bands
                .into_iter()
                .map(|(a, b)| Rectangle::new([(a, y - 0.42), (b, y + 0.42)], UNREADY.filled())),
        )?;
    }
    let vline =
        |x: f64, c: RGBColor| PathElement::new(vec![(x, -0.5), (x, 3.6)], c.stroke_width(2));
    chart.draw_series(std::iter::once(vline(0.0, FAULT)))?;
    if let Some(h) = t.heal_at {
        chart.draw_series(std::iter::once(vline(h, HEAL)))?;
    }
    chart.draw_series(t.stream.iter().map(|s| {
        let y = row(&s.site) + 0.28;
        PathElement::new(vec![(s.first, y), (s.last, y)], STREAM.stroke_width(4))
    }))?;
    let landed = t.requests.iter().filter(|r| r.ok);
    chart.draw_series(landed.clone().filter(|r| r.end - r.start >= 1.0).map(|r| {
        let site = r.site.as_deref().unwrap_or("failed");
        let (y, c) = (row(site), color(t, r.end, site));
        PathElement::new(vec![(r.start, y), (r.end, y)], c.stroke_width(2))
    }))?;
    chart.draw_series(landed.map(|r| {
        let site = r.site.as_deref().unwrap_or("failed");
        Circle::new((r.end, row(site)), 2, color(t, r.end, site).filled())
    }))?;
    chart.draw_series(
        t.requests
            .iter()
            .filter(|r| !r.ok)
            .map(|r| Cross::new((r.end, 0.0), 4, FAULT.stroke_width(2))),
    )?;
    Ok(())
}

/// One legend for every panel, in the strip above them.
fn legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
) -> Result<(), Box<dyn Error>>
where
    DB::ErrorType: 'static,
{
    let font = ("sans-serif", 12).into_font();
    let y = 24;
    let mut x = 20;
    let label = |x: &mut i32, text: &str| -> Result<(), Box<dyn Error>> {
        area.draw_text(text, &font.color(&BLACK), (*x + 20, y - 6))?;
        *x += 32 + 11 * text.len() as i32 / 2;
        Ok(())
    };
    area.draw(&Circle::new((x + 7, y), 3, GOOD.filled()))?;
    label(&mut x, "request on a good backend")?;
    area.draw(&Circle::new((x + 7, y), 3, BAD.filled()))?;
    label(&mut x, "request on a bad one")?;
    area.draw(&Circle::new((x + 7, y), 3, BASELINE.filled()))?;
    label(&mut x, "before the fault")?;
    area.draw(&PathElement::new(
        vec![(x, y), (x + 14, y)],
        GOOD.stroke_width(2),
    ))?;
    label(&mut x, "request took >= 1 s")?;
    area.draw(&Cross::new((x + 7, y), 4, FAULT.stroke_width(2)))?;
    label(&mut x, "failed")?;
    area.draw(&PathElement::new(
        vec![(x, y), (x + 14, y)],
        STREAM.stroke_width(4),
    ))?;
    label(&mut x, "long-lived stream")?;
    area.draw(&Rectangle::new(
        [(x, y - 6), (x + 14, y + 6)],
        UNREADY.filled(),
    ))?;
    label(&mut x, "site unready (balancer)")?;
    area.draw(&PathElement::new(
        vec![(x + 6, y - 8), (x + 6, y + 8)],
        FAULT.stroke_width(2),
    ))?;
    label(&mut x, "fault")?;
    area.draw(&PathElement::new(
        vec![(x + 6, y - 8), (x + 6, y + 8)],
        HEAL.stroke_width(2),
    ))?;
    label(&mut x, "healed")?;
    Ok(())
}

fn main() -> Result<(), Box<dyn Error>> {
    let mut args = std::env::args().skip(1);
    let dir = args.next().map(PathBuf::from).unwrap_or_else(|| {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("target")
            .join("partition-lab")
    });
    let out = args
        .next()
        .map(PathBuf::from)
        .unwrap_or_else(|| dir.join("timelines.svg"));
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map_err(|e| format!("{}: {e} (run the partition lab first)", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    let mut timelines = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f)?;
        let t: Timeline =
            serde_json::from_str(&text).map_err(|e| format!("{}: {e}", f.display()))?;
        timelines.push(t);
    }
    if timelines.is_empty() {
        return Err(format!("no scenario records in {}", dir.display()).into());
    }
    let n = timelines.len() as u32;
    let root = SVGBackend::new(&out, (WIDTH, LEGEND_HEIGHT + PANEL_HEIGHT * n)).into_drawing_area();
    root.fill(&WHITE)?;
    let (header, body) = root.split_vertically(LEGEND_HEIGHT);
    legend(&header)?;
    for (area, t) in body.split_evenly((n as usize, 1)).iter().zip(&timelines) {
        panel(area, t)?;
    }
    root.present()?;
    println!("{} scenario(s) drawn into {}", n, out.display());
    Ok(())
}
