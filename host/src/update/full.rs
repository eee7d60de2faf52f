//! One micro-batch's forward and backward with the weights sharded across the ranks
//! (`[[models]] shard = "full"`, ZeRO-3 / FSDP; docs/distributed.md, "Sharding").
//!
//! The decoder's layers run one at a time, each with its unit's weights all-gathered
//! just before and freed just after ([`ShardedWeights`]). The forward runs without
//! grad and keeps each layer's input only (activation checkpointing at FSDP's unit);
//! the loss is taken on the last layer's output, and the backward walks the layers from
//! the last: it gathers a layer's weights again, recomputes the layer's forward with
//! grad from its saved input, back-propagates the gradient of its output, and
//! reduce-scatters the layer's weight gradient into this rank's shard (the optimizer's
//! current agent's), so a whole layer's weights and gradient exist on a rank for one
//! layer at a time, plus the next layer's, whose gather is started (prefetched) before
//! this one computes so that it arrives meanwhile. The outer unit (embeddings, final
//! norm, head) stays whole for the update, its gradient reduced once per agent, as with
//! `shard = "optimizer"`.
//!
//! Every rank of the group runs the same collectives in the same order: a rank with
//! fewer micro-batches than another runs idle ones ([`idle_micro_batch`]), which gather
//! and reduce what a real one does, with zero gradients.

use super::{
    error::TrainError,
    flat::{FlatUnit, UnitKind},
    gathered::ShardedWeights,
    sharded::ShardedAdamW,
    sync::Collective,
};
use crate::model::{Decoder, LayerPrefix, LayerTables, PassPlan, ResponseHidden, lora::RouteState};
use tch::{Kind, Tensor};

/// Where a layer's weight gradient goes: reduced into the optimizer's shard (the
/// weights are trained), or nowhere (a LoRA model's frozen base: the adapters, whole on
/// every rank, accumulate their gradients as without sharding).
pub(crate) enum LayerGrads<'a> {
    Reduce(&'a mut ShardedAdamW),
    Frozen,
}

/// The units of the decoder's layers, in layer order, and the outer unit.
pub(crate) struct Units {
    pub layers: Vec<usize>,
    pub outer: usize,
}

impl Units {
    pub fn of(weights: &ShardedWeights, model: &Decoder) -> Result<Units, TrainError> {
        let missing = |kind: UnitKind| TrainError::State {
            name: "weights".into(),
            message: format!("the sharded weights have no {kind}"),
        };
        let layers = (0..model.num_layers())
            .map(|i| {
                weights
                    .unit_index(UnitKind::Layer(i))
                    .ok_or_else(|| missing(UnitKind::Layer(i)))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let outer = weights
            .unit_index(UnitKind::Outer)
            .ok_or_else(|| missing(UnitKind::Outer))?;
        Ok(Units { layers, outer })
    }
}

/// A pass's hidden states between two layers: the rows', and the shared prefixes' of a
/// packed pass.
struct States {
    rows: Tensor,
    prefixes: Option<Tensor>,
}

/// The tables of a pass's rows and of its prefixes.
struct Tables<'a> {
    rows: LayerTables<'a>,
    prefixes: Option<(LayerTables<'a>, &'a [(i64, i64)])>,
}

impl<'a> Tables<'a> {
    fn of(model: &Decoder, plan: &'a PassPlan) -> Tables<'a> {
        Tables {
            rows: model.tables(&plan.rows.positions, &plan.rows.mask),
            prefixes: plan
                .prefixes
                .as_ref()
                .map(|(p, spans)| (model.tables(&p.positions, &p.mask), spans.as_slice())),
        }
    }
}

/// Layer `i` over a pass's states: the prefixes first (their keys and values), then
/// the rows continuing them.
fn layer(model: &Decoder, i: usize, x: &States, tables: &Tables, route: &RouteState) -> States {
    match (&x.prefixes, &tables.prefixes) {
        (Some(xp), Some((pt, spans))) => {
            let (prefixes, kv) = model.layer(i, xp, pt, route, None);
            let (rows, _) = model.layer(
                i,
                &x.rows,
                &tables.rows,
                route,
                Some(LayerPrefix { kv: &kv, spans }),
            );
            States {
                rows,
                prefixes: Some(prefixes),
            }
        }
        _ => States {
            rows: model.layer(i, &x.rows, &tables.rows, route, None).0,
            prefixes: None,
        },
    }
}

/// The response states of `plan` with the weights sharded, and what the backward
/// needs: each layer's saved input and the last layer's output as a leaf.
pub(crate) struct FullForward {
    pub hidden: ResponseHidden,
    saved: Vec<States>,
    top: Tensor,
}

/// The forward of `plan`, layer by layer (no grad), then the final norm with grad on
/// the last layer's output (a leaf): see the module's documentation.
pub(crate) fn forward(
    model: &Decoder,
    plan: &PassPlan,
    weights: &mut ShardedWeights,
    units: &Units,
    sync: &mut dyn Collective,
) -> Result<FullForward, TrainError> {
    weights.gather(sync, units.outer)?;
    let tables = Tables::of(model, plan);
    let mut saved = Vec::with_capacity(units.layers.len());
    let mut x = {
        let _guard = tch::no_grad_guard();
        States {
            rows: model.embed(&plan.rows.ids),
            prefixes: plan.prefixes.as_ref().map(|(p, _)| model.embed(&p.ids)),
        }
    };
    for (i, &u) in units.layers.iter().enumerate() {
        weights.gather_then_prefetch(sync, u, units.layers.get(i + 1).copied())?;
        let next = {
            let _guard = tch::no_grad_guard();
            let route = model.routing();
            layer(model, i, &x, &tables, &route)
        };
        weights.release(u);
        saved.push(std::mem::replace(&mut x, next));
    }
    let top = x.rows.detach().set_requires_grad(true);
    let hidden = plan.read(&model.final_norm(&top));
    Ok(FullForward { hidden, saved, top })
}

/// The backward of [`forward`]'s pass, given the gradient the loss left on its
/// response states (`None`: nothing reached them; the collectives still run): through
/// the final norm, then layer by layer (gather, recompute, back-propagate, reduce),
/// then into the embeddings.
#[allow(clippy::too_many_arguments)]
pub(crate) fn backward(
    model: &Decoder,
    plan: &PassPlan,
    pass: FullForward,
    grad: Option<Tensor>,
    weights: &mut ShardedWeights,
    units: &Units,
    sync: &mut dyn Collective,
    sink: &mut LayerGrads,
) -> Result<(), TrainError> {
    let FullForward {
        hidden,
        mut saved,
        top,
    } = pass;
    let mut g_rows = match grad {
        Some(grad) => {
            (&hidden.hidden * grad).sum(Kind::Float).f_backward()?;
            let g = top.grad();
            g.defined().then_some(g)
        }
        None => None,
    };
    drop(hidden);
    let mut g_prefixes: Option<Tensor> = None;
    let tables = Tables::of(model, plan);
    for (i, &u) in units.layers.iter().enumerate().rev() {
        let input = saved.pop().expect("one saved input per layer");
        let (unit, params) = gather_for_backward(weights, units, sync, i)?;
        let param_grads = match g_rows.take() {
            None => {
                g_prefixes = None;
                None
            }
            Some(g) => {
                let leaves = States {
                    rows: input.rows.set_requires_grad(true),
                    prefixes: input.prefixes.map(|t| t.set_requires_grad(true)),
                };
                let out = {
                    let route = model.routing();
                    layer(model, i, &leaves, &tables, &route)
                };
                let mut surrogate = (&out.rows * &g).sum(Kind::Float);
                if let (Some(o), Some(gp)) = (&out.prefixes, &g_prefixes) {
                    surrogate += (o * gp).sum(Kind::Float);
                }
                match sink {
                    LayerGrads::Reduce(_) => {
                        let mut inputs: Vec<&Tensor> = vec![&leaves.rows];
                        inputs.extend(leaves.prefixes.as_ref());
                        inputs.extend(params.iter());
                        let grads = Tensor::f_run_backward(&[surrogate], &inputs, false, false)?;
                        let mut grads = grads.into_iter();
                        g_rows = grads.next().filter(Tensor::defined);
                        if leaves.prefixes.is_some() {
                            g_prefixes = grads.next().filter(Tensor::defined);
                        }
                        Some(grads.collect::<Vec<_>>())
                    }
                    LayerGrads::Frozen => {
                        surrogate.f_backward()?;
                        g_rows = defined_grad(&leaves.rows);
                        g_prefixes = leaves.prefixes.as_ref().and_then(defined_grad);
                        None
                    }
                }
            }
        };
        if let LayerGrads::Reduce(optimizer) = sink {
            let flat = flat_grads(&unit, &params, param_grads.as_deref())?;
            optimizer.add_unit_grad(sync, u, &flat)?;
        }
        drop(params);
        weights.release(u);
    }
    // Into the embeddings (the outer unit, whole): their gradient is held, as the head's
    // and the final norm's, until the agent's end.
    if let (LayerGrads::Reduce(_), Some(g)) = (&sink, &g_rows) {
        let mut surrogate = (model.embed(&plan.rows.ids) * g).sum(Kind::Float);
        if let (Some((p, _)), Some(gp)) = (&plan.prefixes, &g_prefixes) {
            surrogate += (model.embed(&p.ids) * gp).sum(Kind::Float);
        }
        surrogate.f_backward()?;
    }
    Ok(())
}

/// `t`'s gradient, if it has one.
fn defined_grad(t: &Tensor) -> Option<Tensor> {
    let g = t.grad();
    g.defined().then_some(g)
}

/// What a micro-batch's collectives are, with nothing to compute: a rank with fewer
/// micro-batches than another runs these so that every rank's collectives pair up.
pub(crate) fn idle_micro_batch(
    weights: &mut ShardedWeights,
    units: &Units,
    sync: &mut dyn Collective,
    sink: &mut LayerGrads,
) -> Result<(), TrainError> {
    weights.gather(sync, units.outer)?;
    // The collectives of `forward` and `backward`, in their order.
    for (i, &u) in units.layers.iter().enumerate() {
        weights.gather_then_prefetch(sync, u, units.layers.get(i + 1).copied())?;
        weights.release(u);
    }
    for (i, &u) in units.layers.iter().enumerate().rev() {
        let (unit, params) = gather_for_backward(weights, units, sync, i)?;
        if let LayerGrads::Reduce(optimizer) = sink {
            let flat = flat_grads(&unit, &params, None)?;
            optimizer.add_unit_grad(sync, u, &flat)?;
        }
        weights.release(u);
    }
    Ok(())
}

/// Layer `i`'s unit gathered for the backward, the layer below's gather started: the
/// unit's layout and its parameters.
fn gather_for_backward(
    weights: &mut ShardedWeights,
    units: &Units,
    sync: &mut dyn Collective,
    i: usize,
) -> Result<(FlatUnit, Vec<Tensor>), TrainError> {
    let u = units.layers[i];
    let below = i.checked_sub(1).map(|j| units.layers[j]);
    weights.gather_then_prefetch(sync, u, below)?;
    let params = weights
        .unit_params(u)
        .into_iter()
        .map(Tensor::shallow_clone)
        .collect();
    Ok((weights.unit(u).clone(), params))
}

/// A unit's flat gradient buffer from its parameters' gradients (in its order; an
/// undefined one, or none at all, is zeros).
fn flat_grads(
    unit: &FlatUnit,
    params: &[Tensor],
    grads: Option<&[Tensor]>,
) -> Result<Tensor, TrainError> {
    let refs: Vec<&Tensor> = params.iter().collect();
    let (kind, device) = unit.common(&refs)?;
    let _guard = tch::no_grad_guard();
    let flat = Tensor::zeros([unit.padded], (kind, device));
    for (p, g) in unit.params.iter().zip(grads.unwrap_or(&[])) {
        if g.defined() {
            flat.narrow(0, p.offset, p.numel)
                .copy_(&g.reshape([-1]).to_kind(kind));
        }
    }
    Ok(flat)
}
