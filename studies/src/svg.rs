//! Small, dependency-free SVG charts for the lab report: steps and points on linear axes,
//! and horizontal bars. Enough to read a CDF or a timeline in any browser or on GitHub.

use std::fmt::Write;

const W: f64 = 720.0;
const H: f64 = 360.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 150.0;
const TOP: f64 = 36.0;
const BOTTOM: f64 = 46.0;
const PALETTE: [&str; 8] =
    ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"];

/// How a series is drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Style {
    /// A holds-until-next-point staircase (a CDF, a placement over time).
    Step,
    /// Dots only.
    Points,
    /// Dots joined in order, solid or dashed (a rate curve).
    Line {
        /// Dashed rather than solid.
        dashed: bool,
    },
}

/// One named series.
#[derive(Clone, Debug)]
pub struct Series {
    /// Legend label.
    pub name: String,
    /// (x, y) in data units.
    pub points: Vec<(f64, f64)>,
    /// Drawing style.
    pub style: Style,
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// A "nice" tick step for a range.
fn tick_step(span: f64) -> f64 {
    let raw = span / 6.0;
    let mag = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * mag).find(|s| *s >= raw).unwrap_or(10.0 * mag)
}

fn header(out: &mut String, title: &str) {
    let _ = write!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12"><rect width="100%" height="100%" fill="white"/><text x="{}" y="20" font-size="14" text-anchor="middle">{}</text>"#,
        W / 2.0,
        escape(title)
    );
}

/// A chart of series on linear axes. `y_labels` turns the y axis categorical: value `i` is
/// labelled `y_labels[i]`.
pub fn xy_chart(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    y_labels: Option<&[String]>,
) -> String {
    let all =
        series.iter().flat_map(|s| s.points.iter()).filter(|p| p.0.is_finite() && p.1.is_finite());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in all {
        (x0, x1, y0, y1) = (x0.min(x), x1.max(x), y0.min(y), y1.max(y));
    }
    if x0 > x1 {
        (x0, x1, y0, y1) = (0.0, 1.0, 0.0, 1.0);
    }
    if let Some(labels) = y_labels {
        (y0, y1) = (-0.5, labels.len() as f64 - 0.5);
    } else {
        y0 = y0.min(0.0);
        y1 = if y1 <= y0 { y0 + 1.0 } else { y1 * 1.05 };
    }
    x0 = x0.min(0.0);
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    let (pw, ph) = (W - LEFT - RIGHT, H - TOP - BOTTOM);
    let sx = |x: f64| LEFT + (x - x0) / (x1 - x0) * pw;
    let sy = |y: f64| TOP + ph - (y - y0) / (y1 - y0) * ph;
    let mut out = String::new();
    header(&mut out, title);
    // Axes, grid and ticks.
    let _ = write!(
        out,
        r##"<g stroke="#999" fill="none"><line x1="{LEFT}" y1="{}" x2="{}" y2="{}"/><line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{}"/></g>"##,
        TOP + ph,
        LEFT + pw,
        TOP + ph,
        TOP + ph
    );
    let step = tick_step(x1 - x0);
    let mut t = (x0 / step).ceil() * step;
    while t <= x1 + 1e-9 {
        let _ = write!(
            out,
            r##"<line x1="{0}" y1="{TOP}" x2="{0}" y2="{1}" stroke="#eee"/><text x="{0}" y="{2}" text-anchor="middle">{3}</text>"##,
            sx(t),
            TOP + ph,
            TOP + ph + 16.0,
            trim(t)
        );
        t += step;
    }
    match y_labels {
        Some(labels) => {
            for (i, l) in labels.iter().enumerate() {
                let y = sy(i as f64);
                let _ = write!(
                    out,
                    r##"<line x1="{LEFT}" y1="{y}" x2="{}" y2="{y}" stroke="#eee"/><text x="{}" y="{}" text-anchor="end">{}</text>"##,
                    LEFT + pw,
                    LEFT - 6.0,
                    y + 4.0,
                    escape(l)
                );
            }
        }
        None => {
            let step = tick_step(y1 - y0);
            let mut t = (y0 / step).ceil() * step;
            while t <= y1 + 1e-9 {
                let _ = write!(
                    out,
                    r##"<line x1="{LEFT}" y1="{0}" x2="{1}" y2="{0}" stroke="#eee"/><text x="{2}" y="{3}" text-anchor="end">{4}</text>"##,
                    sy(t),
                    LEFT + pw,
                    LEFT - 6.0,
                    sy(t) + 4.0,
                    trim(t)
                );
                t += step;
            }
        }
    }
    let _ = write!(
        out,
        r#"<text x="{}" y="{}" text-anchor="middle">{}</text><text transform="translate(16 {}) rotate(-90)" text-anchor="middle">{}</text>"#,
        LEFT + pw / 2.0,
        H - 8.0,
        escape(x_label),
        TOP + ph / 2.0,
        escape(y_label)
    );
    for (i, s) in series.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        let pts: Vec<(f64, f64)> =
            s.points.iter().copied().filter(|p| p.0.is_finite() && p.1.is_finite()).collect();
        match s.style {
            Style::Points => {
                for (x, y) in &pts {
                    let _ = write!(
                        out,
                        r#"<circle cx="{:.1}" cy="{:.1}" r="2.5" fill="{color}" fill-opacity="0.7"/>"#,
                        sx(*x),
                        sy(*y)
                    );
                }
            }
            Style::Line { dashed } => {
                let mut d = String::new();
                for (j, (x, y)) in pts.iter().enumerate() {
                    let _ =
                        write!(d, "{}{:.1},{:.1}", if j == 0 { "M" } else { " L" }, sx(*x), sy(*y));
                    let _ = write!(
                        out,
                        r#"<circle cx="{:.1}" cy="{:.1}" r="2.5" fill="{color}"/>"#,
                        sx(*x),
                        sy(*y)
                    );
                }
                let dash = if dashed { r#" stroke-dasharray="5 3""# } else { "" };
                let _ = write!(
                    out,
                    r#"<path d="{d}" fill="none" stroke="{color}" stroke-width="1.5"{dash}/>"#
                );
            }
            Style::Step => {
                let mut d = String::new();
                for (j, (x, y)) in pts.iter().enumerate() {
                    if j == 0 {
                        let _ = write!(d, "M{:.1},{:.1}", sx(*x), sy(*y));
                    } else {
                        let _ = write!(d, " H{:.1} V{:.1}", sx(*x), sy(*y));
                    }
                }
                let _ =
                    write!(out, r#"<path d="{d}" fill="none" stroke="{color}" stroke-width="2"/>"#);
            }
        }
        let ly = TOP + 10.0 + i as f64 * 18.0;
        let _ = write!(
            out,
            r#"<rect x="{}" y="{}" width="12" height="12" fill="{color}"/><text x="{}" y="{}">{}</text>"#,
            W - RIGHT + 12.0,
            ly - 10.0,
            W - RIGHT + 30.0,
            ly,
            escape(&s.name)
        );
    }
    out.push_str("</svg>\n");
    out
}

/// Horizontal bars, one per (label, value).
pub fn bar_chart(title: &str, x_label: &str, bars: &[(String, f64)]) -> String {
    let label_w = 200.0;
    let row = 20.0;
    let h = TOP + BOTTOM + row * bars.len() as f64;
    let max = bars.iter().map(|b| b.1).fold(0.0f64, f64::max).max(1e-9);
    let pw = W - label_w - 80.0;
    let mut out = String::new();
    let _ = write!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{h}" viewBox="0 0 {W} {h}" font-family="sans-serif" font-size="12"><rect width="100%" height="100%" fill="white"/><text x="{}" y="20" font-size="14" text-anchor="middle">{}</text>"#,
        W / 2.0,
        escape(title)
    );
    for (i, (label, v)) in bars.iter().enumerate() {
        let y = TOP + i as f64 * row;
        let _ = write!(
            out,
            r#"<text x="{}" y="{}" text-anchor="end">{}</text><rect x="{label_w}" y="{}" width="{:.1}" height="{}" fill="{}"/><text x="{:.1}" y="{}">{}</text>"#,
            label_w - 6.0,
            y + 13.0,
            escape(label),
            y + 2.0,
            v / max * pw,
            row - 4.0,
            PALETTE[0],
            label_w + v / max * pw + 4.0,
            y + 13.0,
            trim(*v)
        );
    }
    let _ = writeln!(
        out,
        r#"<text x="{}" y="{}" text-anchor="middle">{}</text></svg>"#,
        label_w + pw / 2.0,
        h - 12.0,
        escape(x_label)
    );
    out
}

/// A number without needless decimals.
fn trim(v: f64) -> String {
    if v.abs() >= 100.0 || v.fract() == 0.0 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charts_are_well_formed_svg_with_every_series() {
        let s = vec![
            Series {
                name: "a<b".into(),
                points: vec![(0.0, 0.0), (10.0, 1.0)],
                style: Style::Step,
            },
            Series {
                name: "c".into(),
                points: vec![(5.0, 0.5), (f64::NAN, 1.0)],
                style: Style::Points,
            },
        ];
        let svg = xy_chart("t", "x", "y", &s, None);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("a&lt;b") && svg.contains("<circle") && svg.contains(" H"));
        assert_eq!(svg.matches("<circle").count(), 1, "non-finite points are dropped");
        let labels = vec!["edge".to_string(), "cloud".to_string()];
        assert!(xy_chart("t", "x", "y", &s, Some(&labels)).contains(">cloud</text>"));
        let bars = bar_chart("b", "bytes", &[("x".into(), 3.0), ("y".into(), 6.0)]);
        assert_eq!(bars.matches("<rect").count(), 3);
    }

    #[test]
    fn ticks_are_round_numbers() {
        assert_eq!(tick_step(1000.0), 200.0);
        assert_eq!(tick_step(1.0), 0.2);
        assert_eq!(tick_step(70.0), 20.0);
    }
}
