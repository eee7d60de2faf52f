//! The flat layout of sharded training (FSDP's unit): a model's parameters grouped into
//! units — one per decoder layer, and one for the embeddings, the final norm and the
//! head — each laid end to end in one flat buffer padded to a multiple of the world
//! size N, so that gathering or reducing a unit is one collective
//! ([`super::Collective::all_gather_into_tensor`],
//! [`super::Collective::reduce_scatter_sum`]) instead of one per tensor. Rank r owns
//! elements [r·s, (r+1)·s) of each unit, s = padded / N.
//!
//! The layout itself is names, shapes and offsets (what a per-rank checkpoint needs to
//! be resharded); the functions on [`FlatUnit`] copy parameters and gradients into a
//! unit's flat buffer and back, make them views of it, and slice a rank's shard.

use std::{collections::HashMap, fmt, ops::Range};
use tch::{Kind, Tensor};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FlatError {
    #[error("a flat layout needs a world size of at least 1")]
    NoRanks,
    #[error("rank {rank} is not in a job of {world_size} ranks")]
    Rank { rank: usize, world_size: usize },
    #[error("parameter `{name}`: {problem}")]
    Param { name: String, problem: String },
    #[error("parameters `{first}` and `{second}` share memory without being one tensor")]
    Overlap { first: String, second: String },
    #[error("{unit}: {problem}")]
    Unit { unit: UnitKind, problem: String },
}

/// Which part of the model a unit holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum UnitKind {
    /// Decoder layer i: `model.layers.{i}.…`.
    Layer(usize),
    /// Everything else: the embeddings, the final norm and an untied head.
    Outer,
}

impl UnitKind {
    /// The unit of an HF parameter name.
    pub fn of(name: &str) -> UnitKind {
        name.strip_prefix("model.layers.")
            .and_then(|rest| rest.split_once('.'))
            .and_then(|(i, _)| i.parse().ok())
            .map_or(UnitKind::Outer, UnitKind::Layer)
    }
}

impl fmt::Display for UnitKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UnitKind::Layer(i) => write!(f, "unit of layer {i}"),
            UnitKind::Outer => f.write_str("unit of the embeddings, final norm and head"),
        }
    }
}

/// One parameter's place in its unit's flat buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlatParam {
    pub name: String,
    /// Other names of the same tensor (a tied head: `lm_head.weight`), not laid out again.
    pub aliases: Vec<String>,
    pub shape: Vec<i64>,
    /// Its elements are [offset, offset + numel) of the flat buffer.
    pub offset: i64,
    pub numel: i64,
}

/// Part of a parameter that lies in a rank's shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardPiece {
    /// Index into [`FlatUnit::params`].
    pub param: usize,
    /// Elements of the parameter (flattened).
    pub in_param: Range<i64>,
    /// The same elements' places in the shard.
    pub in_shard: Range<i64>,
}

/// One unit: its parameters end to end, then zeros up to `padded`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlatUnit {
    pub kind: UnitKind,
    /// In name order.
    pub params: Vec<FlatParam>,
    /// The parameters' elements.
    pub numel: i64,
    /// `numel` rounded up to a multiple of the world size: the flat buffer's length.
    pub padded: i64,
    pub world_size: usize,
}

/// A model's units: its layers in order, then the outer unit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlatLayout {
    pub units: Vec<FlatUnit>,
    pub world_size: usize,
}

impl FlatLayout {
    /// The layout of a model's named parameters over `world_size` ranks. Names that
    /// are one tensor (a tied `lm_head.weight` and `model.embed_tokens.weight`) are laid
    /// out once, under the name that is not the head's, the other kept as an alias;
    /// tensors that overlap in memory without being one tensor are refused.
    pub fn new(named: &[(String, Tensor)], world_size: usize) -> Result<FlatLayout, FlatError> {
        let mut names: Vec<&(String, Tensor)> = named.iter().collect();
        // The canonical name first among those of one tensor: the head's last.
        names.sort_by(|a, b| {
            (a.0.starts_with("lm_head."), &a.0).cmp(&(b.0.starts_with("lm_head."), &b.0))
        });
        let mut kept: Vec<(String, Vec<String>, Vec<i64>, Extent)> = Vec::new();
        for (name, t) in names {
            let extent = Extent::of(t);
            let mut same = None;
            for (i, (other, _, _, e)) in kept.iter().enumerate() {
                if extent.is_same(e) {
                    same = Some(i);
                    break;
                }
                if extent.overlaps(e) {
                    return Err(FlatError::Overlap {
                        first: other.clone(),
                        second: name.clone(),
                    });
                }
            }
            match same {
                Some(i) => kept[i].1.push(name.clone()),
                None => kept.push((name.clone(), Vec::new(), t.size(), extent)),
            }
        }
        let shapes: Vec<(String, Vec<i64>)> = kept
            .iter()
            .map(|(name, _, shape, _)| (name.clone(), shape.clone()))
            .collect();
        let mut layout = FlatLayout::from_shapes(&shapes, world_size)?;
        let aliases: HashMap<&str, &Vec<String>> =
            kept.iter().map(|(n, a, _, _)| (n.as_str(), a)).collect();
        for p in layout.units.iter_mut().flat_map(|u| &mut u.params) {
            p.aliases = aliases[p.name.as_str()].clone();
        }
        Ok(layout)
    }

    /// The layout of distinct parameters given by name and shape (no tie is looked for).
    pub fn from_shapes(
        shapes: &[(String, Vec<i64>)],
        world_size: usize,
    ) -> Result<FlatLayout, FlatError> {
        if world_size == 0 {
            return Err(FlatError::NoRanks);
        }
        let mut by_unit: HashMap<UnitKind, Vec<&(String, Vec<i64>)>> = HashMap::new();
        for named in shapes {
            if let Some(d) = named.1.iter().find(|&&d| d < 0) {
                return Err(FlatError::Param {
                    name: named.0.clone(),
                    problem: format!("a negative dimension {d} in {:?}", named.1),
                });
            }
            by_unit
                .entry(UnitKind::of(&named.0))
                .or_default()
                .push(named);
        }
        let mut kinds: Vec<UnitKind> = by_unit.keys().copied().collect();
        kinds.sort();
        let units = kinds
            .into_iter()
            .map(|kind| {
                let mut named = by_unit.remove(&kind).unwrap_or_default();
                named.sort_by(|a, b| a.0.cmp(&b.0));
                let mut offset = 0;
                let mut params = Vec::with_capacity(named.len());
                for (i, (name, shape)) in named.iter().enumerate() {
                    if i > 0 && named[i - 1].0 == *name {
                        return Err(FlatError::Param {
                            name: name.clone(),
                            problem: "named twice".into(),
                        });
                    }
                    let numel: i64 = shape.iter().product();
                    params.push(FlatParam {
                        name: name.clone(),
                        aliases: Vec::new(),
                        shape: shape.clone(),
                        offset,
                        numel,
                    });
                    offset += numel;
                }
                let n = world_size as i64;
                Ok(FlatUnit {
                    kind,
                    params,
                    numel: offset,
                    padded: (offset + n - 1) / n * n,
                    world_size,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(FlatLayout { units, world_size })
    }

    /// Every unit's padded length, summed: the elements a whole model's flat buffers hold.
    pub fn padded(&self) -> i64 {
        self.units.iter().map(|u| u.padded).sum()
    }
}

impl FlatUnit {
    /// The elements each rank owns: padded / N.
    pub fn shard_numel(&self) -> i64 {
        self.padded / self.world_size as i64
    }

    /// Rank `rank`'s elements of the flat buffer.
    pub fn shard_range(&self, rank: usize) -> Result<Range<i64>, FlatError> {
        if rank >= self.world_size {
            return Err(FlatError::Rank {
                rank,
                world_size: self.world_size,
            });
        }
        let s = self.shard_numel();
        Ok(rank as i64 * s..(rank as i64 + 1) * s)
    }

    /// The parts of parameters that rank `rank`'s shard holds, in order; the shard's
    /// elements past the last piece are padding.
    pub fn pieces(&self, rank: usize) -> Result<Vec<ShardPiece>, FlatError> {
        let shard = self.shard_range(rank)?;
        Ok(self
            .params
            .iter()
            .enumerate()
            .filter_map(|(i, p)| {
                let start = p.offset.max(shard.start);
                let end = (p.offset + p.numel).min(shard.end);
                (start < end).then(|| ShardPiece {
                    param: i,
                    in_param: start - p.offset..end - p.offset,
                    in_shard: start - shard.start..end - shard.start,
                })
            })
            .collect())
    }

    /// The unit's tensors in its order, looked up by name (or alias) in `named`, each
    /// checked against its shape.
    pub fn resolve<'a>(&self, named: &'a [(String, Tensor)]) -> Result<Vec<&'a Tensor>, FlatError> {
        let by_name: HashMap<&str, &Tensor> = named.iter().map(|(n, t)| (n.as_str(), t)).collect();
        self.params
            .iter()
            .map(|p| {
                let t = std::iter::once(&p.name)
                    .chain(&p.aliases)
                    .find_map(|n| by_name.get(n.as_str()))
                    .ok_or_else(|| FlatError::Param {
                        name: p.name.clone(),
                        problem: format!("not among the {} tensors given", named.len()),
                    })?;
                self.check_shape(p, t)?;
                Ok(*t)
            })
            .collect()
    }

    /// A new flat buffer holding `tensors` (the unit's, in its order: [`Self::resolve`])
    /// end to end, then zeros; their dtype and device, which they must share.
    pub fn flatten(&self, tensors: &[&Tensor]) -> Result<Tensor, FlatError> {
        let (kind, device) = self.common(tensors)?;
        let _guard = tch::no_grad_guard();
        let flat = Tensor::zeros([self.padded], (kind, device));
        for (p, t) in self.params.iter().zip(tensors) {
            flat.narrow(0, p.offset, p.numel).copy_(&t.reshape([-1]));
        }
        Ok(flat)
    }

    /// A new flat buffer of the gradients of `params` (the unit's, in its order); a
    /// parameter without a gradient gives zeros.
    pub fn flatten_grads(&self, params: &[&Tensor]) -> Result<Tensor, FlatError> {
        let (kind, device) = self.common(params)?;
        let _guard = tch::no_grad_guard();
        let flat = Tensor::zeros([self.padded], (kind, device));
        for (p, t) in self.params.iter().zip(params) {
            let g = t.grad();
            if g.defined() {
                flat.narrow(0, p.offset, p.numel).copy_(&g.reshape([-1]));
            }
        }
        Ok(flat)
    }

    /// Views of `flat`, one per parameter in the unit's order, shaped as the parameter:
    /// writing one writes the buffer.
    pub fn views(&self, flat: &Tensor) -> Result<Vec<Tensor>, FlatError> {
        self.check_flat(flat)?;
        Ok(self
            .params
            .iter()
            .map(|p| flat.narrow(0, p.offset, p.numel).view(p.shape.as_slice()))
            .collect())
    }

    /// Copies `flat`'s elements back into `tensors` (the unit's, in its order).
    pub fn unflatten(&self, flat: &Tensor, tensors: &[&Tensor]) -> Result<(), FlatError> {
        let views = self.views(flat)?;
        self.common(tensors)?;
        let _guard = tch::no_grad_guard();
        for (v, t) in views.iter().zip(tensors) {
            t.shallow_clone().copy_(v);
        }
        Ok(())
    }

    /// Copies `flat`'s elements into the gradients of `params`, which must have one
    /// (`sync::define_grads` gives every parameter one).
    pub fn unflatten_grads(&self, flat: &Tensor, params: &[&Tensor]) -> Result<(), FlatError> {
        let views = self.views(flat)?;
        self.common(params)?;
        let grads = self.grads(params)?;
        let _guard = tch::no_grad_guard();
        for (v, mut g) in views.iter().zip(grads) {
            g.copy_(v);
        }
        Ok(())
    }

    /// Makes `tensors` (the unit's, in its order) views of `flat`: their values are
    /// copied into the buffer, then each one's storage becomes its place there
    /// (`set_data`, which every handle to the parameter sees: the decoder's, the
    /// optimizer's), so that what is later gathered into `flat` is the model's, with no
    /// copy.
    pub fn bind(&self, flat: &Tensor, tensors: &[&Tensor]) -> Result<(), FlatError> {
        self.check_same_kind(flat, tensors)?;
        let views = self.views(flat)?;
        let _guard = tch::no_grad_guard();
        for (mut v, t) in views.into_iter().zip(tensors) {
            v.copy_(t);
            t.shallow_clone().set_data(&v);
        }
        Ok(())
    }

    /// Makes the gradients of `params` views of `flat` (their values copied in first):
    /// a backward then accumulates into the buffer in place, ready to be
    /// reduce-scattered. Every parameter must have a gradient (`sync::define_grads`).
    pub fn bind_grads(&self, flat: &Tensor, params: &[&Tensor]) -> Result<(), FlatError> {
        self.check_same_kind(flat, params)?;
        let views = self.views(flat)?;
        let grads = self.grads(params)?;
        let _guard = tch::no_grad_guard();
        for (mut v, mut g) in views.into_iter().zip(grads) {
            v.copy_(&g);
            g.set_data(&v);
        }
        Ok(())
    }

    /// Rank `rank`'s shard of `flat`: a view of its [`Self::shard_range`].
    pub fn shard(&self, flat: &Tensor, rank: usize) -> Result<Tensor, FlatError> {
        self.check_flat(flat)?;
        let r = self.shard_range(rank)?;
        Ok(flat.narrow(0, r.start, r.end - r.start))
    }

    fn grads(&self, params: &[&Tensor]) -> Result<Vec<Tensor>, FlatError> {
        self.params
            .iter()
            .zip(params)
            .map(|(p, t)| {
                let g = t.grad();
                if g.defined() {
                    Ok(g)
                } else {
                    Err(FlatError::Param {
                        name: p.name.clone(),
                        problem: "has no gradient".into(),
                    })
                }
            })
            .collect()
    }

    fn fail<T>(&self, problem: String) -> Result<T, FlatError> {
        Err(FlatError::Unit {
            unit: self.kind,
            problem,
        })
    }

    fn check_shape(&self, p: &FlatParam, t: &Tensor) -> Result<(), FlatError> {
        if t.size() != p.shape {
            return Err(FlatError::Param {
                name: p.name.clone(),
                problem: format!("shape {:?}, the layout's is {:?}", t.size(), p.shape),
            });
        }
        Ok(())
    }

    /// The dtype and device `tensors` share, after checking they are the unit's.
    pub fn common(&self, tensors: &[&Tensor]) -> Result<(Kind, tch::Device), FlatError> {
        if tensors.len() != self.params.len() {
            return self.fail(format!(
                "{} tensors given for its {} parameters",
                tensors.len(),
                self.params.len()
            ));
        }
        let Some(first) = tensors.first() else {
            return self.fail("no parameters".into());
        };
        for (p, t) in self.params.iter().zip(tensors) {
            self.check_shape(p, t)?;
            if (t.kind(), t.device()) != (first.kind(), first.device()) {
                return self.fail(format!(
                    "`{}` is {:?} on {:?} and `{}` {:?} on {:?}: a flat buffer has one dtype and device",
                    self.params[0].name,
                    first.kind(),
                    first.device(),
                    p.name,
                    t.kind(),
                    t.device()
                ));
            }
        }
        Ok((first.kind(), first.device()))
    }

    fn check_flat(&self, flat: &Tensor) -> Result<(), FlatError> {
        if flat.size() != [self.padded] || !flat.is_contiguous() {
            return self.fail(format!(
                "a flat buffer of shape {:?}{}, expected [{}] (its {} elements padded to a multiple of {})",
                flat.size(),
                if flat.is_contiguous() { "" } else { ", not contiguous" },
                self.padded,
                self.numel,
                self.world_size
            ));
        }
        Ok(())
    }

    fn check_same_kind(&self, flat: &Tensor, tensors: &[&Tensor]) -> Result<(), FlatError> {
        let (kind, device) = self.common(tensors)?;
        if (flat.kind(), flat.device()) != (kind, device) {
            return self.fail(format!(
                "a flat buffer of {:?} on {:?} for parameters of {kind:?} on {device:?}",
                flat.kind(),
                flat.device()
            ));
        }
        Ok(())
    }
}

/// The bytes a tensor's elements span in memory.
struct Extent {
    start: usize,
    end: usize,
    size: Vec<i64>,
    stride: Vec<i64>,
}

impl Extent {
    fn of(t: &Tensor) -> Extent {
        let start = if t.numel() == 0 {
            0
        } else {
            t.data_ptr() as usize
        };
        let last: i64 = t
            .size()
            .iter()
            .zip(t.stride())
            .map(|(&n, s)| (n - 1).max(0) * s.max(0))
            .sum();
        let span = if t.numel() == 0 {
            0
        } else {
            (last as usize + 1) * t.kind().elt_size_in_bytes()
        };
        Extent {
            start,
            end: start + span,
            size: t.size(),
            stride: t.stride(),
        }
    }

    /// The same elements in the same shape: one tensor under two names.
    fn is_same(&self, other: &Extent) -> bool {
        self.start == other.start
            && self.end > self.start
            && self.size == other.size
            && self.stride == other.stride
    }

    fn overlaps(&self, other: &Extent) -> bool {
        self.start < other.end && other.start < self.end
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Decoder, ModelConfig};
    use tch::Device;

    fn shapes(list: &[(&str, &[i64])]) -> Vec<(String, Vec<i64>)> {
        list.iter()
            .map(|(n, s)| (n.to_string(), s.to_vec()))
            .collect()
    }

    /// Three tensors of 5, 7 and 2 elements in layer 0.
    fn three() -> Vec<(String, Vec<i64>)> {
        shapes(&[
            ("model.layers.0.a", &[5]),
            ("model.layers.0.b", &[7]),
            ("model.layers.0.c", &[2, 1]),
        ])
    }

    fn floats(t: &Tensor) -> Vec<f32> {
        Vec::<f32>::try_from(t.reshape([-1]).to_kind(Kind::Float)).unwrap()
    }

    #[test]
    fn three_tensors_over_three_ranks_by_hand() {
        let layout = FlatLayout::from_shapes(&three(), 3).unwrap();
        assert_eq!(layout.units.len(), 1);
        let u = &layout.units[0];
        assert_eq!(u.kind, UnitKind::Layer(0));
        let offsets: Vec<(&str, i64, i64)> = u
            .params
            .iter()
            .map(|p| (p.name.as_str(), p.offset, p.numel))
            .collect();
        assert_eq!(
            offsets,
            [
                ("model.layers.0.a", 0, 5),
                ("model.layers.0.b", 5, 7),
                ("model.layers.0.c", 12, 2)
            ]
        );
        // 14 elements padded to 15: shards of 5.
        assert_eq!((u.numel, u.padded, u.shard_numel()), (14, 15, 5));
        let ranges: Vec<Range<i64>> = (0..3).map(|r| u.shard_range(r).unwrap()).collect();
        assert_eq!(ranges, [0..5, 5..10, 10..15]);
        assert_eq!(
            u.shard_range(3),
            Err(FlatError::Rank {
                rank: 3,
                world_size: 3
            })
        );
        // Rank 1 holds b's first 5; rank 2 b's last 2, c, and one element of padding.
        assert_eq!(
            u.pieces(1).unwrap(),
            [ShardPiece {
                param: 1,
                in_param: 0..5,
                in_shard: 0..5
            }]
        );
        assert_eq!(
            u.pieces(2).unwrap(),
            [
                ShardPiece {
                    param: 1,
                    in_param: 5..7,
                    in_shard: 0..2
                },
                ShardPiece {
                    param: 2,
                    in_param: 0..2,
                    in_shard: 2..4
                }
            ]
        );
    }

    #[test]
    fn a_count_not_divisible_by_the_ranks_is_padded() {
        // 14 over 4: padded to 16, shards of 4, the last one half padding.
        let layout = FlatLayout::from_shapes(&three(), 4).unwrap();
        let u = &layout.units[0];
        assert_eq!((u.padded, u.shard_numel()), (16, 4));
        assert_eq!(u.shard_range(3).unwrap(), 12..16);
        assert_eq!(
            u.pieces(3).unwrap(),
            [ShardPiece {
                param: 2,
                in_param: 0..2,
                in_shard: 0..2
            }]
        );
        // a's last element and b's first three.
        let pieces: Vec<(usize, Range<i64>, Range<i64>)> = u
            .pieces(1)
            .unwrap()
            .into_iter()
            .map(|p| (p.param, p.in_param, p.in_shard))
            .collect();
        assert_eq!(pieces, [(0, 4..5, 0..1), (1, 0..3, 1..4)]);
        // One rank: no padding, one shard of everything.
        let one = FlatLayout::from_shapes(&three(), 1).unwrap();
        assert_eq!(
            (one.units[0].padded, one.units[0].shard_range(0).unwrap()),
            (14, 0..14)
        );
        // A unit smaller than the job: ranks 1 and 2 hold only padding.
        let tiny = FlatLayout::from_shapes(&shapes(&[("model.norm.weight", &[1])]), 3).unwrap();
        assert_eq!(tiny.units[0].padded, 3);
        assert_eq!(tiny.units[0].pieces(2).unwrap(), []);
    }

    #[test]
    fn names_make_units_layers_in_order_then_the_outer_one() {
        let layout = FlatLayout::from_shapes(
            &shapes(&[
                ("model.norm.weight", &[4]),
                ("model.layers.10.mlp.up_proj.weight", &[2, 4]),
                ("model.layers.2.input_layernorm.weight", &[4]),
                ("model.embed_tokens.weight", &[3, 4]),
                ("model.layers.2.self_attn.q_proj.weight", &[4, 4]),
            ]),
            2,
        )
        .unwrap();
        let units: Vec<(UnitKind, Vec<&str>)> = layout
            .units
            .iter()
            .map(|u| (u.kind, u.params.iter().map(|p| p.name.as_str()).collect()))
            .collect();
        assert_eq!(
            units,
            [
                (
                    UnitKind::Layer(2),
                    vec![
                        "model.layers.2.input_layernorm.weight",
                        "model.layers.2.self_attn.q_proj.weight"
                    ]
                ),
                (
                    UnitKind::Layer(10),
                    vec!["model.layers.10.mlp.up_proj.weight"]
                ),
                (
                    UnitKind::Outer,
                    vec!["model.embed_tokens.weight", "model.norm.weight"]
                ),
            ]
        );
        assert_eq!(layout.padded(), 20 + 8 + 16);
        assert_eq!(UnitKind::of("model.layers.x.a"), UnitKind::Outer);
        assert_eq!(UnitKind::of("lm_head.weight"), UnitKind::Outer);
    }

    /// A tiny Llama: hidden 64, intermediate 96, 4 heads of 16, 2 KV heads, vocab 128.
    fn tiny_decoder(tied: bool) -> Decoder {
        let json = format!(
            r#"{{"model_type": "llama", "vocab_size": 128, "hidden_size": 64, "intermediate_size": 96,
                "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                "max_position_embeddings": 256, "tie_word_embeddings": {tied}}}"#
        );
        let config = ModelConfig::from_json(std::path::Path::new("config.json"), &json).unwrap();
        Decoder::new(config, Device::Cpu, Kind::Float)
    }

    #[test]
    fn a_decoder_has_a_unit_per_layer_and_its_tied_head_once() {
        for tied in [true, false] {
            let model = tiny_decoder(tied);
            let named: Vec<(String, Tensor)> = model.vs.variables().into_iter().collect();
            let layout = FlatLayout::new(&named, 3).unwrap();
            let kinds: Vec<UnitKind> = layout.units.iter().map(|u| u.kind).collect();
            assert_eq!(
                kinds,
                [UnitKind::Layer(0), UnitKind::Layer(1), UnitKind::Outer]
            );
            // A layer: 2 norms of 64, q and o of 64·64, k and v of 32·64, three MLP
            // projections of 96·64: 30,848 elements, padded to 30,849 over 3 ranks.
            let layer = &layout.units[1];
            assert_eq!(layer.params.len(), 9);
            assert_eq!(
                (layer.numel, layer.padded, layer.shard_numel()),
                (30_848, 30_849, 10_283)
            );
            let q = &layer
                .params
                .iter()
                .find(|p| p.name == "model.layers.1.self_attn.q_proj.weight");
            assert_eq!(q.map(|p| p.shape.clone()), Some(vec![64, 64]));
            let outer = &layout.units[2];
            let names: Vec<&str> = outer.params.iter().map(|p| p.name.as_str()).collect();
            if tied {
                // The embeddings (128·64) and the norm (64): 8,256, a multiple of 3.
                assert_eq!(names, ["model.embed_tokens.weight", "model.norm.weight"]);
                assert_eq!((outer.numel, outer.padded), (8_256, 8_256));
            } else {
                // And the head's own 128·64: 16,448, padded to 16,449.
                assert_eq!(
                    names,
                    [
                        "lm_head.weight",
                        "model.embed_tokens.weight",
                        "model.norm.weight"
                    ]
                );
                assert_eq!((outer.numel, outer.padded), (16_448, 16_449));
            }
        }
    }

    #[test]
    fn a_tied_head_given_by_both_names_is_laid_out_once() {
        let embed = Tensor::arange(6, (Kind::Float, Device::Cpu)).reshape([3, 2]);
        let named = vec![
            ("lm_head.weight".to_string(), embed.shallow_clone()),
            (
                "model.embed_tokens.weight".to_string(),
                embed.shallow_clone(),
            ),
            (
                "model.norm.weight".to_string(),
                Tensor::ones([2], (Kind::Float, Device::Cpu)),
            ),
        ];
        let layout = FlatLayout::new(&named, 2).unwrap();
        let outer = &layout.units[0];
        assert_eq!(outer.params.len(), 2);
        assert_eq!(outer.params[0].name, "model.embed_tokens.weight");
        assert_eq!(outer.params[0].aliases, ["lm_head.weight"]);
        assert_eq!((outer.numel, outer.padded), (8, 8));
        // Resolved through the alias alone, too.
        let by_head = vec![named[0].clone_named(), named[2].clone_named()];
        let tensors = outer.resolve(&by_head).unwrap();
        assert_eq!(
            floats(&outer.flatten(&tensors).unwrap()),
            [0., 1., 2., 3., 4., 5., 1., 1.]
        );
        // A view of part of another parameter is not a tie: refused.
        let overlapping = vec![
            (
                "model.embed_tokens.weight".to_string(),
                embed.shallow_clone(),
            ),
            ("model.norm.weight".to_string(), embed.narrow(0, 1, 1)),
        ];
        assert_eq!(
            FlatLayout::new(&overlapping, 2).unwrap_err().to_string(),
            "parameters `model.embed_tokens.weight` and `model.norm.weight` share memory without being one tensor"
        );
    }

    trait CloneNamed {
        fn clone_named(&self) -> (String, Tensor);
    }
    impl CloneNamed for (String, Tensor) {
        fn clone_named(&self) -> (String, Tensor) {
            (self.0.clone(), self.1.shallow_clone())
        }
    }

    /// The three tensors with values: a = 1..=5, b = 11..=17, c = [[21], [22]].
    fn three_tensors() -> Vec<(String, Tensor)> {
        let cpu = (Kind::Float, Device::Cpu);
        vec![
            ("model.layers.0.a".into(), Tensor::arange_start(1, 6, cpu)),
            ("model.layers.0.b".into(), Tensor::arange_start(11, 18, cpu)),
            (
                "model.layers.0.c".into(),
                Tensor::arange_start(21, 23, cpu).reshape([2, 1]),
            ),
        ]
    }

    #[test]
    fn parameters_go_into_the_flat_buffer_and_back() {
        let named = three_tensors();
        let layout = FlatLayout::new(&named, 3).unwrap();
        let u = &layout.units[0];
        let tensors = u.resolve(&named).unwrap();
        let flat = u.flatten(&tensors).unwrap();
        let values = [
            1., 2., 3., 4., 5., 11., 12., 13., 14., 15., 16., 17., 21., 22., 0.,
        ];
        assert_eq!(floats(&flat), values);
        assert_eq!(
            floats(&u.shard(&flat, 2).unwrap()),
            [16., 17., 21., 22., 0.]
        );
        // Views write the buffer; unflatten copies it back into the tensors.
        let views = u.views(&flat).unwrap();
        assert_eq!(views[2].size(), [2, 1]);
        let _ = views[2].shallow_clone().fill_(-1.0);
        let _ = u.shard(&flat, 0).unwrap().fill_(0.5);
        u.unflatten(&flat, &tensors).unwrap();
        assert_eq!(floats(&named[0].1), [0.5; 5]);
        assert_eq!(floats(&named[1].1), [11., 12., 13., 14., 15., 16., 17.]);
        assert_eq!(floats(&named[2].1), [-1., -1.]);
    }

    #[test]
    fn gradients_go_into_the_flat_buffer_and_back() {
        let named: Vec<(String, Tensor)> = three_tensors()
            .into_iter()
            .map(|(n, t)| (n, t.set_requires_grad(true)))
            .collect();
        let layout = FlatLayout::new(&named, 2).unwrap();
        let u = &layout.units[0];
        let params = u.resolve(&named).unwrap();
        // Only a and c in the loss: b has no gradient yet and gives zeros.
        let loss = (&named[0].1 * 2.0).sum(Kind::Float) + (&named[2].1 * 3.0).sum(Kind::Float);
        loss.backward();
        let flat = u.flatten_grads(&params).unwrap();
        assert_eq!(
            floats(&flat),
            [2., 2., 2., 2., 2., 0., 0., 0., 0., 0., 0., 0., 3., 3.]
        );
        assert_eq!(
            u.unflatten_grads(&flat, &params).unwrap_err().to_string(),
            "parameter `model.layers.0.b`: has no gradient"
        );
        (&named[1].1 * 0.0).sum(Kind::Float).backward();
        let _ = flat.shallow_clone().fill_(7.0);
        u.unflatten_grads(&flat, &params).unwrap();
        for (_, p) in &named {
            assert_eq!(floats(&p.grad()), vec![7.0; p.numel()]);
        }
    }

    #[test]
    fn bound_parameters_and_gradients_live_in_the_flat_buffers() {
        let named: Vec<(String, Tensor)> = three_tensors()
            .into_iter()
            .map(|(n, t)| (n, t.set_requires_grad(true)))
            .collect();
        // Another handle to b, as the decoder and the optimizer each hold one.
        let other_b = named[1].1.shallow_clone();
        let layout = FlatLayout::new(&named, 3).unwrap();
        let u = &layout.units[0];
        let params = u.resolve(&named).unwrap();
        let flat = Tensor::zeros([u.padded], (Kind::Float, Device::Cpu));
        u.bind(&flat, &params).unwrap();
        assert_eq!(floats(&flat)[..6], [1., 2., 3., 4., 5., 11.]);
        // A write to the buffer (as a gather would) is the parameters' new value.
        let _ = u.shard(&flat, 1).unwrap().fill_(9.0);
        assert_eq!(floats(&other_b), [9., 9., 9., 9., 9., 16., 17.]);
        assert!(other_b.requires_grad());
        // Gradients: a backward accumulates into the bound buffer.
        // Every parameter gets a gradient first (as `sync::define_grads` gives them).
        named
            .iter()
            .map(|(_, p)| (p * 0.0).sum(Kind::Float))
            .reduce(|a, b| a + b)
            .unwrap()
            .backward();
        let grads = Tensor::zeros([u.padded], (Kind::Float, Device::Cpu));
        u.bind_grads(&grads, &params).unwrap();
        let loss = named[0].1.sum(Kind::Float) + (&named[2].1 * 4.0).sum(Kind::Float);
        loss.backward();
        assert_eq!(
            floats(&grads),
            [1., 1., 1., 1., 1., 0., 0., 0., 0., 0., 0., 0., 4., 4., 0.]
        );
        loss_twice(&named);
        assert_eq!(floats(&u.shard(&grads, 2).unwrap()), [0., 0., 8., 8., 0.]);
    }

    #[test]
    fn a_decoder_bound_to_its_flat_buffers_computes_from_them() {
        tch::manual_seed(3);
        let model = tiny_decoder(true);
        let named: Vec<(String, Tensor)> = model.vs.variables().into_iter().collect();
        tch::no_grad(|| {
            for (_, t) in &named {
                t.shallow_clone().copy_(&(t.randn_like() * 0.1));
            }
        });
        let ids = Tensor::from_slice(&[3i64, 17, 99, 5]).unsqueeze(0);
        let logits = |m: &Decoder| tch::no_grad(|| m.logits(&m.forward_prefix(&ids).0));
        let before = logits(&model);
        let layout = FlatLayout::new(&named, 2).unwrap();
        // What a rank would gather into each buffer: the values, flat.
        let gathered: Vec<Tensor> = layout
            .units
            .iter()
            .map(|u| u.flatten(&u.resolve(&named).unwrap()).unwrap())
            .collect();
        let flats: Vec<Tensor> = layout
            .units
            .iter()
            .map(|u| {
                let flat = Tensor::zeros([u.padded], (Kind::Float, Device::Cpu));
                u.bind(&flat, &u.resolve(&named).unwrap()).unwrap();
                flat
            })
            .collect();
        assert!(logits(&model).equal(&before));
        // Emptied buffers empty the model (the final norm's weight is 0: so is every logit)…
        for f in &flats {
            let _ = f.shallow_clone().zero_();
        }
        assert_eq!(logits(&model).abs().max().double_value(&[]), 0.0);
        // …and the gathered values written into them are the model again, bit for bit.
        for (f, g) in flats.iter().zip(&gathered) {
            f.shallow_clone().copy_(g);
        }
        assert!(logits(&model).equal(&before));
    }

    /// The same loss's backward again: gradients accumulate.
    fn loss_twice(named: &[(String, Tensor)]) {
        (named[0].1.sum(Kind::Float) + (&named[2].1 * 4.0).sum(Kind::Float)).backward();
    }

    #[test]
    fn what_does_not_fit_the_layout_is_refused_with_its_name() {
        assert_eq!(
            FlatLayout::from_shapes(&three(), 0),
            Err(FlatError::NoRanks)
        );
        let layout = FlatLayout::from_shapes(&three(), 3).unwrap();
        let u = &layout.units[0];
        let mut named = three_tensors();
        named.pop();
        assert_eq!(
            u.resolve(&named).unwrap_err().to_string(),
            "parameter `model.layers.0.c`: not among the 2 tensors given"
        );
        named.push((
            "model.layers.0.c".into(),
            Tensor::zeros([2], (Kind::Float, Device::Cpu)),
        ));
        assert_eq!(
            u.resolve(&named).unwrap_err().to_string(),
            "parameter `model.layers.0.c`: shape [2], the layout's is [2, 1]"
        );
        let named = three_tensors();
        let tensors = u.resolve(&named).unwrap();
        assert_eq!(
            u.views(&Tensor::zeros([14], (Kind::Float, Device::Cpu)))
                .unwrap_err()
                .to_string(),
            "unit of layer 0: a flat buffer of shape [14], expected [15] (its 14 elements padded to a multiple of 3)"
        );
        assert_eq!(
            u.bind(&Tensor::zeros([15], (Kind::Double, Device::Cpu)), &tensors)
                .unwrap_err()
                .to_string(),
            "unit of layer 0: a flat buffer of Double on Cpu for parameters of Float on Cpu"
        );
        let mixed = [tensors[0], tensors[1], &tensors[2].to_kind(Kind::Double)];
        assert_eq!(
            u.flatten(&mixed).unwrap_err().to_string(),
            "unit of layer 0: `model.layers.0.a` is Float on Cpu and `model.layers.0.c` Double on Cpu: a flat buffer has one dtype and device"
        );
        assert_eq!(
            u.flatten(&tensors[..2]).unwrap_err().to_string(),
            "unit of layer 0: 2 tensors given for its 3 parameters"
        );
        let twice = shapes(&[("model.norm.weight", &[2]), ("model.norm.weight", &[2])]);
        assert_eq!(
            FlatLayout::from_shapes(&twice, 2).unwrap_err().to_string(),
            "parameter `model.norm.weight`: named twice"
        );
    }
}
