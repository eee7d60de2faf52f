//! LoRA adapters on the decoder's linear layers, in PEFT's layout and arithmetic.
//!
//! An adapter adds `scale · B(A(dropout(x)))` to the output of each target projection,
//! with A [r, in] and B [out, r], `scale = alpha / r` (`alpha / √r` with rsLoRA). A is
//! initialised as PEFT does (Kaiming-uniform with a = √5, i.e. U(−1/√in, 1/√in)) and B
//! at zero, so a fresh adapter leaves the base model's logits unchanged. Adapters are
//! float32 whatever the base's dtype (PEFT's `autocast_adapter_dtype`): the delta is
//! computed in float32 and added in the base's dtype.
//!
//! On disk an adapter is a PEFT folder: `adapter_config.json` and
//! `adapter_model.safetensors` with tensors named
//! `base_model.model.<module>.lora_A.weight` / `.lora_B.weight`, which
//! `PeftModel.from_pretrained` loads as they are.

use super::error::{ModelError, Result};
use rand::{Rng, SeedableRng, rngs::StdRng};
use serde::{Deserialize, Serialize};
use std::{
    collections::{BTreeMap, HashMap},
    path::Path,
};
use tch::{Device, Kind, Tensor};

/// One adapter the decoder holds: its configuration and its tensors by PEFT name.
pub struct AdapterSlot {
    pub config: LoraConfig,
    /// Name-sorted; shallow clones of the pairs the projections use.
    pub params: Vec<(String, Tensor)>,
}

/// The projections an adapter may target (HF module names).
pub const TARGETS: [&str; 7] = [
    "q_proj",
    "k_proj",
    "v_proj",
    "o_proj",
    "gate_proj",
    "up_proj",
    "down_proj",
];

pub const ADAPTER_CONFIG: &str = "adapter_config.json";
pub const ADAPTER_WEIGHTS: &str = "adapter_model.safetensors";

/// How an adapter is shaped and scaled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoraConfig {
    pub rank: i64,
    #[serde(default = "default_alpha")]
    pub alpha: f64,
    #[serde(default)]
    pub dropout: f64,
    #[serde(default = "default_targets")]
    pub targets: Vec<String>,
    /// rsLoRA scaling (alpha / √rank).
    #[serde(default)]
    pub rslora: bool,
}

fn default_alpha() -> f64 {
    16.0
}

fn default_targets() -> Vec<String> {
    vec!["q_proj".into(), "v_proj".into()]
}

impl LoraConfig {
    pub fn scale(&self) -> f64 {
        if self.rslora {
            self.alpha / (self.rank as f64).sqrt()
        } else {
            self.alpha / self.rank as f64
        }
    }

    /// Why this configuration cannot be used, if it cannot.
    pub fn problem(&self) -> Option<String> {
        if self.rank < 1 || self.rank > 4096 {
            return Some(format!("rank {} is not in 1..=4096", self.rank));
        }
        if !(self.alpha.is_finite() && self.alpha > 0.0) {
            return Some(format!("alpha {} is not a positive number", self.alpha));
        }
        if !(0.0..1.0).contains(&self.dropout) {
            return Some(format!("dropout {} is not in [0, 1)", self.dropout));
        }
        if self.targets.is_empty() {
            return Some("targets is empty".into());
        }
        for (i, t) in self.targets.iter().enumerate() {
            if !TARGETS.contains(&t.as_str()) {
                return Some(format!(
                    "target `{t}` is not a projection of the decoder (expected some of {})",
                    TARGETS.join(", ")
                ));
            }
            if self.targets[..i].contains(t) {
                return Some(format!("target `{t}` is named twice"));
            }
        }
        None
    }

    pub fn targets(&self, module: &str) -> bool {
        self.targets.iter().any(|t| t == module)
    }
}

/// One adapted projection: A [r, in], B [out, r] (float32, trainable).
pub struct LoraPair {
    pub a: Tensor,
    pub b: Tensor,
    pub scale: f64,
    pub dropout: f64,
}

impl LoraPair {
    /// `scale · B(A(dropout(x)))` in float32, returned in `x`'s dtype.
    pub fn delta(&self, x: &Tensor, train: bool) -> Tensor {
        let mut h = x.to_kind(Kind::Float);
        if train && self.dropout > 0.0 {
            h = h.dropout(self.dropout, true);
        }
        (h.linear::<Tensor>(&self.a, None)
            .linear::<Tensor>(&self.b, None)
            * self.scale)
            .to_kind(x.kind())
    }
}

/// Which adapter each row of a forward uses.
#[derive(Default)]
pub enum Routing {
    /// The base model alone.
    #[default]
    Base,
    /// Every row through adapter `slot`.
    All(usize),
    /// Rows grouped by adapter: (slot, row indices); rows in no group use the base.
    Groups(Vec<(usize, Tensor)>),
}

impl Routing {
    /// The same routing, sharing the row-index tensors.
    pub fn shallow_clone(&self) -> Routing {
        match self {
            Routing::Base => Routing::Base,
            Routing::All(s) => Routing::All(*s),
            Routing::Groups(groups) => Routing::Groups(
                groups
                    .iter()
                    .map(|(s, rows)| (*s, rows.shallow_clone()))
                    .collect(),
            ),
        }
    }

    /// The routing of rows whose adapters are `slots` (`None` = base): one adapter for
    /// all rows where they agree, else the row indices of each adapter.
    pub fn of_rows(slots: &[Option<usize>], device: Device) -> Routing {
        match slots.first() {
            None => Routing::Base,
            Some(first) if slots.iter().all(|s| s == first) => match first {
                None => Routing::Base,
                Some(s) => Routing::All(*s),
            },
            Some(_) => {
                let mut groups: BTreeMap<usize, Vec<i64>> = BTreeMap::new();
                for (row, s) in slots.iter().enumerate() {
                    if let Some(s) = s {
                        groups.entry(*s).or_default().push(row as i64);
                    }
                }
                Routing::Groups(
                    groups
                        .into_iter()
                        .map(|(s, rows)| (s, Tensor::from_slice(&rows).to_device(device)))
                        .collect(),
                )
            }
        }
    }
}

/// The routing and mode of the forwards that follow (set through a
/// [`super::mode::ModeGuard`] only).
#[derive(Default)]
pub struct RouteState {
    pub routing: Routing,
    /// Dropout is applied only while training.
    pub train: bool,
    /// Every adapter off: the frozen base alone (the KL reference of a LoRA model).
    pub adapters_off: bool,
    /// `Some(n)`: each projection is computed in products of exactly `n` rows (see
    /// [`super::decoder::in_row_blocks`]), so a row's bits do not depend on how many
    /// rows the forward has; set by the sampler only. `None`: one product.
    pub product_rows: Option<i64>,
}

/// `y = base(x)` plus the deltas of the adapters `routing` selects, from `lora`
/// (indexed by adapter slot; `None` where the adapter does not target this projection).
pub fn apply(y: Tensor, x: &Tensor, lora: &[Option<LoraPair>], state: &RouteState) -> Tensor {
    if state.adapters_off {
        return y;
    }
    match &state.routing {
        Routing::Base => y,
        Routing::All(s) => match lora.get(*s).and_then(Option::as_ref) {
            Some(l) => y + l.delta(x, state.train),
            None => y,
        },
        Routing::Groups(groups) => {
            let mut y = y;
            for (s, rows) in groups {
                if let Some(l) = lora.get(*s).and_then(Option::as_ref) {
                    let d = l.delta(&x.index_select(0, rows), state.train);
                    y = y.index_add(0, rows, &d);
                }
            }
            y
        }
    }
}

/// PEFT's name of an adapter tensor of `module` (`model.layers.0.self_attn.q_proj`).
pub fn peft_name(module: &str, b: bool) -> String {
    format!(
        "base_model.model.{module}.lora_{}.weight",
        if b { "B" } else { "A" }
    )
}

/// A fresh pair for a projection [out, in]: A Kaiming-uniform (a = √5), B zero.
pub fn init_pair(
    config: &LoraConfig,
    out_dim: i64,
    in_dim: i64,
    rng: &mut StdRng,
    device: Device,
) -> LoraPair {
    let bound = 1.0 / (in_dim as f64).sqrt();
    let values: Vec<f32> = (0..config.rank * in_dim)
        .map(|_| rng.random_range(-bound..bound) as f32)
        .collect();
    let a = Tensor::from_slice(&values)
        .view([config.rank, in_dim])
        .to_device(device)
        .set_requires_grad(true);
    let b = Tensor::zeros([out_dim, config.rank], (Kind::Float, device)).set_requires_grad(true);
    LoraPair {
        a,
        b,
        scale: config.scale(),
        dropout: config.dropout,
    }
}

/// The generator of adapter `slot`'s initial A matrices.
pub fn init_rng(seed: u64, slot: usize) -> StdRng {
    StdRng::seed_from_u64(seed ^ (0x10_4A_u64.wrapping_mul(slot as u64 + 1)))
}

/// PEFT's `adapter_config.json` for `config` on the base at `base`.
pub fn peft_config_json(config: &LoraConfig, base: &str) -> serde_json::Value {
    serde_json::json!({
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": base,
        "r": config.rank,
        "lora_alpha": config.alpha,
        "lora_dropout": config.dropout,
        "target_modules": config.targets,
        "bias": "none",
        "fan_in_fan_out": false,
        "inference_mode": true,
        "init_lora_weights": true,
        "use_rslora": config.rslora,
        "use_dora": false,
        "modules_to_save": null,
        "layers_to_transform": null,
        "layers_pattern": null,
        "rank_pattern": {},
        "alpha_pattern": {},
    })
}

/// Writes an adapter folder (config and tensors) into `dir`, which the caller stages.
pub fn write_peft(
    dir: &Path,
    config: &LoraConfig,
    base: &str,
    tensors: &[(String, Tensor)],
) -> Result<()> {
    let path = dir.join(ADAPTER_CONFIG);
    let text = serde_json::to_string_pretty(&peft_config_json(config, base)).expect("json");
    crate::output::write_atomic(&path, text.as_bytes()).map_err(|e| ModelError::io(&path, e))?;
    super::tensor_file::write_tensors(&dir.join(ADAPTER_WEIGHTS), tensors)
}

/// Reads a PEFT `adapter_config.json`, refusing what drmas does not implement (DoRA,
/// biases, per-module ranks, extra trained modules, a regex of targets, …) by key.
pub fn read_peft_config(dir: &Path) -> Result<LoraConfig> {
    let path = dir.join(ADAPTER_CONFIG);
    let text = std::fs::read_to_string(&path).map_err(|e| ModelError::io(&path, e))?;
    let json: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| ModelError::io(&path, e))?;
    let bad = |field: &str, message: String| ModelError::Config {
        path: path.clone(),
        field: field.into(),
        message,
    };
    let get = |k: &str| json.get(k).filter(|v| !v.is_null());
    match get("peft_type").and_then(|v| v.as_str()) {
        Some("LORA") => {}
        other => return Err(bad("peft_type", format!("{other:?}, expected \"LORA\""))),
    }
    let rank = get("r")
        .and_then(|v| v.as_i64())
        .ok_or_else(|| bad("r", "missing or not an integer".into()))?;
    let alpha = get("lora_alpha")
        .and_then(|v| v.as_f64())
        .ok_or_else(|| bad("lora_alpha", "missing or not a number".into()))?;
    let dropout = get("lora_dropout").and_then(|v| v.as_f64()).unwrap_or(0.0);
    let targets = match get("target_modules") {
        Some(serde_json::Value::Array(items)) => items
            .iter()
            .map(|t| t.as_str().map(str::to_string))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| bad("target_modules", "not a list of names".into()))?,
        Some(other) => {
            return Err(bad(
                "target_modules",
                format!("{other} is not supported (a list of module names is)"),
            ));
        }
        None => return Err(bad("target_modules", "missing".into())),
    };
    let is_true = |k: &str| get(k).and_then(|v| v.as_bool()).unwrap_or(false);
    for key in ["use_dora", "fan_in_fan_out"] {
        if is_true(key) {
            return Err(bad(key, "true is not supported".into()));
        }
    }
    if let Some(b) = get("bias").and_then(|v| v.as_str())
        && b != "none"
    {
        return Err(bad(
            "bias",
            format!("\"{b}\" is not supported (\"none\" is)"),
        ));
    }
    for key in [
        "modules_to_save",
        "layers_to_transform",
        "rank_pattern",
        "alpha_pattern",
    ] {
        let set = match get(key) {
            Some(serde_json::Value::Object(m)) => !m.is_empty(),
            Some(serde_json::Value::Array(a)) => !a.is_empty(),
            Some(_) => true,
            None => false,
        };
        if set {
            return Err(bad(key, "is set, which drmas does not support".into()));
        }
    }
    let config = LoraConfig {
        rank,
        alpha,
        dropout,
        targets,
        rslora: is_true("use_rslora"),
    };
    if let Some(problem) = config.problem() {
        return Err(bad("lora", problem));
    }
    Ok(config)
}

/// The tensors of the adapter folder `dir`, by name.
pub fn read_peft_tensors(dir: &Path) -> Result<HashMap<String, Tensor>> {
    let path = dir.join(ADAPTER_WEIGHTS);
    if !path.is_file() {
        return Err(ModelError::io(
            &path,
            "no adapter_model.safetensors (adapter_model.bin is not read)",
        ));
    }
    let tensors = Tensor::read_safetensors(&path).map_err(|e| ModelError::io(&path, e))?;
    Ok(tensors.into_iter().collect())
}

/// Whether `dir` holds a PEFT adapter.
pub fn is_adapter_dir(dir: &Path) -> bool {
    dir.join(ADAPTER_CONFIG).is_file()
}
