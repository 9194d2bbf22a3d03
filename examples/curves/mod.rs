//! Training curves of the examples: the metrics as JSON lines and the
//! loss and accuracy curves as a PNG, both in `target/curves/` (or
//! `$TENJIN_CURVES_DIR`).
//!
//! Drawn with `plotters` (bitmap backend, pure Rust) and a font compiled
//! into the binary (`epaint_default_fonts`' Ubuntu Light): no system font
//! library is needed.

use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};
use std::fmt::Write as _;
use std::path::PathBuf;

/// One curve: a name and its `(x, y)` points.
pub struct Series {
    pub name: &'static str,
    pub points: Vec<(f64, f64)>,
}

/// A panel of the figure: its title, x label and curves.
pub struct Panel {
    pub title: String,
    pub x_label: &'static str,
    pub series: Vec<Series>,
}

/// Where the files go.
pub fn dir() -> PathBuf {
    std::env::var_os("TENJIN_CURVES_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("target/curves"))
}

/// Writes `{name}.jsonl` (one line per point: `{"panel", "series", "x",
/// "y"}`) and `{name}.png` (the panels stacked), and prints their paths.
pub fn save(name: &str, panels: &[Panel]) -> Result<(), Box<dyn std::error::Error>> {
    let dir = dir();
    std::fs::create_dir_all(&dir)?;
    let mut lines = String::new();
    for p in panels {
        for s in &p.series {
            for &(x, y) in &s.points {
                writeln!(
                    lines,
                    "{{\"panel\": {:?}, \"series\": {:?}, \"x\": {x}, \"y\": {y}}}",
                    p.title, s.name
                )?;
            }
        }
    }
    let jsonl = dir.join(format!("{name}.jsonl"));
    std::fs::write(&jsonl, lines)?;
    let png = dir.join(format!("{name}.png"));
    draw(&png, panels)?;
    println!("curves: {} and {}", jsonl.display(), png.display());
    Ok(())
}

const COLORS: [RGBColor; 4] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
];

fn draw(path: &PathBuf, panels: &[Panel]) -> Result<(), Box<dyn std::error::Error>> {
    // Registering twice is harmless; the font lives in the binary.
    register_font(
        "sans-serif",
        FontStyle::Normal,
        epaint_default_fonts::UBUNTU_LIGHT,
    )
    .map_err(|_| "the embedded font could not be read")?;
    let height = 320 * panels.len() as u32;
    let root = BitMapBackend::new(path, (720, height)).into_drawing_area();
    root.fill(&WHITE)?;
    for (area, panel) in root.split_evenly((panels.len(), 1)).iter().zip(panels) {
        let points = panel.series.iter().flat_map(|s| s.points.iter());
        let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
        for &(x, y) in points.filter(|(x, y)| x.is_finite() && y.is_finite()) {
            (x0, x1, y0, y1) = (x0.min(x), x1.max(x), y0.min(y), y1.max(y));
        }
        if x0 > x1 {
            continue; // nothing finite to draw
        }
        let pad = ((y1 - y0) * 0.05).max(1e-9);
        let mut chart = ChartBuilder::on(area)
            .margin(12)
            .caption(&panel.title, ("sans-serif", 20))
            .x_label_area_size(36)
            .y_label_area_size(52)
            .build_cartesian_2d(x0..x1.max(x0 + 1e-9), (y0 - pad)..(y1 + pad))?;
        chart
            .configure_mesh()
            .x_desc(panel.x_label)
            .light_line_style(WHITE.mix(0.0))
            .draw()?;
        for (k, s) in panel.series.iter().enumerate() {
            let color = COLORS[k % COLORS.len()];
            // A dense series (every step) thin, a sparse one bold.
            let width = if s.points.len() > 200 { 1 } else { 2 };
            chart
                .draw_series(LineSeries::new(
                    s.points.iter().copied(),
                    color.stroke_width(width),
                ))?
                .label(s.name)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                });
        }
        // The legend in the corner the curves end away from.
        let ends_high = panel.series[0]
            .points
            .last()
            .is_some_and(|&(_, y)| y > (y0 + y1) / 2.0);
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.4))
            .position(if ends_high {
                SeriesLabelPosition::LowerRight
            } else {
                SeriesLabelPosition::UpperRight
            })
            .draw()?;
    }
    root.present()?;
    Ok(())
}
