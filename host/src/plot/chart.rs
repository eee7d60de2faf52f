//! Drawing the figure: a title, ten panels in a 5×2 grid and a legend strip below them
//! (so the legend never covers data). Each run has a colour; each agent a line style.
//!
//! Font: plotters' `ab_glyph` text needs a font registered from bytes, and we want no
//! system font files or font libraries (fontconfig, freetype) at build or run time. The
//! `dejavu` crate (MIT/Apache-2.0) embeds the DejaVu fonts, whose licence is the
//! Bitstream Vera licence with DejaVu's changes in the public domain: free to use,
//! embed and redistribute. Only DejaVu Sans regular and bold are linked in (~1.4 MB).
//! The SVG names the family `sans-serif` and is rendered with the viewer's fonts.

use super::Run;
use plotters::coord::Shift;
use plotters::coord::combinators::LogCoord;
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::element::{Circle, DashedPathElement, PathElement};
use plotters::prelude::*;
use plotters::series::DashedLineSeries;
use std::ops::Range;
use std::sync::OnceLock;

/// The figure's size in pixels (PNG) or user units (SVG).
pub const WIDTH: u32 = 1600;
pub const HEIGHT: u32 = 2350;

pub const FONT: &str = "sans-serif";
const TITLE_HEIGHT: u32 = 50;

/// Run colours (Tableau 10), in the order the runs are given; they repeat after ten.
pub const COLORS: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];
const LEGEND_GRAY: RGBColor = RGBColor(70, 70, 70);

/// Agent line styles, by agent (all runs' agents, sorted): solid, dashed, dotted,
/// long dashes; they repeat after four.
#[derive(Clone, Copy)]
enum Dash {
    Solid,
    Dashes(u32, u32),
}
const DASHES: [Dash; 4] = [
    Dash::Solid,
    Dash::Dashes(12, 7),
    Dash::Dashes(3, 5),
    Dash::Dashes(24, 8),
];

fn color(run: usize) -> RGBColor {
    COLORS[run % COLORS.len()]
}

pub fn register_fonts() -> Result<(), String> {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| {
        plotters::style::register_font(FONT, FontStyle::Normal, dejavu::sans::regular())
            .map_err(|_| "DejaVu Sans does not parse as a font".to_string())?;
        plotters::style::register_font(FONT, FontStyle::Bold, dejavu::sans::bold())
            .map_err(|_| "DejaVu Sans Bold does not parse as a font".to_string())
    })
    .clone()
}

/// The figure as an SVG document.
pub fn render_svg(runs: &[Run]) -> Result<String, String> {
    register_fonts()?;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        draw(&root, runs).map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(svg)
}

/// The figure as a PNG file's bytes (8-bit RGB).
pub fn render_png(runs: &[Run]) -> Result<Vec<u8>, String> {
    register_fonts()?;
    let mut rgb = vec![0u8; WIDTH as usize * HEIGHT as usize * 3];
    {
        let root = BitMapBackend::with_buffer(&mut rgb, (WIDTH, HEIGHT)).into_drawing_area();
        draw(&root, runs).map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())?;
    }
    let mut png = Vec::new();
    let mut encoder = png::Encoder::new(&mut png, WIDTH, HEIGHT);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder.write_header().map_err(|e| e.to_string())?;
    writer.write_image_data(&rgb).map_err(|e| e.to_string())?;
    writer.finish().map_err(|e| e.to_string())?;
    Ok(png)
}

type DrawResult<DB> = Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

/// One line of a panel.
struct Line {
    points: Vec<(f64, f64)>,
    color: RGBColor,
    dash: Dash,
}

/// What one panel shows.
#[derive(Default)]
struct Panel {
    lines: Vec<Line>,
    /// Filled circles with a dark rim (eval results), by colour.
    markers: Vec<(RGBColor, Vec<(f64, f64)>)>,
}

impl Panel {
    fn values(&self) -> impl Iterator<Item = f64> + '_ {
        let lines = self.lines.iter().flat_map(|l| l.points.iter().map(|p| p.1));
        let markers = self.markers.iter().flat_map(|m| m.1.iter().map(|p| p.1));
        lines.chain(markers)
    }

    fn is_empty(&self) -> bool {
        self.values().next().is_none()
    }
}

fn points(series: &[(u64, f64)]) -> Vec<(f64, f64)> {
    series.iter().map(|&(s, v)| (s as f64, v)).collect()
}

/// Every agent name of every run, sorted; its index picks the agent's line style.
fn agent_names(runs: &[Run]) -> Vec<&str> {
    let mut names: Vec<&str> = runs
        .iter()
        .flat_map(|r| r.metrics.agents.keys().map(String::as_str))
        .collect();
    names.sort_unstable();
    names.dedup();
    names
}

fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, runs: &[Run]) -> DrawResult<DB> {
    root.fill(&WHITE)?;
    let agents = agent_names(runs);
    let dash_of = |name: &str| {
        let i = agents.iter().position(|a| *a == name).unwrap_or(0);
        DASHES[i % DASHES.len()]
    };

    let mut reward = Panel::default();
    let mut success = Panel::default();
    let mut grad = Panel::default();
    let mut entropy = Panel::default();
    let mut zero_variance = Panel::default();
    let mut clip = Panel::default();
    let mut approve_correct = Panel::default();
    let mut approve_wrong = Panel::default();
    let mut inflation = Panel::default();
    let mut grad_ratio = Panel::default();
    for (i, run) in runs.iter().enumerate() {
        let m = &run.metrics;
        let c = color(i);
        let solid = |series: &[(u64, f64)]| Line {
            points: points(series),
            color: c,
            dash: Dash::Solid,
        };
        reward.lines.push(solid(&m.reward_mean));
        approve_correct.lines.push(solid(&m.approve_given_correct));
        approve_wrong.lines.push(solid(&m.approve_given_wrong));
        success.lines.push(solid(&m.success_rate));
        if !m.eval_avg_at_k.is_empty() {
            success.markers.push((c, points(&m.eval_avg_at_k)));
        }
        for (name, agent) in &m.agents {
            // Zero or negative norms have no place on a log scale.
            let positive: Vec<(u64, f64)> = agent
                .grad_norm
                .iter()
                .copied()
                .filter(|p| p.1 > 0.0)
                .collect();
            grad.lines.push(Line {
                points: points(&positive),
                color: c,
                dash: dash_of(name),
            });
            entropy.lines.push(Line {
                points: points(&agent.entropy),
                color: c,
                dash: dash_of(name),
            });
            zero_variance.lines.push(Line {
                points: points(&agent.zero_variance),
                color: c,
                dash: dash_of(name),
            });
            clip.lines.push(Line {
                points: points(&agent.clip_bound),
                color: c,
                dash: dash_of(name),
            });
            inflation.lines.push(Line {
                points: points(&agent.inflation),
                color: c,
                dash: dash_of(name),
            });
            grad_ratio.lines.push(Line {
                points: points(&agent.grad_ratio),
                color: c,
                dash: dash_of(name),
            });
        }
    }
    let has_eval = !success.markers.is_empty();

    let steps = runs.iter().flat_map(|r| r.metrics.steps.iter().copied());
    let (lo, hi) = steps.fold((u64::MAX, 0), |(lo, hi), s| (lo.min(s), hi.max(s)));
    let (lo, hi) = if lo > hi { (0, 1) } else { (lo, hi) };
    let (lo, hi) = (lo as f64, hi as f64);
    let pad = ((hi - lo) * 0.02).max(0.5);
    let x = (lo - pad)..(hi + pad);
    let x_ticks = ((hi - lo) as usize + 1).clamp(2, 10);

    // Title, panels, legend (its height depends on how many rows its entries need).
    let legend = legend_entries(runs, &agents, has_eval);
    let rows = legend_rows(root, &legend)?;
    // However many runs, the panels keep at least three quarters of the height.
    let legend_height = (24 + 30 * rows.len() as u32).min(HEIGHT / 4 - TITLE_HEIGHT);
    let (title, rest) = root.split_vertically(TITLE_HEIGHT);
    let (grid, legend_area) = rest.split_vertically(HEIGHT - TITLE_HEIGHT - legend_height);

    let labels: Vec<&str> = runs.iter().map(|r| r.label.as_str()).collect();
    let style = (FONT, 26, FontStyle::Bold).into_font().color(&BLACK);
    let mut heading = format!("Training metrics: {}", labels.join(", "));
    if title.estimate_text_size(&heading, &style)?.0 > WIDTH - 40 {
        heading = format!("Training metrics: {} runs", runs.len());
    }
    title.draw(&Text::new(heading, (20, 14), style))?;

    let panels = grid.split_evenly((5, 2));
    let range = linear_range(&reward, None);
    panel(
        &panels[0],
        "(a) reward",
        "reward_mean",
        &x,
        x_ticks,
        range,
        &reward,
    )?;
    let range = linear_range(&success, Some(0.0..1.0));
    let title = if has_eval {
        "(b) success rate (dots: eval avg@k)"
    } else {
        "(b) success rate"
    };
    panel(
        &panels[1],
        title,
        "success_rate",
        &x,
        x_ticks,
        range,
        &success,
    )?;
    let title = "(c) gradient norm per agent";
    panel(
        &panels[2],
        title,
        "grad_norm (log)",
        &x,
        x_ticks,
        log_range(&grad),
        &grad,
    )?;
    let range = linear_range(&entropy, Some(0.0..0.0));
    let title = "(d) entropy per agent";
    panel(&panels[3], title, "entropy", &x, x_ticks, range, &entropy)?;
    // The mechanism: groups without signal, and how often the clip decided the update.
    let title = "(e) groups without signal per agent";
    panel(
        &panels[4],
        title,
        "zero_variance_fraction",
        &x,
        x_ticks,
        linear_range(&zero_variance, Some(0.0..1.0)),
        &zero_variance,
    )?;
    let title = "(f) grad_clip bound, share of steps so far (agent's model)";
    panel(
        &panels[5],
        title,
        "grad_clip_bound_run",
        &x,
        x_ticks,
        linear_range(&clip, Some(0.0..1.0)),
        &clip,
    )?;
    // The verifier's judgement (math/env's episode metrics): does it tell right from wrong?
    let title = "(g) verifier approves a correct answer";
    panel(
        &panels[6],
        title,
        "approve_given_correct",
        &x,
        x_ticks,
        linear_range(&approve_correct, Some(0.0..1.0)),
        &approve_correct,
    )?;
    let title = "(h) verifier approves a wrong answer";
    panel(
        &panels[7],
        title,
        "approve_given_wrong",
        &x,
        x_ticks,
        linear_range(&approve_wrong, Some(0.0..1.0)),
        &approve_wrong,
    )?;
    // The paper's Lemma (docs/mechanism.md): 1 is what a per-agent normalization gives.
    let title = "(i) inflation factor under a shared baseline per agent";
    panel(
        &panels[8],
        title,
        "lemma.inflation_global",
        &x,
        x_ticks,
        linear_range(&inflation, Some(0.0..1.0)),
        &inflation,
    )?;
    let title = "(j) grad norm / the shadow normalizer's, same batch";
    panel(
        &panels[9],
        title,
        "grad_norm / shadow_grad_norm",
        &x,
        x_ticks,
        linear_range(&grad_ratio, Some(0.0..1.0)),
        &grad_ratio,
    )?;

    draw_legend(&legend_area, &rows)
}

/// A y range that holds every value with a 5% margin, and `include` if given.
fn linear_range(panel: &Panel, include: Option<Range<f64>>) -> Range<f64> {
    let (mut lo, mut hi) = panel
        .values()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
    if let Some(r) = include {
        lo = lo.min(r.start);
        hi = hi.max(r.end);
    }
    if lo > hi {
        return 0.0..1.0;
    }
    let span = hi - lo;
    let pad = if span > 0.0 {
        span * 0.05
    } else {
        (lo.abs() * 0.1).max(0.5)
    };
    let lo_pad = if lo == 0.0 { 0.0 } else { lo - pad };
    (lo_pad)..(hi + pad)
}

/// A log y range from a power of ten below the smallest value to one above the largest,
/// so the axis always has labelled decades.
fn log_range(panel: &Panel) -> LogCoord<f64> {
    let (lo, hi) = panel
        .values()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
    if lo > hi {
        return (0.0999..10.01).log_scale().into();
    }
    let lo = 10f64.powf(lo.log10().floor());
    let mut hi = 10f64.powf(hi.log10().ceil());
    if hi <= lo {
        hi = lo * 10.0;
    }
    // A hair wider, so rounding keeps both end decades among plotters' labelled ticks.
    (lo * 0.999..hi * 1.001).log_scale().into()
}

fn panel<DB: DrawingBackend, Y>(
    area: &DrawingArea<DB, Shift>,
    title: &str,
    y_desc: &str,
    x: &Range<f64>,
    x_ticks: usize,
    y: Y,
    data: &Panel,
) -> DrawResult<DB>
where
    Y: AsRangedCoord<Value = f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let mut chart = ChartBuilder::on(area)
        .caption(title, (FONT, 22, FontStyle::Bold))
        .margin(12)
        .x_label_area_size(50)
        .y_label_area_size(80)
        .build_cartesian_2d(x.clone(), y)?;
    chart
        .configure_mesh()
        .x_desc("step")
        .y_desc(y_desc)
        .x_labels(x_ticks)
        .y_labels(8)
        .x_label_formatter(&|v| tick(*v))
        .y_label_formatter(&|v| tick(*v))
        .label_style((FONT, 15))
        .axis_desc_style((FONT, 17))
        .light_line_style(RGBColor(235, 235, 235))
        .bold_line_style(RGBColor(210, 210, 210))
        .draw()?;
    if data.is_empty() {
        let plot = chart.plotting_area().strip_coord_spec();
        let (w, h) = plot.dim_in_pixel();
        let style = (FONT, 20).into_font().color(&LEGEND_GRAY);
        let (tw, th) = plot.estimate_text_size("no data", &style)?;
        let at = ((w as i32 - tw as i32) / 2, (h as i32 - th as i32) / 2);
        plot.draw(&Text::new("no data", at, style))?;
        return Ok(());
    }
    for line in &data.lines {
        let style = line.color.stroke_width(2);
        match line.dash {
            Dash::Solid => {
                chart.draw_series(LineSeries::new(line.points.iter().copied(), style))?;
            }
            Dash::Dashes(size, gap) => {
                chart.draw_series(DashedLineSeries::new(
                    line.points.iter().copied(),
                    size,
                    gap,
                    style,
                ))?;
            }
        }
        // A lone point makes no line: show it as a dot.
        if line.points.len() == 1 {
            chart.draw_series(
                line.points
                    .iter()
                    .map(|&p| Circle::new(p, 3, line.color.filled())),
            )?;
        }
    }
    for (color, points) in &data.markers {
        chart.draw_series(points.iter().map(|&p| Circle::new(p, 6, color.filled())))?;
        chart.draw_series(
            points
                .iter()
                .map(|&p| Circle::new(p, 6, BLACK.stroke_width(1))),
        )?;
    }
    Ok(())
}

/// An axis label: integers as such, other values with three significant digits.
fn tick(v: f64) -> String {
    let a = v.abs();
    if a == 0.0 {
        return "0".into();
    }
    if !(1e-3..1e6).contains(&a) {
        return format!("{v:.0e}");
    }
    if v.fract() == 0.0 {
        return format!("{}", v as i64);
    }
    let decimals = (2 - a.log10().floor() as i32).clamp(0, 6) as usize;
    let s = format!("{v:.decimals$}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    s.to_string()
}

enum Sample {
    Line(RGBColor, Dash),
    Marker(RGBColor),
}

struct Entry {
    sample: Sample,
    text: String,
}

/// The legend: a "runs" group (colours), an "agents" group (line styles) and the eval
/// marker when there is one.
fn legend_entries(runs: &[Run], agents: &[&str], has_eval: bool) -> Vec<Vec<Entry>> {
    let mut groups = vec![];
    let runs: Vec<Entry> = runs
        .iter()
        .enumerate()
        .map(|(i, r)| Entry {
            sample: Sample::Line(color(i), Dash::Solid),
            text: r.label.clone(),
        })
        .collect();
    groups.push(runs);
    let mut others: Vec<Entry> = agents
        .iter()
        .enumerate()
        .map(|(i, a)| Entry {
            sample: Sample::Line(LEGEND_GRAY, DASHES[i % DASHES.len()]),
            text: format!("agent {a}"),
        })
        .collect();
    if has_eval {
        others.push(Entry {
            sample: Sample::Marker(LEGEND_GRAY),
            text: "eval avg@k".into(),
        });
    }
    if !others.is_empty() {
        groups.push(others);
    }
    groups
}

const SAMPLE_WIDTH: i32 = 44;
const ENTRY_GAP: i32 = 36;
const LEGEND_LEFT: i32 = 24;

/// Legend rows: each entry with the x it starts at.
type Rows<'e> = Vec<Vec<(i32, &'e Entry)>>;

/// Entries placed in rows; each group starts a row.
fn legend_rows<'e, DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    groups: &'e [Vec<Entry>],
) -> Result<Rows<'e>, DrawingAreaErrorKind<DB::ErrorType>> {
    let style: TextStyle = (FONT, 17).into();
    let mut rows = vec![];
    for group in groups {
        let mut row: Vec<(i32, &Entry)> = vec![];
        let mut x = LEGEND_LEFT;
        for entry in group {
            let (w, _) = root.estimate_text_size(&entry.text, &style)?;
            let width = SAMPLE_WIDTH + 8 + w as i32;
            if !row.is_empty() && x + width > WIDTH as i32 - LEGEND_LEFT {
                rows.push(std::mem::take(&mut row));
                x = LEGEND_LEFT;
            }
            row.push((x, entry));
            x += width + ENTRY_GAP;
        }
        rows.push(row);
    }
    Ok(rows)
}

fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    rows: &Rows<'_>,
) -> DrawResult<DB> {
    let (w, h) = area.dim_in_pixel();
    area.draw(&Rectangle::new(
        [(12, 6), (w as i32 - 12, h as i32 - 8)],
        RGBColor(190, 190, 190).stroke_width(1),
    ))?;
    let style = (FONT, 17).into_font().color(&BLACK);
    for (r, row) in rows.iter().enumerate() {
        let y = 26 + 30 * r as i32;
        for &(x, entry) in row {
            let (x0, x1) = (x, x + SAMPLE_WIDTH);
            match entry.sample {
                Sample::Line(color, Dash::Solid) => {
                    area.draw(&PathElement::new(
                        vec![(x0, y), (x1, y)],
                        color.stroke_width(3),
                    ))?;
                }
                Sample::Line(color, Dash::Dashes(size, gap)) => {
                    area.draw(&DashedPathElement::new(
                        vec![(x0, y), (x1, y)],
                        size,
                        gap,
                        color.stroke_width(3),
                    ))?;
                }
                Sample::Marker(color) => {
                    let c = ((x0 + x1) / 2, y);
                    area.draw(&Circle::new(c, 6, color.filled()))?;
                    area.draw(&Circle::new(c, 6, BLACK.stroke_width(1)))?;
                }
            }
            area.draw(&Text::new(
                entry.text.clone(),
                (x1 + 8, y - 9),
                style.clone(),
            ))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::tick;

    #[test]
    fn ticks_are_short() {
        assert_eq!(tick(0.0), "0");
        assert_eq!(tick(5.0), "5");
        assert_eq!(tick(0.25), "0.25");
        assert_eq!(tick(0.1), "0.1");
        assert_eq!(tick(2.5), "2.5");
        assert_eq!(tick(1234.6), "1235");
        assert_eq!(tick(-0.05), "-0.05");
        assert_eq!(tick(1e-4), "1e-4");
    }
}
