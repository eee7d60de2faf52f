//! The sweep's figure: arms overlaid, each a line at the mean over seeds and a band from
//! the lowest to the highest seed, per step. Panels: train reward, success rate, and per
//! agent the pre-clip gradient norm (log scale) and the entropy. PNG and SVG, made in
//! memory with the fonts of `drmas plot`.

use super::report::RunData;
use crate::plot::chart::{COLORS, FONT, register_fonts};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::collections::{BTreeMap, BTreeSet};

pub const WIDTH: u32 = 1600;
const ROW_HEIGHT: u32 = 420;
const TITLE_HEIGHT: u32 = 50;

/// One arm's band in one panel: per step (mean, min, max) over the seeds with a value.
type Band = Vec<(f64, f64, f64, f64)>;

struct PanelData {
    title: String,
    log: bool,
    bands: Vec<(String, Band)>,
}

fn band(runs: &[&RunData], value: &dyn Fn(&crate::record::StepRecord) -> Option<f64>) -> Band {
    let mut by_step: BTreeMap<u64, Vec<f64>> = BTreeMap::new();
    for r in runs {
        for s in &r.steps {
            if let Some(v) = value(s).filter(|v| v.is_finite()) {
                by_step.entry(u64::from(s.step)).or_default().push(v);
            }
        }
    }
    by_step
        .into_iter()
        .map(|(step, vs)| {
            let mean = vs.iter().sum::<f64>() / vs.len() as f64;
            let lo = vs.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = vs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            (step as f64, mean, lo, hi)
        })
        .collect()
}

fn panels(arms: &[String], runs: &[RunData]) -> Vec<PanelData> {
    let of_arm = |arm: &str| -> Vec<&RunData> { runs.iter().filter(|r| r.arm == arm).collect() };
    let agents: BTreeSet<&String> = runs
        .iter()
        .flat_map(|r| r.steps.iter().flat_map(|s| s.agents.keys()))
        .collect();
    let make = |title: String, log: bool, f: &dyn Fn(&crate::record::StepRecord) -> Option<f64>| {
        PanelData {
            title,
            log,
            bands: arms
                .iter()
                .map(|a| (a.clone(), band(&of_arm(a), f)))
                .collect(),
        }
    };
    let mut out = vec![
        make(
            "train reward (mean over the step's episodes)".into(),
            false,
            &|s| s.reward_mean,
        ),
        make("success rate".into(), false, &|s| s.success_rate),
    ];
    for agent in agents {
        let a = agent.clone();
        out.push(make(
            format!("{agent}: pre-clip gradient norm"),
            true,
            &move |s| s.agents.get(&a)?.update?.grad_norm.filter(|g| *g > 0.0),
        ));
        let a = agent.clone();
        out.push(make(format!("{agent}: entropy"), false, &move |s| {
            s.agents.get(&a)?.update?.entropy
        }));
    }
    out
}

fn height(n_panels: usize) -> u32 {
    TITLE_HEIGHT + ROW_HEIGHT * n_panels.div_ceil(2) as u32 + 40
}

/// The figure as SVG and as PNG bytes.
pub fn render(title: &str, arms: &[String], runs: &[RunData]) -> Result<(String, Vec<u8>), String> {
    register_fonts()?;
    let data = panels(arms, runs);
    let h = height(data.len());
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, h)).into_drawing_area();
        draw(&root, title, arms, &data).map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())?;
    }
    let mut rgb = vec![0u8; WIDTH as usize * h as usize * 3];
    {
        let root = BitMapBackend::with_buffer(&mut rgb, (WIDTH, h)).into_drawing_area();
        draw(&root, title, arms, &data).map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())?;
    }
    let mut png = Vec::new();
    let mut encoder = png::Encoder::new(&mut png, WIDTH, h);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder.write_header().map_err(|e| e.to_string())?;
    writer.write_image_data(&rgb).map_err(|e| e.to_string())?;
    writer.finish().map_err(|e| e.to_string())?;
    Ok((svg, png))
}

type DrawResult<DB> = Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    arms: &[String],
    data: &[PanelData],
) -> DrawResult<DB> {
    root.fill(&WHITE)?;
    let (top, rest) = root.split_vertically(TITLE_HEIGHT);
    top.titled(title, (FONT, 26, FontStyle::Bold))?;
    let (grid, legend) = rest.split_vertically(rest.dim_in_pixel().1 - 40);
    let rows = data.len().div_ceil(2);
    let cells = grid.split_evenly((rows, 2));
    for (cell, panel) in cells.iter().zip(data) {
        draw_panel(cell, panel)?;
    }
    // The legend: each arm's colour; the band is the seeds' range.
    let mut x = 20;
    for (i, arm) in arms.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        legend.draw(&Rectangle::new(
            [(x, 12), (x + 30, 26)],
            c.mix(0.3).filled(),
        ))?;
        legend.draw(&PathElement::new(
            vec![(x, 19), (x + 30, 19)],
            c.stroke_width(3),
        ))?;
        legend.draw(&Text::new(
            format!("{arm} (mean over seeds; band: lowest to highest seed)"),
            (x + 38, 10),
            (FONT, 16),
        ))?;
        x += 520;
    }
    Ok(())
}

fn draw_panel<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, p: &PanelData) -> DrawResult<DB> {
    let points: Vec<&(f64, f64, f64, f64)> = p.bands.iter().flat_map(|(_, b)| b).collect();
    if points.is_empty() {
        area.titled(&p.title, (FONT, 20, FontStyle::Bold))?
            .draw(&Text::new("no data", (300, 150), (FONT, 18)))?;
        return Ok(());
    }
    let x_lo = points.iter().map(|p| p.0).fold(f64::INFINITY, f64::min);
    let x_hi = points.iter().map(|p| p.0).fold(x_lo + 1.0, f64::max);
    let lo = points.iter().map(|p| p.2).fold(f64::INFINITY, f64::min);
    let hi = points.iter().map(|p| p.3).fold(f64::NEG_INFINITY, f64::max);
    let mut builder = ChartBuilder::on(area);
    builder
        .caption(&p.title, (FONT, 20, FontStyle::Bold))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(70);
    if p.log {
        let lo = 10f64.powf(lo.log10().floor());
        let hi = 10f64.powf(hi.log10().ceil()).max(lo * 10.0);
        let mut chart =
            builder.build_cartesian_2d(x_lo..x_hi, (lo * 0.999..hi * 1.001).log_scale())?;
        chart
            .configure_mesh()
            .x_desc("step")
            .label_style((FONT, 14))
            .y_label_formatter(&|v| log_label(*v))
            .draw()?;
        for (i, (_, b)) in p.bands.iter().enumerate() {
            let c = COLORS[i % COLORS.len()];
            let mut poly: Vec<(f64, f64)> = b.iter().map(|p| (p.0, p.3)).collect();
            poly.extend(b.iter().rev().map(|p| (p.0, p.2)));
            chart.draw_series(std::iter::once(Polygon::new(poly, c.mix(0.18).filled())))?;
            chart.draw_series(LineSeries::new(
                b.iter().map(|p| (p.0, p.1)),
                c.stroke_width(2),
            ))?;
        }
    } else {
        let pad = ((hi - lo) * 0.05).max(1e-3);
        let mut chart = builder.build_cartesian_2d(x_lo..x_hi, (lo - pad)..(hi + pad))?;
        chart
            .configure_mesh()
            .x_desc("step")
            .label_style((FONT, 14))
            .draw()?;
        for (i, (_, b)) in p.bands.iter().enumerate() {
            let c = COLORS[i % COLORS.len()];
            let mut poly: Vec<(f64, f64)> = b.iter().map(|p| (p.0, p.3)).collect();
            poly.extend(b.iter().rev().map(|p| (p.0, p.2)));
            chart.draw_series(std::iter::once(Polygon::new(poly, c.mix(0.18).filled())))?;
            chart.draw_series(LineSeries::new(
                b.iter().map(|p| (p.0, p.1)),
                c.stroke_width(2),
            ))?;
        }
    }
    Ok(())
}

/// A log axis's tick: plain between 0.01 and 1000 (no trailing zeros), else in
/// scientific notation, so that ticks below 0.001 do not all read `0.000`.
fn log_label(v: f64) -> String {
    if v == 0.0 || !(0.01..1000.0).contains(&v.abs()) {
        format!("{v:.0e}")
    } else {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn log_ticks_are_told_apart() {
        let ticks: Vec<String> = [1e-4, 1e-3, 0.01, 0.1, 1.0, 10.0, 100.0, 1e4]
            .into_iter()
            .map(super::log_label)
            .collect();
        assert_eq!(
            ticks,
            ["1e-4", "1e-3", "0.01", "0.1", "1", "10", "100", "1e4"]
        );
    }
}
