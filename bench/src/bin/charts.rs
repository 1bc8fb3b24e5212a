//! Draws BENCHMARKS.md's headline comparisons as SVG charts into `docs/`:
//!
//! - `docs/round-trips.svg`: round trips per warm call, per one-shot turn
//!   and per bridge start-up, across a 40 ms link: the `human-plus` bridge
//!   before issue 13 and now, the keep-alive floor of the same run, and
//!   mcp-relay-client's figures as issue 13 recorded them;
//! - `docs/core-vs-python.svg`: the core's costs beside the Python port's,
//!   same inputs, same harness;
//! - `docs/launchers.svg`: the bridge's start-up and peak memory through
//!   each launcher (native binary, uvx, npx) and from a profile (with and
//!   without the reviewed definitions; a killed page) beside
//!   mcp-relay-client through node and npx, one run.
//!
//! The figures are transcribed below from BENCHMARKS.md (each table named
//! where it is used), not measured here: `cargo run -p human-plus-bench
//! --bin charts` redraws them after the tables change.

use std::path::{Path, PathBuf};

use plotters::prelude::*;

/// One group of bars: its label and one value per series (`None`: not
/// measured).
struct Group {
    label: &'static str,
    values: [Option<f64>; 4],
}

/// The series of the round-trip chart.
const TRIP_SERIES: [&str; 4] = [
    "Human+ before issue 13 (8c26f75)",
    "Human+ now (re-run after issue 14)",
    "keep-alive floor (same run)",
    "mcp-relay-client (issue 13's rig)",
];

/// Round trips (elapsed ÷ RTT, RTT 40 ms), the worst of the six
/// runtime × leg rows of each table:
/// - before: "Before issue 13 (the "before" column, at `8c26f75`)";
/// - now and the floor: "Round trips across the link, re-run after issue
///   14" (the most recent run; its floor reads higher than the quiet run
///   of "After issue 13", whose rows sit 0.01–0.1 RTT lower);
/// - mcp-relay-client: issue 13's table ("mcp-relay-client, same link":
///   1.13–1.18 RTT per call and 8.6–10 for start-up over plain HTTP; its
///   turn and production path were not measured).
const TRIPS: [Group; 6] = [
    Group {
        label: "warm call, plain",
        values: [Some(8.17), Some(1.17), Some(1.12), Some(1.18)],
    },
    Group {
        label: "warm call, production",
        values: [Some(12.36), Some(1.14), Some(1.06), None],
    },
    Group {
        label: "one-shot turn, plain",
        values: [Some(14.48), Some(5.75), Some(5.70), None],
    },
    Group {
        label: "one-shot turn, production",
        values: [Some(21.70), Some(6.72), Some(6.65), None],
    },
    Group {
        label: "start-up, plain",
        values: [Some(10.40), Some(4.95), Some(4.62), Some(10.0)],
    },
    Group {
        label: "start-up, production",
        values: [Some(15.59), Some(6.01), Some(5.51), None],
    },
];

/// One workload of the core-cost chart: Rust's and the Python port's
/// thread CPU time per call, in microseconds.
struct Cost {
    label: &'static str,
    rust_us: f64,
    python_us: f64,
}

/// "1–2. Core costs, Rust vs the Python port" (BENCHMARKS.md's current
/// figures, issue 21 finished: commit `7b1ae5d`, one run, load 1.3), every
/// row with a Python figure.
const COSTS: [Cost; 10] = [
    Cost {
        label: "SSE receive leg, 8 KiB chunks",
        rust_us: 410.1,
        python_us: 26_870.0,
    },
    Cost {
        label: "admission + digest, 200 tools",
        rust_us: 943.4,
        python_us: 5_590.0,
    },
    Cost {
        label: "the same from bytes (192 KiB)",
        rust_us: 552.7,
        python_us: 6_820.0,
    },
    Cost {
        label: "digest only, 200 tools",
        rust_us: 927.1,
        python_us: 4_210.0,
    },
    Cost {
        label: "change feed, 1,000 rows",
        rust_us: 133.2,
        python_us: 5_510.0,
    },
    Cost {
        label: "the same from bytes (129 KiB)",
        rust_us: 369.3,
        python_us: 6_520.0,
    },
    Cost {
        label: "framing 64 KiB",
        rust_us: 2.7,
        python_us: 4.1,
    },
    Cost {
        label: "copying 64 KiB (the floor of framing)",
        rust_us: 1.2,
        python_us: 1.4,
    },
    Cost {
        label: "JSON-RPC encode, tools/call",
        rust_us: 0.240,
        python_us: 6.8,
    },
    Cost {
        label: "correlate, 64 noisy frames",
        rust_us: 15.2,
        python_us: 654.7,
    },
];

/// One row of the launchers chart: the bridge, how it was started, its
/// median start-up (ms) and peak RSS of all its processes (MiB).
struct Launch {
    label: &'static str,
    human_plus: bool,
    /// Started against a page killed without unregistering.
    killed_page: bool,
    startup_ms: f64,
    peak_mib: f64,
}

/// BENCHMARKS.md, "One line to install (issue 29), and start-up from a
/// profile (issue 27)": `launchers --rounds 30`, one run (medians of 30
/// starts each), every row of its table.
const LAUNCHES: [Launch; 10] = [
    Launch {
        label: "human-plus, native binary, flags",
        human_plus: true,
        killed_page: false,
        startup_ms: 8.7,
        peak_mib: 10.8,
    },
    Launch {
        label: "human-plus, --profile (reviewed definitions)",
        human_plus: true,
        killed_page: false,
        startup_ms: 5.2,
        peak_mib: 10.8,
    },
    Launch {
        label: "human-plus, --profile without reviewed.json",
        human_plus: true,
        killed_page: false,
        startup_ms: 8.1,
        peak_mib: 10.9,
    },
    Launch {
        label: "human-plus, --profile, page killed",
        human_plus: true,
        killed_page: true,
        startup_ms: 5.6,
        peak_mib: 10.7,
    },
    Launch {
        label: "human-plus, flags, page killed (--timeout 2)",
        human_plus: true,
        killed_page: true,
        startup_ms: 2006.9,
        peak_mib: 10.8,
    },
    Launch {
        label: "human-plus, uvx (cached)",
        human_plus: true,
        killed_page: false,
        startup_ms: 34.4,
        peak_mib: 41.3,
    },
    Launch {
        label: "human-plus, npx (cached)",
        human_plus: true,
        killed_page: false,
        startup_ms: 486.0,
        peak_mib: 133.8,
    },
    Launch {
        label: "mcp-relay-client, node",
        human_plus: false,
        killed_page: false,
        startup_ms: 110.2,
        peak_mib: 60.0,
    },
    Launch {
        label: "mcp-relay-client, npx (cached)",
        human_plus: false,
        killed_page: false,
        startup_ms: 591.2,
        peak_mib: 143.0,
    },
    Launch {
        label: "mcp-relay-client, npx -y (asks)",
        human_plus: false,
        killed_page: false,
        startup_ms: 591.1,
        peak_mib: 143.5,
    },
];

/// The lighter blue of the rows against a killed page.
const KILLED_PAGE: RGBColor = RGBColor(158, 202, 225);

const COLOURS: [RGBColor; 4] = [
    RGBColor(190, 190, 190),
    RGBColor(31, 119, 180),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
];

type Failure = Box<dyn std::error::Error>;

/// Picks one side's figure of a [`Cost`].
type Pick = fn(&Cost) -> f64;

fn main() -> Result<(), Failure> {
    let docs = docs_dir();
    std::fs::create_dir_all(&docs)?;
    let trips = docs.join("round-trips.svg");
    round_trips(&trips)?;
    let costs = docs.join("core-vs-python.svg");
    core_costs(&costs)?;
    let launches = docs.join("launchers.svg");
    launchers(&launches)?;
    println!(
        "wrote {}, {} and {}",
        trips.display(),
        costs.display(),
        launches.display()
    );
    Ok(())
}

/// `docs/` at the workspace root, beside this crate.
fn docs_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| PathBuf::from("docs"), |root| root.join("docs"))
}

fn round_trips(path: &Path) -> Result<(), Failure> {
    let root = SVGBackend::new(path, (1000, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    let (body, foot) = root.split_vertically(500);
    let groups = TRIPS.len() as f64;
    let mut chart = ChartBuilder::on(&body)
        .caption(
            "Round trips across a 40 ms link (elapsed ÷ RTT, lower is better)",
            ("sans-serif", 22),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(0f64..groups, 0f64..24f64)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(TRIPS.len() * 2 + 1)
        .x_label_formatter(&|x| {
            // Labels sit at the middle of each group.
            let i = x.floor();
            if (x - i - 0.5).abs() < 1e-6 {
                TRIPS
                    .get(i as usize)
                    .map_or_else(String::new, |g| g.label.to_owned())
            } else {
                String::new()
            }
        })
        .y_desc("round trips")
        .label_style(("sans-serif", 13))
        .draw()?;
    let width = 0.8 / TRIP_SERIES.len() as f64;
    for (s, (name, colour)) in TRIP_SERIES.iter().zip(COLOURS).enumerate() {
        let bars: Vec<(f64, f64)> = TRIPS
            .iter()
            .enumerate()
            .filter_map(|(i, g)| {
                g.values
                    .get(s)
                    .copied()
                    .flatten()
                    .map(|v| (i as f64 + 0.1 + s as f64 * width, v))
            })
            .collect();
        chart
            .draw_series(
                bars.iter().map(|&(x, v)| {
                    Rectangle::new([(x, 0.0), (x + width * 0.92, v)], colour.filled())
                }),
            )?
            .label(*name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], colour.filled()));
        chart.draw_series(bars.iter().map(|&(x, v)| {
            Text::new(
                format!("{v:.2}"),
                (x, v + 0.6),
                ("sans-serif", 11).into_font(),
            )
        }))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK.mix(0.3))
        .label_font(("sans-serif", 13))
        .draw()?;
    foot.draw(&Text::new(
        "Worst of the 6 runtime × leg rows of each run (BENCHMARKS.md, \"Round trips across a link\": before = the 8c26f75 table, now and floor = \"re-run after",
        (14, 8),
        ("sans-serif", 12).into_font(),
    ))?;
    foot.draw(&Text::new(
        "issue 14\"). mcp-relay-client: issue 13's own table (plain HTTP only, not re-measured here). Production = HTTPS through a CONNECT egress proxy.",
        (14, 28),
        ("sans-serif", 12).into_font(),
    ))?;
    root.present()?;
    Ok(())
}

fn core_costs(path: &Path) -> Result<(), Failure> {
    let root = SVGBackend::new(path, (1000, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    let (body, foot) = root.split_vertically(520);
    let rows = COSTS.len() as f64;
    let mut chart = ChartBuilder::on(&body)
        .caption(
            "Core costs: Rust beside the Python port (CPU time per call, log scale, lower is better)",
            ("sans-serif", 20),
        )
        .margin(12)
        .margin_right(40)
        .x_label_area_size(40)
        .y_label_area_size(230)
        .build_cartesian_2d((0.1f64..100_000f64).log_scale(), 0f64..rows)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(COSTS.len() * 2 + 1)
        .y_label_formatter(&|y| {
            let i = y.floor();
            if (y - i - 0.5).abs() < 1e-6 {
                // Row 0 at the top.
                COSTS
                    .len()
                    .checked_sub(1 + i as usize)
                    .and_then(|r| COSTS.get(r))
                    .map_or_else(String::new, |c| c.label.to_owned())
            } else {
                String::new()
            }
        })
        .x_desc("µs per call")
        .label_style(("sans-serif", 13))
        .draw()?;
    let series: [(&str, RGBColor, Pick); 2] = [
        ("Rust (human-plus-core)", COLOURS[1], |c| c.rust_us),
        ("Python port 0.2.0", COLOURS[3], |c| c.python_us),
    ];
    for (s, (name, colour, value)) in series.into_iter().enumerate() {
        let bars: Vec<(f64, f64, f64)> = COSTS
            .iter()
            .enumerate()
            .map(|(r, c)| {
                let y = (COSTS.len() - 1 - r) as f64 + 0.5 - s as f64 * 0.38;
                (y, y + 0.34, value(c))
            })
            .collect();
        chart
            .draw_series(
                bars.iter()
                    .map(|&(y0, y1, v)| Rectangle::new([(0.1, y0), (v, y1)], colour.filled())),
            )?
            .label(name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], colour.filled()));
        chart.draw_series(bars.iter().map(|&(y0, _, v)| {
            Text::new(
                human_time(v),
                (v * 1.15, y0 + 0.3),
                ("sans-serif", 11).into_font(),
            )
        }))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK.mix(0.3))
        .label_font(("sans-serif", 13))
        .draw()?;
    foot.draw(&Text::new(
        "BENCHMARKS.md, current figures (issue 21 finished): commit 7b1ae5d, one run, load 1.3; thread CPU time, best of 21 batches, same inputs.",
        (14, 8),
        ("sans-serif", 12).into_font(),
    ))?;
    root.present()?;
    Ok(())
}

fn launchers(path: &Path) -> Result<(), Failure> {
    let root = SVGBackend::new(path, (1100, 580)).into_drawing_area();
    root.fill(&WHITE)?;
    let (body, foot) = root.split_vertically(520);
    let (left, right) = body.split_horizontally(680);
    let rows = LAUNCHES.len() as f64;
    let colour = |l: &Launch| match (l.human_plus, l.killed_page) {
        (true, true) => KILLED_PAGE,
        (true, false) => COLOURS[1],
        (false, _) => COLOURS[3],
    };
    let label = |y: &f64| {
        let i = y.floor();
        if (y - i - 0.5).abs() < 1e-6 {
            LAUNCHES
                .len()
                .checked_sub(1 + i as usize)
                .and_then(|r| LAUNCHES.get(r))
                .map_or_else(String::new, |l| l.label.to_owned())
        } else {
            String::new()
        }
    };
    let bar_y = |r: usize| (LAUNCHES.len() - 1 - r) as f64 + 0.2;

    let mut chart = ChartBuilder::on(&left)
        .caption(
            "Start-up to the first tools/list answer (ms, log scale)",
            ("sans-serif", 17),
        )
        .margin(12)
        .margin_right(30)
        .x_label_area_size(30)
        .y_label_area_size(300)
        .build_cartesian_2d((1f64..5000f64).log_scale(), 0f64..rows)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(LAUNCHES.len() * 2 + 1)
        .y_label_formatter(&label)
        .label_style(("sans-serif", 13))
        .draw()?;
    for (r, l) in LAUNCHES.iter().enumerate() {
        let y = bar_y(r);
        chart.draw_series(std::iter::once(Rectangle::new(
            [(1.0, y), (l.startup_ms, y + 0.6)],
            colour(l).filled(),
        )))?;
        chart.draw_series(std::iter::once(Text::new(
            format!("{:.1} ms", l.startup_ms),
            (l.startup_ms * 1.1, y + 0.4),
            ("sans-serif", 12).into_font(),
        )))?;
    }

    let mut chart = ChartBuilder::on(&right)
        .caption("Peak RSS, all its processes (MiB)", ("sans-serif", 17))
        .margin(12)
        .margin_right(40)
        .x_label_area_size(30)
        .y_label_area_size(10)
        .build_cartesian_2d(0f64..160f64, 0f64..rows)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(0)
        .label_style(("sans-serif", 13))
        .draw()?;
    for (r, l) in LAUNCHES.iter().enumerate() {
        let y = bar_y(r);
        chart.draw_series(std::iter::once(Rectangle::new(
            [(0.0, y), (l.peak_mib, y + 0.6)],
            colour(l).filled(),
        )))?;
        chart.draw_series(std::iter::once(Text::new(
            format!("{:.1}", l.peak_mib),
            (l.peak_mib + 2.0, y + 0.4),
            ("sans-serif", 12).into_font(),
        )))?;
    }
    foot.draw(&Text::new(
        "BENCHMARKS.md, \"One line to install (issue 29), and start-up from a profile (issue 27)\": medians of 30 starts each, one run, one local relay;",
        (14, 8),
        ("sans-serif", 12).into_font(),
    ))?;
    foot.draw(&Text::new(
        "cached = the package already in the launcher's cache; lighter: a page killed without unregistering (from flags, tools/list waits the 2 s timeout and errs).",
        (14, 28),
        ("sans-serif", 12).into_font(),
    ))?;
    root.present()?;
    Ok(())
}

/// `v` microseconds, in the unit that reads best.
fn human_time(v: f64) -> String {
    if v >= 1000.0 {
        format!("{:.2} ms", v / 1000.0)
    } else if v >= 1.0 {
        format!("{v:.1} µs")
    } else {
        format!("{:.0} ns", v * 1000.0)
    }
}
