//! The policy model: an HF-compatible decoder in tch, checkpoints, tokenizer and chat
//! template, batched sampling, and the training forward.

mod adapters;
mod chat;
mod checkpoint;
mod config;
mod decoder;
mod dtype;
mod error;
mod finite;
pub mod flops;
pub mod gguf;
mod kv_cache;
mod load;
mod logprobs;
pub mod lora;
pub mod memory;
mod mode;
mod rope;
mod sampler;
mod shapes;
mod tensor_file;
mod tokenizer;
mod units;

pub use checkpoint::{
    MADE_BY_DRMAS, is_made_by_drmas, load_weights, mark_as_made, save_checkpoint,
    save_checkpoint_sharded, weight_files,
};
pub use config::{Family, ModelConfig};
pub use decoder::{
    Decoder, LayerPrefix, LayerTables, fused_kernels_on, positions_from_mask, prefill_mask,
    set_fused_kernels,
};
pub use dtype::{Dtype, DtypeError};
pub use error::{ModelError, Result, torch_text};
pub use gguf::{ImportSummary, import_gguf};
pub use kv_cache::KvCache;
pub use load::{checked_config, context_length, default_kind, load_pretrained};
pub use logprobs::{
    DEFAULT_LOGITS_BUDGET, PassInput, PassPlan, PrefixGroup, ResponseHidden, ResponseLogprobs,
    SequencePair, check_temperatures, masked_token_logprobs, packed_hidden, packed_plan,
    padded_plan, plan_micro_batches, response_hidden, response_logprobs, response_logprobs_per_row,
    rows_per_chunk, shared_prompt_hidden, token_logprobs,
};
pub use lora::AdapterSlot;
pub use mode::ModeGuard;
pub use sampler::{
    FinishReason, Generation, GenerationRequest, MIN_ROWS, SamplingParams, StopCheck, bucket,
    generate, generate_routed,
};
pub use shapes::{CheckpointShapes, read_header};
pub use tensor_file::{
    MappedTensors, StreamedTensors, TensorEntry, read_metadata, write_tensors_with,
};
pub use tokenizer::{StopStrings, TextTokenizer};
