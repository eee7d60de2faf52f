//! The one reader of `metrics.jsonl`. Its rules, for every reader of a run (the resume
//! check, `drmas plot`, `drmas sweep`, the tracking bench):
//!
//! - lines are numbered from 1; blank lines are skipped;
//! - the last line, when it is not JSON, was cut off by a writer killed mid-line: it is
//!   dropped and its number kept, for the reader to say so (a resume drops it too);
//! - any other line that is not JSON, not an object or not a step record (a key of the
//!   wrong type, a key every line has missing) is an error naming `file:line`;
//! - a step written on more than one line was redone by a resumed run: its later line
//!   is the step's ([`Records::latest`]); [`Records::repeated`] lists them, and a resume
//!   refuses a repeat among the steps up to its checkpoint ([`Records::check_through`]).

use super::StepRecord;
use serde_json::Value;
use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
};

#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("{}: no such file", path.display())]
    Missing { path: PathBuf },
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A line that is not a step record.
    #[error("{}:{line}: {message}", path.display())]
    Line {
        path: PathBuf,
        line: usize,
        message: String,
    },
    /// The lines' steps are not the ones a resume needs.
    #[error("{}: {message}", path.display())]
    Steps { path: PathBuf, message: String },
}

/// What a `metrics.jsonl` holds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Records {
    /// The file read (for errors).
    pub path: PathBuf,
    /// Every line's record with its 1-based line number, in the file's order.
    pub lines: Vec<(usize, StepRecord)>,
    /// The 1-based number of a cut-off last line, which was dropped.
    pub cut_off: Option<usize>,
}

/// Reads `path` (a `metrics.jsonl`); a missing file is [`RecordError::Missing`].
pub fn read_records(path: &Path) -> Result<Records, RecordError> {
    let bytes = std::fs::read(path).map_err(|source| {
        if source.kind() == std::io::ErrorKind::NotFound {
            RecordError::Missing {
                path: path.to_path_buf(),
            }
        } else {
            RecordError::Io {
                path: path.to_path_buf(),
                source,
            }
        }
    })?;
    parse_records(path, &bytes)
}

/// Parses the contents of a `metrics.jsonl`; `path` names the file in errors.
pub fn parse_records(path: &Path, bytes: &[u8]) -> Result<Records, RecordError> {
    let numbered: Vec<(usize, &[u8])> = lines(bytes).collect();
    let last = numbered.last().map(|&(n, _)| n);
    let mut out = Records {
        path: path.to_path_buf(),
        ..Records::default()
    };
    for (number, line) in numbered {
        match parse_line(line) {
            Ok(record) => out.lines.push((number, record)),
            Err(Bad::NotJson(_)) if Some(number) == last => out.cut_off = Some(number),
            Err(Bad::NotJson(message) | Bad::NotRecord(message)) => {
                return Err(RecordError::Line {
                    path: path.to_path_buf(),
                    line: number,
                    message,
                });
            }
        }
    }
    Ok(out)
}

/// The lines of a log, numbered from 1 and trimmed, blank ones left out. Bytes, not a
/// string: a cut-off line may end inside a multi-byte character.
pub fn lines(bytes: &[u8]) -> impl Iterator<Item = (usize, &[u8])> {
    bytes
        .split(|&b| b == b'\n')
        .enumerate()
        .map(|(i, line)| (i + 1, line.trim_ascii()))
        .filter(|(_, line)| !line.is_empty())
}

/// Why a line is not a record.
enum Bad {
    /// Not JSON at all: on the last line, a cut-off line.
    NotJson(String),
    NotRecord(String),
}

fn parse_line(line: &[u8]) -> Result<StepRecord, Bad> {
    // A derived struct would also take an array, by position: only an object is a line.
    if line.first() != Some(&b'{') {
        return Err(match serde_json::from_slice::<Value>(line) {
            Ok(v) => Bad::NotRecord(format!("expected a JSON object, found {}", kind(&v))),
            Err(e) => Bad::NotJson(format!("invalid JSON: {}", bare(&e))),
        });
    }
    let mut de = serde_json::Deserializer::from_slice(line);
    let parsed = serde_path_to_error::deserialize::<_, StepRecord>(&mut de);
    let record = parsed.map_err(|e| {
        let at = e.path().to_string();
        let inner = e.into_inner();
        match inner.classify() {
            serde_json::error::Category::Data => Bad::NotRecord(match at.as_str() {
                "." => bare(&inner),
                _ => format!("{at}: {}", bare(&inner)),
            }),
            _ => Bad::NotJson(format!("invalid JSON: {}", bare(&inner))),
        }
    })?;
    de.end()
        .map_err(|e| Bad::NotJson(format!("invalid JSON: {}", bare(&e))))?;
    Ok(record)
}

/// serde_json's message with the column; its line is always 1 here, the file's line is
/// said by the caller.
fn bare(e: &serde_json::Error) -> String {
    let text = e.to_string();
    let position = format!(" at line {} column {}", e.line(), e.column());
    match text.strip_suffix(&position) {
        Some(message) => format!("{message} (column {})", e.column()),
        None => text,
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

impl Records {
    /// Each step's record, sorted by step: a step written more than once is its later
    /// line (a resumed run redoes the steps after its checkpoint).
    pub fn latest(&self) -> Vec<&StepRecord> {
        let mut by_step: BTreeMap<u32, &StepRecord> = BTreeMap::new();
        for (_, record) in &self.lines {
            by_step.insert(record.step, record);
        }
        by_step.into_values().collect()
    }

    /// The steps written on more than one line, each with its line numbers in order.
    pub fn repeated(&self) -> BTreeMap<u32, Vec<usize>> {
        let mut lines_of: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
        for (n, record) in &self.lines {
            lines_of.entry(record.step).or_default().push(*n);
        }
        lines_of.retain(|_, lines| lines.len() > 1);
        lines_of
    }

    /// Checks that the log holds one line for each of steps 1 to `step`, in order,
    /// before a resume from the checkpoint of `step` goes on appending to it. Lines past
    /// `step` and a cut-off last line do not count (the resume drops them). The error
    /// names the line at fault.
    pub fn check_through(&self, step: u32) -> Result<(), RecordError> {
        let refused = |message: String| RecordError::Steps {
            path: self.path.clone(),
            message,
        };
        let mut first_line: BTreeMap<u32, usize> = BTreeMap::new();
        let mut next = 1;
        for &(n, ref record) in &self.lines {
            let s = record.step;
            if s > step {
                continue;
            }
            if let Some(first) = first_line.get(&s) {
                return Err(refused(format!(
                    "line {n} is step {s} again (its first line is line {first}): one of them must go"
                )));
            }
            if s != next {
                return Err(refused(format!(
                    "line {n} is step {s}, but step {next} has no line before it (a line was lost)"
                )));
            }
            first_line.insert(s, n);
            next += 1;
        }
        if next <= step {
            return Err(refused(match next {
                1 => "it holds no step's line".into(),
                _ => format!(
                    "its last line is step {} (line {}): the lines of steps {next} to {step} were lost",
                    next - 1,
                    first_line[&(next - 1)]
                ),
            }));
        }
        Ok(())
    }

    /// `bytes` (the log these records were read from) as a resume from the checkpoint
    /// of `step` leaves it: the lines of steps up to `step`, each with its newline; the
    /// lines after it (redone) and a cut-off last line dropped.
    pub fn keep_through(&self, bytes: &[u8], step: u32) -> Vec<u8> {
        let keep: BTreeSet<usize> = (self.lines.iter())
            .filter(|(_, r)| r.step <= step)
            .map(|(n, _)| *n)
            .collect();
        let mut out = Vec::with_capacity(bytes.len());
        for (n, line) in lines(bytes) {
            if keep.contains(&n) {
                out.extend_from_slice(line);
                out.push(b'\n');
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(step: u32) -> String {
        let record = StepRecord {
            step,
            ..StepRecord::default()
        };
        record.to_line() + "\n"
    }

    fn log(steps: &[u32]) -> String {
        steps.iter().map(|&s| line(s)).collect()
    }

    fn parse(text: &str) -> Result<Records, RecordError> {
        parse_records(Path::new("run/metrics.jsonl"), text.as_bytes())
    }

    fn message(e: RecordError) -> String {
        e.to_string()
    }

    #[test]
    fn a_metrics_log_must_hold_each_step_once() {
        let check = |text: &str, step| parse(text).unwrap().check_through(step).map_err(message);
        assert_eq!(check(&log(&[1, 2, 3]), 3), Ok(()));
        // Lines past the checkpoint and a cut last line are a resume's to drop.
        assert_eq!(check(&(log(&[1, 2, 3, 4]) + "{\"st"), 3), Ok(()));
        assert_eq!(
            check(&log(&[1, 3]), 3).unwrap_err(),
            "run/metrics.jsonl: line 2 is step 3, but step 2 has no line before it (a line was lost)"
        );
        assert_eq!(
            check(&log(&[1, 2, 2, 3]), 3).unwrap_err(),
            "run/metrics.jsonl: line 3 is step 2 again (its first line is line 2): one of them must go"
        );
        assert_eq!(
            check(&log(&[1, 2]), 3).unwrap_err(),
            "run/metrics.jsonl: its last line is step 2 (line 2): the lines of steps 3 to 3 were lost"
        );
        assert_eq!(
            check("", 2).unwrap_err(),
            "run/metrics.jsonl: it holds no step's line"
        );
    }

    #[test]
    fn a_resume_keeps_the_lines_up_to_its_checkpoint_with_their_newlines() {
        let text = log(&[1, 2, 3, 4]) + "\n" + line(5).trim_end() + "\n{\"st";
        let records = parse(&text).unwrap();
        assert_eq!(records.cut_off, Some(7));
        let kept = records.keep_through(text.as_bytes(), 2);
        assert_eq!(String::from_utf8(kept).unwrap(), log(&[1, 2]));
        // A whole last line without its newline is a line, and gets one.
        let text = log(&[1]) + line(2).trim_end();
        let records = parse(&text).unwrap();
        assert_eq!(records.cut_off, None);
        assert_eq!(
            records.keep_through(text.as_bytes(), 2),
            log(&[1, 2]).into_bytes()
        );
    }

    #[test]
    fn a_step_written_again_is_its_later_line() {
        let mut again = StepRecord {
            step: 2,
            reward_mean: Some(0.5),
            ..StepRecord::default()
        }
        .to_line();
        again.push('\n');
        let records = parse(&(log(&[1, 2, 3]) + &again)).unwrap();
        let latest: Vec<(u32, Option<f64>)> = (records.latest().iter())
            .map(|r| (r.step, r.reward_mean))
            .collect();
        assert_eq!(latest, [(1, None), (2, Some(0.5)), (3, None)]);
        assert_eq!(records.repeated(), BTreeMap::from([(2, vec![2, 4])]));
    }

    #[test]
    fn only_a_last_line_that_is_not_json_is_cut_off() {
        let cut = log(&[1]) + "{\"step\": 2, \"reward_mean\": \n";
        assert_eq!(parse(&cut).unwrap().cut_off, Some(2));
        let middle = cut.clone() + &line(3);
        assert_eq!(
            message(parse(&middle).unwrap_err()),
            "run/metrics.jsonl:2: invalid JSON: EOF while parsing a value (column 26)"
        );
        // Whole JSON of the wrong shape is an error, last or not.
        let array = log(&[1]) + "[1, 2]\n";
        assert_eq!(
            message(parse(&array).unwrap_err()),
            "run/metrics.jsonl:2: expected a JSON object, found an array"
        );
    }

    #[test]
    fn a_wrong_type_or_a_missing_key_names_the_key() {
        let mut v = StepRecord::default().to_value();
        v["reward_mean"] = serde_json::json!("high");
        let text = log(&[1]) + &v.to_string() + "\n";
        let e = message(parse(&text).unwrap_err());
        assert!(
            e.starts_with("run/metrics.jsonl:2: reward_mean: invalid type: string \"high\", expected f64 (column "),
            "{e}"
        );
        // A step that is not a whole number.
        let text = log(&[1]).replace("\"step\":1", "\"step\":2.0");
        let e = message(parse(&text).unwrap_err());
        assert!(
            e.starts_with(
                "run/metrics.jsonl:1: step: invalid type: floating point `2.0`, expected u32"
            ),
            "{e}"
        );
        let text = log(&[1]).replace("\"step\":1,", "");
        assert_eq!(
            message(parse(&text).unwrap_err()),
            format!(
                "run/metrics.jsonl:1: missing field `step` (column {})",
                text.trim_end().len()
            )
        );
    }

    #[test]
    fn an_agents_update_keys_are_there_or_not() {
        let mut v = StepRecord::default().to_value();
        v["agents"] = serde_json::json!({
            "a": {"model": "m", "samples": 1, "finish": {}},
            "b": {"model": "m", "samples": 1, "finish": {}, "grad_norm": null, "entropy": 0.5},
            "c": {"model": "m", "samples": 1, "finish": {}, "entropy": "x"},
        });
        let e = message(parse(&(v.to_string() + "\n")).unwrap_err());
        assert!(
            e.contains("invalid type: string \"x\", expected f64"),
            "{e}"
        );
        v["agents"]["c"]["entropy"] = serde_json::json!(1.0);
        let records = parse(&(v.to_string() + "\n")).unwrap();
        let agents = &records.lines[0].1.agents;
        assert_eq!(agents["a"].update, None);
        let b = agents["b"].update.unwrap();
        assert_eq!((b.grad_norm, b.entropy), (None, Some(0.5)));
        // Written back, an update's absent values are null and an absent update is no key.
        let back = records.lines[0].1.to_value();
        assert_eq!(back["agents"]["b"]["grad_norm"], serde_json::Value::Null);
        assert!(back["agents"]["b"].get("pg_loss").is_some());
        assert!(back["agents"]["a"].get("grad_norm").is_none());
    }
}
