//! What the benches' pictures share: a labelled line and the legend, drawn alike in every SVG.
//! Not the charts' axes, ranges and captions (each bench's `report.rs`).

#![allow(dead_code)] // each bench uses what it needs

use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

/// A chart with a number on each axis, drawn to SVG.
pub type Chart<'a, 'b> =
    ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// Draws `points` as a 2 px line in `colour`, shown in the legend as `label`.
pub fn line(
    chart: &mut Chart<'_, '_>,
    points: Vec<(f64, f64)>,
    colour: RGBColor,
    label: String,
) -> Result<(), String> {
    chart
        .draw_series(LineSeries::new(points, colour.stroke_width(2)))
        .map_err(|e| e.to_string())?
        .label(label)
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2)));
    Ok(())
}

/// Draws the legend of every labelled line at `position`, boxed on white.
pub fn legend<'a, 'b: 'a>(
    chart: &mut Chart<'a, 'b>,
    position: SeriesLabelPosition,
) -> Result<(), String> {
    chart
        .configure_series_labels()
        .position(position)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()
        .map_err(|e| e.to_string())
}
