//! LoRA adapters on a decoder: adding fresh ones, loading PEFT tensors into a slot, and
//! merging an adapter into the base weights. The arithmetic of one adapted projection
//! is in `lora`; which adapter a forward uses is its mode (`mode`); this module manages
//! the decoder's slots.

use super::{
    decoder::Decoder,
    error::{ModelError, Result},
    lora::{self, AdapterSlot, LoraConfig},
};
use std::collections::HashMap;
use tch::{Kind, Tensor};

impl Decoder {
    /// Adds a fresh LoRA adapter (A random from `seed`, B zero: the logits are the
    /// base's until it trains) and returns its slot.
    pub fn add_adapter(&mut self, config: &LoraConfig, seed: u64) -> usize {
        let slot = self.adapters.len();
        let device = self.device();
        let mut rng = lora::init_rng(seed, slot);
        let mut params = Vec::new();
        for (module, short, lin) in self.projections_mut() {
            let pair = config.targets(short).then(|| {
                let [out_dim, in_dim] = lin.weight.size()[..] else {
                    unreachable!("a projection is 2-d")
                };
                let pair = lora::init_pair(config, out_dim, in_dim, &mut rng, device);
                params.push((lora::peft_name(&module, false), pair.a.shallow_clone()));
                params.push((lora::peft_name(&module, true), pair.b.shallow_clone()));
                pair
            });
            lin.lora.resize_with(slot, || None);
            lin.lora.push(pair);
        }
        params.sort_by(|a, b| a.0.cmp(&b.0));
        self.adapters.push(AdapterSlot {
            config: config.clone(),
            params,
        });
        slot
    }

    pub fn adapters(&self) -> &[AdapterSlot] {
        &self.adapters
    }

    /// Copies an adapter's tensors (PEFT names) into slot `slot`, bit for bit. Every
    /// tensor of the slot must be given with its shape; an unknown name is refused.
    pub fn load_adapter(
        &mut self,
        slot: usize,
        tensors: &HashMap<String, Tensor>,
        path: &std::path::Path,
    ) -> Result<()> {
        let adapter = &self.adapters[slot];
        let refuse = |name: &str, message: String| ModelError::Tensor {
            path: path.to_path_buf(),
            name: name.to_string(),
            message,
        };
        for (name, own) in &adapter.params {
            let Some(t) = tensors.get(name) else {
                return Err(refuse(name, "missing from the adapter".into()));
            };
            if t.size() != own.size() {
                return Err(refuse(
                    name,
                    format!("shape {:?}, expected {:?}", t.size(), own.size()),
                ));
            }
        }
        if let Some(extra) = tensors
            .keys()
            .filter(|n| !adapter.params.iter().any(|(p, _)| p == *n))
            .min()
        {
            return Err(refuse(
                extra,
                "not a LoRA tensor of this model's targets".into(),
            ));
        }
        let _guard = tch::no_grad_guard();
        for (name, own) in &adapter.params {
            let mut own = own.shallow_clone();
            own.f_copy_(&tensors[name])?;
        }
        let mut finite = true;
        for (_, t) in &adapter.params {
            finite &= super::finite::all_finite(t)?;
        }
        if !finite {
            return Err(ModelError::NonFinite {
                what: path.display().to_string(),
                message: "the adapter holds NaN or infinite values".into(),
            });
        }
        Ok(())
    }

    /// Adds adapter `slot`'s delta (scale · B A) into the base weights it targets, in
    /// float32, rounded once to the weights' dtype.
    pub fn merge_adapter(&mut self, slot: usize) {
        let _guard = tch::no_grad_guard();
        for (_, _, lin) in self.projections_mut() {
            if let Some(Some(pair)) = lin.lora.get(slot) {
                let delta = pair.b.matmul(&pair.a) * pair.scale;
                let merged = lin.weight.to_kind(Kind::Float) + delta;
                lin.weight.copy_(&merged.to_kind(lin.weight.kind()));
            }
        }
    }
}
