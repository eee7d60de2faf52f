//! `drmas index build|serve|query|bench`: the search plugin's local BM25 index from the
//! command line — build it from a JSONL corpus, serve it with Search-R1's protocol, ask
//! it (or a server) one query, measure its latency.

use anyhow::{Context, bail};
use drmas_search::{
    Retriever, format_information,
    index::{IndexStats, LocalIndex, build_index, is_index},
    remote::{RemoteConfig, RemoteRetriever},
};
use std::{
    io::{BufRead, IsTerminal},
    path::{Path, PathBuf},
    process::ExitCode,
    time::Instant,
};

#[derive(clap::Subcommand)]
pub enum Command {
    /// Build a BM25 index from a JSONL corpus ({"id", "title", "text"} a line).
    Build(BuildArgs),
    /// Serve an index over HTTP with Search-R1's protocol (POST /retrieve).
    Serve(super::index_serve::Args),
    /// Print the observation one query gets, from an index folder or a server.
    Query(QueryArgs),
    /// Latency of queries run one at a time, on an index folder or over HTTP.
    Bench(BenchArgs),
}

#[derive(clap::Args)]
pub struct BuildArgs {
    /// The corpus: JSONL, one passage a line, {"id", "title", "text"} (Search-R1's
    /// {"id", "contents"} rows are read too).
    #[arg(value_name = "CORPUS.jsonl")]
    corpus: PathBuf,
    /// The index folder to write.
    #[arg(value_name = "OUT_DIR")]
    out: PathBuf,
    /// Replace OUT_DIR if it is an index drmas built.
    #[arg(long)]
    force: bool,
}

#[derive(clap::Args)]
pub struct QueryArgs {
    /// An index folder, or a server's URL (http://HOST:PORT[/retrieve]).
    #[arg(value_name = "INDEX_OR_URL")]
    target: String,
    /// The query, as a model would write it.
    text: String,
    /// Passages to retrieve.
    #[arg(long, default_value_t = 3)]
    k: usize,
    /// Cut each passage's text to this many characters (default: whole).
    #[arg(long, value_name = "N")]
    max_chars: Option<usize>,
}

#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("target").required(true).args(["index", "url"])))]
pub struct BenchArgs {
    /// An index folder, searched in this process.
    #[arg(long, value_name = "DIR")]
    index: Option<PathBuf>,
    /// A server's URL (http://HOST:PORT[/retrieve]).
    #[arg(long, value_name = "URL")]
    url: Option<String>,
    /// JSONL with the query text in `--field` on each line.
    #[arg(long, value_name = "FILE.jsonl")]
    queries: PathBuf,
    /// The field of each line that holds the query.
    #[arg(long, default_value = "question")]
    field: String,
    /// Use the first N queries only.
    #[arg(long, value_name = "N")]
    limit: Option<usize>,
    /// Passages per query.
    #[arg(long, default_value_t = 3)]
    k: usize,
    /// Queries run first and not measured (the index's pages come into memory).
    #[arg(long, value_name = "N", default_value_t = 20)]
    warmup: usize,
}

pub fn run(cmd: Command) -> anyhow::Result<ExitCode> {
    match cmd {
        Command::Build(args) => build(args),
        Command::Serve(args) => super::index_serve::run(args),
        Command::Query(args) => query(args),
        Command::Bench(args) => bench(args),
    }
}

fn build(args: BuildArgs) -> anyhow::Result<ExitCode> {
    if !args.corpus.is_file() {
        bail!(
            "{}: no such corpus file (JSONL, one {{\"id\", \"title\", \"text\"}} a line)",
            args.corpus.display()
        );
    }
    drmas::output::check_not_an_input(
        &args.out,
        &[drmas::output::Input::new("the corpus", &args.corpus)],
    )?;
    super::check_replaceable(
        &args.out,
        args.force,
        &super::Ours {
            what: "an index drmas built",
            marker: drmas_search::index::MARKER_FILE,
            is_ours: is_index,
        },
    )?;
    let staged = drmas::output::StagedDir::new(&args.out)
        .with_context(|| format!("staging {}", args.out.display()))?;
    let interactive = std::io::stderr().is_terminal();
    let started = Instant::now();
    let mut last_logged = 0;
    let stats = build_index(&args.corpus, staged.path(), &mut |n| {
        let rate = n as f64 / started.elapsed().as_secs_f64().max(1e-9);
        if interactive {
            err!("\r\x1b[2Kindexed {n} passages ({rate:.0}/s)");
        } else if n >= last_logged + 1_000_000 {
            // Logs get a line a million passages, not one per progress call.
            last_logged = n;
            errln!("indexed {n} passages ({rate:.0}/s)");
        }
    })?;
    if interactive {
        errln!();
    }
    staged
        .commit()
        .with_context(|| format!("writing {}", args.out.display()))?;
    let IndexStats {
        passages,
        bytes_on_disk,
        seconds,
    } = stats;
    outln!(
        "built {}: {passages} passages in {seconds:.1} s, {:.1} MiB on disk",
        args.out.display(),
        bytes_on_disk as f64 / (1024.0 * 1024.0)
    );
    Ok(ExitCode::SUCCESS)
}

/// An index folder or, for an `http(s)://` target, a server. A server is asked one call
/// at a time here, so nothing waits for other calls to merge with.
fn open_retriever(target: &str) -> anyhow::Result<Box<dyn Retriever>> {
    if target.starts_with("http://") || target.starts_with("https://") {
        Ok(Box::new(RemoteRetriever::new(RemoteConfig {
            url: target.to_string(),
            batch_window_ms: 0,
            ..RemoteConfig::default()
        })?))
    } else {
        Ok(Box::new(LocalIndex::open(Path::new(target))?))
    }
}

fn query(args: QueryArgs) -> anyhow::Result<ExitCode> {
    let retriever = open_retriever(&args.target)?;
    let mut results = retriever.search_batch(&[args.text], args.k)?;
    let passages = results.pop().unwrap_or_default();
    outln!(
        "{}",
        format_information(&passages, args.max_chars.unwrap_or(usize::MAX))
    );
    Ok(ExitCode::SUCCESS)
}

/// One benchmark query and its gold answers (`meta.answers` of drmas's QA files; none
/// in other files).
struct BenchQuery {
    text: String,
    golds: Vec<String>,
}

/// The `field` of each line of a JSONL file, with the line's `meta.answers`; a line
/// without the field (as a string) is an error naming the line.
fn read_queries(path: &Path, field: &str, limit: Option<usize>) -> anyhow::Result<Vec<BenchQuery>> {
    let file = std::fs::File::open(path).with_context(|| format!("reading {}", path.display()))?;
    let mut queries = Vec::new();
    for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
        if limit.is_some_and(|n| queries.len() >= n) {
            break;
        }
        let place = || format!("{}:{}", path.display(), i + 1);
        let line = line.with_context(place)?;
        if line.trim().is_empty() {
            continue;
        }
        let value: serde_json::Value =
            serde_json::from_str(&line).with_context(|| format!("{}: not JSON", place()))?;
        let golds = value
            .pointer("/meta/answers")
            .and_then(|a| a.as_array())
            .map(|a| {
                a.iter()
                    .filter_map(|g| g.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        match value.get(field) {
            Some(serde_json::Value::String(q)) => queries.push(BenchQuery {
                text: q.clone(),
                golds,
            }),
            Some(other) => bail!("{}: field `{field}` is not a string: {other}", place()),
            None => bail!(
                "{}: no field `{field}` (choose the query's field with --field)",
                place()
            ),
        }
    }
    if queries.is_empty() {
        bail!("{}: no queries", path.display());
    }
    Ok(queries)
}

fn bench(args: BenchArgs) -> anyhow::Result<ExitCode> {
    let queries = read_queries(&args.queries, &args.field, args.limit)?;
    let (what, retriever) = match (&args.index, &args.url) {
        (Some(dir), _) => (
            format!("local index {}", dir.display()),
            open_retriever(&dir.to_string_lossy())?,
        ),
        (None, Some(url)) => (format!("server {url}"), open_retriever(url)?),
        (None, None) => unreachable!("clap requires --index or --url"),
    };
    for q in queries.iter().cycle().take(args.warmup.min(queries.len())) {
        retriever.search_batch(std::slice::from_ref(&q.text), args.k)?;
    }
    let mut millis = Vec::with_capacity(queries.len());
    let mut empty = 0;
    let (mut with_golds, mut hits) = (0usize, 0usize);
    for q in &queries {
        let started = Instant::now();
        let mut results = retriever.search_batch(std::slice::from_ref(&q.text), args.k)?;
        millis.push(started.elapsed().as_secs_f64() * 1000.0);
        let passages = results.pop().unwrap_or_default();
        if passages.is_empty() {
            empty += 1;
        }
        if !q.golds.is_empty() {
            with_golds += 1;
            hits += usize::from(drmas_search::env::contains_answer(&passages, &q.golds));
        }
    }
    let mean = millis.iter().sum::<f64>() / millis.len() as f64;
    millis.sort_by(f64::total_cmp);
    outln!(
        "{what}: {} queries one at a time, k {}: p50 {:.2} ms, p99 {:.2} ms, mean {:.2} ms, max {:.2} ms ({empty} without results)",
        millis.len(),
        args.k,
        percentile(&millis, 0.50),
        percentile(&millis, 0.99),
        mean,
        millis.last().copied().unwrap_or(0.0),
    );
    if with_golds > 0 {
        // The question itself as the query: how often a gold alias is in the top k.
        outln!(
            "answer recall@{}: {:.3} ({hits} of {with_golds} queries have a gold alias in their passages)",
            args.k,
            hits as f64 / with_golds as f64
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The nearest-rank percentile of sorted values.
fn percentile(sorted: &[f64], q: f64) -> f64 {
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}
