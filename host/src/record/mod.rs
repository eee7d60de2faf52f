//! What a training run records per step: [`StepRecord`], one line of `RUN/metrics.jsonl`,
//! and its one reader ([`read_records`]). The trainer writes the type, and everyone who
//! reads a run — the resume check, the trackers, `drmas plot`, `drmas sweep` — reads the
//! same type, so a key renamed is a compile error everywhere, and
//! docs/training-metrics.md lists exactly its keys (a test compares them).
//!
//! This module knows nothing of training; it sits below `tracking` in the layers
//! (ARCHITECTURE.md), which takes these records from the trainer.

mod read;
mod step;

pub use read::{RecordError, Records, lines, parse_records, read_records};
pub use step::{
    AgentRecord, AgentUpdate, DistRecord, DynamicSamplingRecord, EvalRecord, EvalScores,
    FailureCount, LemmaRecord, ModelRecord, PoolRecord, ShadowRecord, SourceRecord, StepRecord,
    StepTimes, TrackingRecord, UpdatePhases, WorkerRecord,
};
