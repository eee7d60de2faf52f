//! All integration tests of this crate, one module per former test file, linked into
//! one binary (each test binary links the whole crate and its dependencies again).

#![allow(clippy::result_large_err)]

// The binary's printing macros, for the command files included with #[path].
#[macro_use]
#[path = "../../src/cli/print.rs"]
mod print;

mod api_compat;
mod built_plugins;
mod chat_template;
mod check_cli;
mod check_limits;
mod cli_values;
mod common;
mod config_errors;
mod countdown;
mod data_arith;
mod data_loader;
mod data_prepare;
mod data_qa;
mod determinism;
mod engine_llama_cpp;
mod engine_protocols;
mod episode_set;
mod eval_tiny;
mod gguf_import;
mod index_cli;
mod index_serve_load;
mod layers;
mod leftovers;
mod lifecycle;
mod metrics_record;
mod model_checkpoint;
mod model_nonfinite;
mod model_parity;
mod model_sampling;
mod model_sizes;
mod orchestra;
mod output_streams;
mod outputs;
mod plot;
mod plugin_replace;
mod plugin_trust;
mod plugins;
mod pool_lora;
mod remote_openenv;
mod score_cli;
mod search_workflow;
mod sweep_cli;
mod third_party;
mod tracking;
mod train_cli;
mod train_data_parallel;
mod train_dist_cli;
mod train_dynamic;
mod train_failures;
mod train_full_cli;
mod train_gradient;
mod train_guard;
mod train_learning;
mod train_prefix;
mod train_reshard_cli;
mod train_resume;
mod train_resume_checks;
mod train_resume_spelling;
mod train_shard_cli;
mod train_verdict;
mod train_warm_start;
mod train_worker;
mod update_shadow;
mod worker;
