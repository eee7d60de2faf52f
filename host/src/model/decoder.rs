//! One decoder for the Llama family (docs/models.md): GQA attention with rotate-half RoPE,
//! SwiGLU MLP, RMSNorm, optional q/k/v bias (Qwen2) and per-head q/k norm (Qwen3),
//! tied or untied `lm_head`. Weight names are the HF names.

use super::{
    config::ModelConfig,
    error::Result,
    kv_cache::KvCache,
    lora::{self, AdapterSlot, LoraPair, RouteState},
    rope::{self, Rope},
};
use std::sync::Mutex;
use tch::{Device, Kind, Tensor, nn};

pub(super) struct Linear {
    pub(super) weight: Tensor,
    pub(super) bias: Option<Tensor>,
    /// LoRA pairs by adapter slot (`None` where that adapter does not target this).
    pub(super) lora: Vec<Option<LoraPair>>,
}

impl Linear {
    fn new(p: nn::Path, out_dim: i64, in_dim: i64, bias: bool) -> Self {
        let weight = p.var("weight", &[out_dim, in_dim], nn::Init::Const(0.0));
        let bias = bias.then(|| p.var("bias", &[out_dim], nn::Init::Const(0.0)));
        Self {
            weight,
            bias,
            lora: Vec::new(),
        }
    }

    fn forward(&self, x: &Tensor, route: &RouteState) -> Tensor {
        let Some(rows) = route.product_rows else {
            return self.forward_all(x, route);
        };
        match route.routing {
            // Per-row routing gathers each adapter's rows: only the base product can be
            // cut (the deltas depend on each adapter's row count, documented).
            lora::Routing::Groups(_) if !self.lora.is_empty() => {
                let y = in_row_blocks(x, rows, |x| x.linear(&self.weight, self.bias.as_ref()));
                lora::apply(y, x, &self.lora, route)
            }
            _ => in_row_blocks(x, rows, |x| self.forward_all(x, route)),
        }
    }

    /// The projection of all rows of `x` in one product (and one per adapter delta).
    fn forward_all(&self, x: &Tensor, route: &RouteState) -> Tensor {
        let y = x.linear(&self.weight, self.bias.as_ref());
        if self.lora.is_empty() {
            return y;
        }
        lora::apply(y, x, &self.lora, route)
    }
}

/// `f` (a row-wise map [.., K] -> [.., N], such as a projection) over the rows of `x`
/// computed in blocks of exactly `rows` rows: row blocks 0, `rows`, 2·`rows`, ..., the
/// last block ending at the last row (it overlaps the one before; only its new rows
/// are kept), and fewer rows than `rows` padded with copies of the first. So every
/// product has the same shape whatever the number of rows, and a row's result depends
/// on its own values alone: libtorch's CPU GEMM (MKL) picks its kernel and how it splits
/// the reduction over threads by the product's shape, and a row's last bits change with
/// it (measured on AVX-512 with 2 threads: `K = 1536` products of 57–192 rows split the
/// sum over K and differ from those of 16–56 or 256+ rows; docs/training.md).
pub fn in_row_blocks(x: &Tensor, rows: i64, f: impl Fn(&Tensor) -> Tensor) -> Tensor {
    let size = x.size();
    let k = *size.last().expect("rows of a last dimension");
    let m = x.numel() as i64 / k.max(1);
    if m == rows {
        return f(x);
    }
    let flat = x.reshape([m, k]);
    let y = if m < rows {
        let fill = flat.narrow(0, 0, 1).expand([rows - m, k], false);
        f(&Tensor::cat(&[flat, fill], 0)).narrow(0, 0, m)
    } else {
        let mut parts = Vec::with_capacity((m / rows + 1) as usize);
        let mut start = 0;
        while start < m {
            if start + rows <= m {
                parts.push(f(&flat.narrow(0, start, rows)));
            } else {
                let fresh = m - start;
                parts.push(f(&flat.narrow(0, m - rows, rows)).narrow(0, rows - fresh, fresh));
            }
            start += rows;
        }
        Tensor::cat(&parts, 0)
    };
    let n = *y.size().last().expect("a row-wise result");
    let mut out = size;
    *out.last_mut().expect("rows of a last dimension") = n;
    y.reshape(out)
}

struct RmsNorm {
    weight: Tensor,
    eps: f64,
}

impl RmsNorm {
    fn new(p: nn::Path, dim: i64, eps: f64) -> Self {
        Self {
            weight: p.var("weight", &[dim], nn::Init::Const(1.0)),
            eps,
        }
    }

    /// As transformers: normalize in float32 (float64 stays float64, so gradients can
    /// be checked by finite differences), scale in the input dtype.
    ///
    /// On a GPU, libtorch's fused kernel instead (one launch instead of eight): it
    /// scales in float32 and rounds once, where transformers rounds the normalized
    /// values to the input dtype before scaling (the difference in bf16 is in
    /// docs/performance.md). The CPU keeps the formula its parity tests pin.
    fn forward(&self, x: &Tensor) -> Tensor {
        if fused_kernels_on(x.device()) && x.kind() != Kind::Double {
            return fused_rms_norm(x, &self.weight, self.eps);
        }
        let kind = x.kind();
        let compute = if kind == Kind::Double {
            Kind::Double
        } else {
            Kind::Float
        };
        let x32 = x.to_kind(compute);
        let variance = x32.pow_tensor_scalar(2).mean_dim(-1, true, compute);
        let normed = x32 * (variance + self.eps).rsqrt();
        &self.weight * normed.to_kind(kind)
    }
}

/// Whether a GPU runs the fused kernels ([`set_fused_kernels`]).
static FUSED_KERNELS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// On a GPU, run the fused kernels (the default) or the CPU's eager formulas: for
/// `drmas bench generate --eager`, which measures what fusing buys and compares the
/// tokens of both. The CPU always runs the eager formulas.
pub fn set_fused_kernels(on: bool) {
    FUSED_KERNELS.store(on, std::sync::atomic::Ordering::Relaxed);
}

/// Whether work on `device` runs the fused kernels ([`set_fused_kernels`]).
pub fn fused_kernels_on(device: Device) -> bool {
    device.is_cuda() && FUSED_KERNELS.load(std::sync::atomic::Ordering::Relaxed)
}

/// RMSNorm of the last dimension of `x` scaled by `weight`, in one fused kernel where
/// the device has one.
fn fused_rms_norm(x: &Tensor, weight: &Tensor, eps: f64) -> Tensor {
    let dim = *x.size().last().expect("a last dimension");
    x.rms_norm([dim], Some(weight), eps)
}

struct Attention {
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    q_norm: Option<RmsNorm>,
    k_norm: Option<RmsNorm>,
    heads: i64,
    kv_heads: i64,
    head_dim: i64,
}

struct Mlp {
    gate: Linear,
    up: Linear,
    down: Linear,
}

struct Layer {
    input_norm: RmsNorm,
    attn: Attention,
    post_norm: RmsNorm,
    mlp: Mlp,
}

/// One layer's projections under its HF prefix `p`: (module path, short name, the
/// projection).
fn layer_projections<'a>(
    p: &str,
    [q, k, v, o]: [&'a mut Linear; 4],
    mlp: &'a mut Mlp,
) -> Vec<(String, &'static str, &'a mut Linear)> {
    let Mlp { gate, up, down } = mlp;
    [
        (q, "q_proj", "self_attn"),
        (k, "k_proj", "self_attn"),
        (v, "v_proj", "self_attn"),
        (o, "o_proj", "self_attn"),
        (gate, "gate_proj", "mlp"),
        (up, "up_proj", "mlp"),
        (down, "down_proj", "mlp"),
    ]
    .into_iter()
    .map(|(lin, short, group)| (format!("{p}.{group}.{short}"), short, lin))
    .collect()
}

/// The causal language model. Its weights live in `vs` (trainable variables).
pub struct Decoder {
    pub config: ModelConfig,
    pub vs: nn::VarStore,
    embed: Tensor,
    layers: Vec<Layer>,
    norm: RmsNorm,
    /// Shares storage with `embed` when the embeddings are tied.
    lm_head: Tensor,
    rope: Rope,
    /// LoRA adapters on the frozen weights, by slot.
    pub(super) adapters: Vec<AdapterSlot>,
    /// The mode of the next forwards: which adapter, training or not (`mode.rs`: set
    /// through a guard that puts it back).
    route: Mutex<RouteState>,
}

impl Decoder {
    /// A decoder with zero weights on `device` in `kind`; load a checkpoint into it.
    pub fn new(config: ModelConfig, device: Device, kind: Kind) -> Self {
        let mut vs = nn::VarStore::new(device);
        let c = &config;
        let root = vs.root();
        let model = &root / "model";
        let embed = (&model / "embed_tokens").var(
            "weight",
            &[c.vocab_size, c.hidden_size],
            nn::Init::Const(0.0),
        );
        let layers = (0..c.num_layers)
            .map(|i| {
                let p = &model / "layers" / i;
                let a = &p / "self_attn";
                let m = &p / "mlp";
                Layer {
                    input_norm: RmsNorm::new(&p / "input_layernorm", c.hidden_size, c.rms_norm_eps),
                    attn: Attention {
                        q: Linear::new(
                            &a / "q_proj",
                            c.num_heads * c.head_dim,
                            c.hidden_size,
                            c.qkv_bias,
                        ),
                        k: Linear::new(
                            &a / "k_proj",
                            c.num_kv_heads * c.head_dim,
                            c.hidden_size,
                            c.qkv_bias,
                        ),
                        v: Linear::new(
                            &a / "v_proj",
                            c.num_kv_heads * c.head_dim,
                            c.hidden_size,
                            c.qkv_bias,
                        ),
                        o: Linear::new(
                            &a / "o_proj",
                            c.hidden_size,
                            c.num_heads * c.head_dim,
                            c.o_bias,
                        ),
                        q_norm: c
                            .qk_norm
                            .then(|| RmsNorm::new(&a / "q_norm", c.head_dim, c.rms_norm_eps)),
                        k_norm: c
                            .qk_norm
                            .then(|| RmsNorm::new(&a / "k_norm", c.head_dim, c.rms_norm_eps)),
                        heads: c.num_heads,
                        kv_heads: c.num_kv_heads,
                        head_dim: c.head_dim,
                    },
                    post_norm: RmsNorm::new(
                        &p / "post_attention_layernorm",
                        c.hidden_size,
                        c.rms_norm_eps,
                    ),
                    mlp: Mlp {
                        gate: Linear::new(
                            &m / "gate_proj",
                            c.intermediate_size,
                            c.hidden_size,
                            false,
                        ),
                        up: Linear::new(&m / "up_proj", c.intermediate_size, c.hidden_size, false),
                        down: Linear::new(
                            &m / "down_proj",
                            c.hidden_size,
                            c.intermediate_size,
                            false,
                        ),
                    },
                }
            })
            .collect();
        let norm = RmsNorm::new(&model / "norm", c.hidden_size, c.rms_norm_eps);
        let lm_head = if c.tie_word_embeddings {
            embed.shallow_clone()
        } else {
            (&root / "lm_head").var(
                "weight",
                &[c.vocab_size, c.hidden_size],
                nn::Init::Const(0.0),
            )
        };
        let rope = Rope::new(
            c.head_dim,
            c.rope_theta,
            c.max_position_embeddings.max(1),
            device,
            kind,
        );
        // In place (`set_data`): the handles above see the converted weights.
        vs.set_kind(kind);
        Self {
            config,
            vs,
            embed,
            layers,
            norm,
            lm_head,
            rope,
            adapters: Vec::new(),
            route: Mutex::new(RouteState::default()),
        }
    }

    /// The seven projections of every layer: (HF module path, short name, the
    /// projection).
    pub(super) fn projections_mut(&mut self) -> Vec<(String, &'static str, &mut Linear)> {
        let mut out = Vec::new();
        for (i, l) in self.layers.iter_mut().enumerate() {
            let p = format!("model.layers.{i}");
            let Attention { q, k, v, o, .. } = &mut l.attn;
            out.extend(layer_projections(&p, [q, k, v, o], &mut l.mlp));
        }
        out
    }

    pub fn device(&self) -> Device {
        self.vs.device()
    }

    /// Moves every weight to `device`. The weights keep their identity (their data is
    /// replaced), so handles to them — an optimizer's — stay valid.
    pub fn to_device(&mut self, device: Device) {
        if device == self.device() {
            return;
        }
        let kind = self.kind();
        self.vs.set_device(device);
        for slot in &mut self.adapters {
            for (_, t) in &mut slot.params {
                // In place: the projections' and the optimizer's handles share it.
                t.set_data(&t.to_device(device));
            }
        }
        let c = &self.config;
        self.rope = Rope::new(
            c.head_dim,
            c.rope_theta,
            c.max_position_embeddings.max(1),
            device,
            kind,
        );
    }

    pub(super) fn route_state(&self) -> std::sync::MutexGuard<'_, RouteState> {
        // Only the owning thread sets it; a poisoned lock still holds a valid routing.
        self.route.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn kind(&self) -> Kind {
        self.embed.kind()
    }

    /// An empty KV cache for `batch` rows and up to `capacity` tokens.
    pub fn new_cache(&self, batch: i64, capacity: i64) -> KvCache {
        let c = &self.config;
        KvCache::new(
            c.num_layers,
            batch,
            c.num_kv_heads,
            capacity,
            c.head_dim,
            (self.kind(), self.device()),
        )
    }

    /// The number of positions the model has (`max_position_embeddings`).
    pub fn context(&self) -> i64 {
        self.rope.max_positions()
    }

    /// Refuses `tokens` positions where the model has fewer (see
    /// [`ModelConfig::check_context`]).
    pub fn check_context(&self, what: impl FnOnce() -> String, tokens: u64) -> Result<()> {
        self.config.check_context(what, tokens)
    }

    /// Positions past the context have no RoPE angle; a caller that did not check the
    /// lengths first ([`Decoder::check_context`]) gets a panic that says so, never
    /// logits computed at a clamped position.
    fn assert_positions(&self, positions: &Tensor) {
        if positions.numel() == 0 {
            return;
        }
        let last = positions.max().int64_value(&[]);
        assert!(
            last < self.context(),
            "position {last} is past the model's context of {} tokens (max_position_embeddings)",
            self.context()
        );
    }

    /// Final hidden states [B, T, H] for `ids` [B, T] at `positions` [B, T].
    ///
    /// `mask` is a boolean [B, 1, T, S] (true = may attend) over all S keys: the cached
    /// ones followed by these T. With a cache, the new keys and values are appended.
    pub fn forward(
        &self,
        ids: &Tensor,
        positions: &Tensor,
        mask: &Tensor,
        cache: Option<&mut KvCache>,
    ) -> Tensor {
        self.assert_positions(positions);
        self.forward_unchecked(ids, positions, mask, cache)
    }

    /// [`Decoder::forward`] at `positions` the caller has bounded on the host by
    /// `max_position` (the decode loop clamps them): checked against the context
    /// without reading the positions back from the device, which on a GPU would wait
    /// for every kernel queued before.
    pub fn forward_bounded(
        &self,
        ids: &Tensor,
        positions: &Tensor,
        max_position: i64,
        mask: &Tensor,
        cache: Option<&mut KvCache>,
    ) -> Tensor {
        assert!(
            max_position < self.context(),
            "position {max_position} is past the model's context of {} tokens (max_position_embeddings)",
            self.context()
        );
        self.forward_unchecked(ids, positions, mask, cache)
    }

    fn forward_unchecked(
        &self,
        ids: &Tensor,
        positions: &Tensor,
        mask: &Tensor,
        mut cache: Option<&mut KvCache>,
    ) -> Tensor {
        let route = self.route_state();
        let (cos, sin) = self.rope.tables(positions);
        let mut x = Tensor::embedding(&self.embed, ids, -1, false, false);
        for (i, layer) in self.layers.iter().enumerate() {
            let h = layer.attn.forward(
                &layer.input_norm.forward(&x),
                &cos,
                &sin,
                mask,
                (i, cache.as_deref_mut()),
                &route,
            );
            // Out of place: the norms keep `x` for the backward pass.
            x = &x + h;
            let h = layer.mlp.forward(&layer.post_norm.forward(&x), &route);
            x = &x + h;
        }
        if let Some(cache) = cache {
            cache.advance(ids.size()[1]);
        }
        self.norm.forward(&x)
    }

    /// Forward over one shared prefix `ids` [1, P] (positions 0..P): its final hidden
    /// states [1, P, H] and every layer's keys and values [1, kv, P, D], with grad, for
    /// [`Decoder::forward_continuation`].
    pub fn forward_prefix(&self, ids: &Tensor) -> (Tensor, Vec<(Tensor, Tensor)>) {
        let p = ids.size()[1];
        let device = ids.device();
        let positions = Tensor::arange(p, (Kind::Int64, device)).unsqueeze(0);
        let mask = Tensor::ones([p, p], (Kind::Bool, device))
            .tril(0)
            .view([1, 1, p, p]);
        self.forward_with_prefix(ids, &positions, &mask, None)
    }

    /// Forward over K prefixes `ids` [K, P] (left-padded: `positions` and the causal
    /// `mask` [K, 1, P, P] as for any prefill): their final hidden states and every
    /// layer's keys and values [K, kv, P, D], with grad, for
    /// [`Decoder::forward_continuations`].
    pub fn forward_prefixes(
        &self,
        ids: &Tensor,
        positions: &Tensor,
        mask: &Tensor,
    ) -> (Tensor, Vec<(Tensor, Tensor)>) {
        self.forward_with_prefix(ids, positions, mask, None)
    }

    /// Forward of rows `ids` [G, R] that all continue one prefix whose keys and values
    /// are `prefix` (from [`Decoder::forward_prefix`]): every row attends to the prefix's
    /// keys (shared, not copied per row) and then to its own. `mask` is [G, 1, R, P + R].
    /// The prefix's keys and values keep their grad, so the prefix is computed and
    /// back-propagated once for all G rows.
    pub fn forward_continuation(
        &self,
        ids: &Tensor,
        positions: &Tensor,
        mask: &Tensor,
        prefix: &[(Tensor, Tensor)],
    ) -> Tensor {
        let rows = ids.size()[0];
        let spans = [(0, rows)];
        let prefixes = Prefixes {
            kv: prefix,
            spans: &spans,
        };
        self.forward_with_prefix(ids, positions, mask, Some(prefixes))
            .0
    }

    /// [`Decoder::forward_continuation`] for rows that continue K prefixes (from
    /// [`Decoder::forward_prefixes`]): `spans[k]` = (first row, rows) of the rows that
    /// continue prefix k, consecutive. The projections run over all rows at once; only
    /// the attention is per prefix, each span over its own prefix's keys.
    pub fn forward_continuations(
        &self,
        ids: &Tensor,
        positions: &Tensor,
        mask: &Tensor,
        prefixes: &[(Tensor, Tensor)],
        spans: &[(i64, i64)],
    ) -> Tensor {
        let prefixes = Prefixes {
            kv: prefixes,
            spans,
        };
        self.forward_with_prefix(ids, positions, mask, Some(prefixes))
            .0
    }

    fn forward_with_prefix(
        &self,
        ids: &Tensor,
        positions: &Tensor,
        mask: &Tensor,
        prefix: Option<Prefixes>,
    ) -> (Tensor, Vec<(Tensor, Tensor)>) {
        let tables = self.tables(positions, mask);
        let route = self.routing();
        let mut x = self.embed(ids);
        let mut kvs = Vec::with_capacity(self.layers.len());
        for i in 0..self.layers.len() {
            let (h, kv) = self.layer(
                i,
                &x,
                &tables,
                &route,
                prefix.map(|p| LayerPrefix {
                    kv: &p.kv[i],
                    spans: p.spans,
                }),
            );
            kvs.push(kv);
            x = h;
        }
        (self.final_norm(&x), kvs)
    }

    /// What every layer of one training pass over `positions` with `mask` shares, for
    /// [`Decoder::layer`]: the RoPE tables and the mask.
    pub fn tables<'a>(&self, positions: &Tensor, mask: &'a Tensor) -> LayerTables<'a> {
        self.assert_positions(positions);
        let (cos, sin) = self.rope.tables(positions);
        LayerTables { cos, sin, mask }
    }

    /// The adapters' routing and mode for the layers that follow, held until dropped
    /// (it is what a [`super::ModeGuard`] set).
    pub fn routing(&self) -> std::sync::MutexGuard<'_, RouteState> {
        self.route_state()
    }

    /// The input embeddings of `ids`: the hidden states before layer 0.
    pub fn embed(&self, ids: &Tensor) -> Tensor {
        Tensor::embedding(&self.embed, ids, -1, false, false)
    }

    /// Layer `i` of a training pass (no KV cache): its output hidden states, and its
    /// keys and values (after RoPE) for rows that continue them. `prefix`: the keys
    /// and values this layer's rows continue. The forwards above are these layers in
    /// turn; sharded training runs them one by one, each with its weights gathered just
    /// before (ARCHITECTURE.md, "update").
    pub fn layer(
        &self,
        i: usize,
        x: &Tensor,
        tables: &LayerTables,
        route: &RouteState,
        prefix: Option<LayerPrefix>,
    ) -> (Tensor, (Tensor, Tensor)) {
        let layer = &self.layers[i];
        let (h, kv) = layer.attn.forward_shared(
            &layer.input_norm.forward(x),
            &tables.cos,
            &tables.sin,
            tables.mask,
            prefix,
            route,
        );
        // Out of place: the norms keep `x` for the backward pass.
        let x = x + h;
        let h = layer.mlp.forward(&layer.post_norm.forward(&x), route);
        (&x + h, kv)
    }

    /// The final norm: the last layer's output into what the head reads.
    pub fn final_norm(&self, x: &Tensor) -> Tensor {
        self.norm.forward(x)
    }

    /// The number of decoder layers.
    pub fn num_layers(&self) -> usize {
        self.layers.len()
    }

    /// Logits [.., V] of hidden states [.., H].
    pub fn logits(&self, hidden: &Tensor) -> Tensor {
        hidden.linear::<Tensor>(&self.lm_head, None)
    }

    /// Logits [B, V] of a few rows' hidden states [B, H], as the sampler needs them
    /// each decode step: the head times the rows' transpose, which libtorch's CPU GEMM
    /// runs in about two thirds of the time of `linear` for 16–48 rows of a large
    /// vocabulary (measured, docs/performance.md). A strided view of the product.
    pub fn decode_logits(&self, hidden: &Tensor) -> Tensor {
        self.lm_head.matmul(&hidden.tr()).tr()
    }
}

/// Prefixes' keys and values per layer ([K, kv, P, D] each), and for prefix k the rows
/// (first, count) that continue it.
#[derive(Clone, Copy)]
struct Prefixes<'a> {
    kv: &'a [(Tensor, Tensor)],
    spans: &'a [(i64, i64)],
}

/// One layer's share of [`Prefixes`]: the keys and values [K, kv, P, D] of the K
/// prefixes its rows continue, and for prefix k the rows (first, count) continuing it.
#[derive(Clone, Copy)]
pub struct LayerPrefix<'a> {
    pub kv: &'a (Tensor, Tensor),
    pub spans: &'a [(i64, i64)],
}

/// See [`Decoder::tables`].
pub struct LayerTables<'a> {
    cos: Tensor,
    sin: Tensor,
    mask: &'a Tensor,
}

impl Attention {
    /// Queries [B, H, T, D], keys and values [B, kv, T, D] of `x` [B, T, H], after the
    /// q/k norms (Qwen3) and RoPE.
    fn qkv(
        &self,
        x: &Tensor,
        cos: &Tensor,
        sin: &Tensor,
        route: &RouteState,
    ) -> (Tensor, Tensor, Tensor) {
        let (b, t, _) = x.size3().expect("hidden states are [B, T, H]");
        let split = |y: Tensor, heads: i64| y.view([b, t, heads, self.head_dim]);
        let mut q = split(self.q.forward(x, route), self.heads);
        let mut k = split(self.k.forward(x, route), self.kv_heads);
        let v = split(self.v.forward(x, route), self.kv_heads).transpose(1, 2);
        if let (Some(qn), Some(kn)) = (&self.q_norm, &self.k_norm) {
            q = qn.forward(&q);
            k = kn.forward(&k);
        }
        let q = rope::apply(&q.transpose(1, 2), cos, sin);
        let k = rope::apply(&k.transpose(1, 2), cos, sin);
        (q, k, v)
    }

    /// `cache` is this layer's index and the KV cache to append to, if any.
    fn forward(
        &self,
        x: &Tensor,
        cos: &Tensor,
        sin: &Tensor,
        mask: &Tensor,
        cache: (usize, Option<&mut KvCache>),
        route: &RouteState,
    ) -> Tensor {
        let (layer, cache) = cache;
        let (b, t, _) = x.size3().expect("hidden states are [B, T, H]");
        let (q, k, v) = self.qkv(x, cos, sin, route);
        let groups = cache.as_ref().and_then(|c| c.groups().map(<[_]>::to_vec));
        let (k, v) = match cache {
            Some(cache) => cache.append(layer, &k, &v),
            None => (k, v),
        };
        let out = if t == 1 {
            match groups {
                // Each group of rows attends over its own key columns only (see
                // `AttentionGroup`): what a row computes is independent of its batch.
                Some(groups) => {
                    let s = k.size()[2];
                    let parts: Vec<Tensor> = groups
                        .iter()
                        .map(|g| {
                            let rows = |t: &Tensor| t.narrow(0, g.first, g.rows);
                            let keys = |t: &Tensor| rows(t).narrow(-2, g.key, s - g.key);
                            self.decode_attention(
                                &rows(&q),
                                &keys(&k),
                                &keys(&v),
                                &rows(mask).narrow(-1, g.key, s - g.key),
                            )
                        })
                        .collect();
                    Tensor::cat(&parts, 0)
                }
                None => self.decode_attention(&q, &k, &v, mask),
            }
        } else {
            Tensor::scaled_dot_product_attention(
                &q,
                &k,
                &v,
                Some(mask),
                0.0,
                false,
                1.0 / (self.head_dim as f64).sqrt(),
                self.heads != self.kv_heads,
            )
        };
        self.o.forward(
            &out.transpose(1, 2)
                .reshape([b, t, self.heads * self.head_dim]),
            route,
        )
    }
}

impl Attention {
    /// Attention of rows that may continue shared prefixes: the keys and values of
    /// prefix k [1, kv, P, D] (row k of the prefixes' tensors) are expanded, not copied,
    /// to the rows of its span. Returns the output and this call's own keys and values
    /// (after RoPE).
    fn forward_shared(
        &self,
        x: &Tensor,
        cos: &Tensor,
        sin: &Tensor,
        mask: &Tensor,
        prefix: Option<LayerPrefix>,
        route: &RouteState,
    ) -> (Tensor, (Tensor, Tensor)) {
        let (b, t, _) = x.size3().expect("hidden states are [B, T, H]");
        let (q, k, v) = self.qkv(x, cos, sin, route);
        let scale = 1.0 / (self.head_dim as f64).sqrt();
        let gqa = self.heads != self.kv_heads;
        let out = match prefix {
            Some(LayerPrefix {
                kv: (pk, pv),
                spans,
            }) => {
                let parts: Vec<Tensor> = spans
                    .iter()
                    .enumerate()
                    .map(|(g, &(first, rows))| {
                        let with_prefix = |p: &Tensor, own: &Tensor| {
                            let s = p.size();
                            let p = p
                                .narrow(0, g as i64, 1)
                                .expand([rows, s[1], s[2], s[3]], false);
                            Tensor::cat(&[p, own.narrow(0, first, rows)], 2)
                        };
                        Tensor::scaled_dot_product_attention(
                            &q.narrow(0, first, rows),
                            &with_prefix(pk, &k),
                            &with_prefix(pv, &v),
                            Some(&mask.narrow(0, first, rows)),
                            0.0,
                            false,
                            scale,
                            gqa,
                        )
                    })
                    .collect();
                if parts.len() == 1 {
                    parts.into_iter().next().expect("one part")
                } else {
                    Tensor::cat(&parts, 0)
                }
            }
            None => {
                Tensor::scaled_dot_product_attention(&q, &k, &v, Some(mask), 0.0, false, scale, gqa)
            }
        };
        let out = self.o.forward(
            &out.transpose(1, 2)
                .reshape([b, t, self.heads * self.head_dim]),
            route,
        );
        (out, (k, v))
    }

    /// Attention of one new token per row over the cache, without copying the cache:
    /// the query heads that share a kv head are grouped, so keys and values are read in
    /// place (SDPA would make them contiguous and repeat them per query head).
    fn decode_attention(&self, q: &Tensor, k: &Tensor, v: &Tensor, mask: &Tensor) -> Tensor {
        let (b, _, _, d) = q.size4().expect("q is [B, H, 1, D]");
        let group = self.heads / self.kv_heads;
        let q = q.reshape([b, self.kv_heads, group, d]) * (1.0 / (d as f64).sqrt());
        let scores = q.matmul(&k.transpose(-1, -2)); // [B, kv, group, S]
        let scores = scores.masked_fill(&mask.logical_not(), f64::NEG_INFINITY);
        let probs = scores.softmax(-1, scores.kind());
        probs.matmul(v).reshape([b, self.heads, 1, d])
    }
}

impl Mlp {
    fn forward(&self, x: &Tensor, route: &RouteState) -> Tensor {
        self.down.forward(
            &(self.gate.forward(x, route).silu() * self.up.forward(x, route)),
            route,
        )
    }
}

/// The attention mask for a prefill of left-padded rows: [B, 1, T, T], causal, padding
/// keys hidden. A padding query attends to itself so no row of the softmax is empty
/// (an empty row gives NaN, which would leak through 0 · NaN).
pub fn prefill_mask(valid: &Tensor) -> Tensor {
    let t = valid.size()[1];
    let device = valid.device();
    let causal = Tensor::ones([t, t], (Kind::Bool, device)).tril(0);
    let keys = valid.to_kind(Kind::Bool).unsqueeze(1).unsqueeze(1); // [B,1,1,T]
    let eye = Tensor::eye(t, (Kind::Bool, device));
    causal.logical_and(&keys).logical_or(&eye)
}

/// Position ids for left-padded rows: 0 at each row's first real token.
pub fn positions_from_mask(valid: &Tensor) -> Tensor {
    (valid.to_kind(Kind::Int64).cumsum(1, Kind::Int64) - 1).clamp_min(0)
}

#[cfg(test)]
mod tests {
    use super::{RmsNorm, fused_rms_norm, in_row_blocks};
    use tch::{Device, Kind, Tensor};

    /// The fused RMSNorm a GPU runs is the same function as transformers' formula the
    /// CPU runs: within float32 rounding in float32, and within one bf16 rounding of
    /// the output in bf16 (the formula rounds twice, the fused kernel once). Checked
    /// here on libtorch's CPU implementation of the same operator.
    #[test]
    fn the_fused_rms_norm_is_transformers_formula_up_to_rounding() {
        tch::manual_seed(3);
        let x = Tensor::randn([3, 5, 64], (Kind::Float, Device::Cpu)) * 3.0;
        let weight = Tensor::rand([64], (Kind::Float, Device::Cpu)) + 0.5;
        let norm = RmsNorm {
            weight: weight.shallow_clone(),
            eps: 1e-6,
        };
        let want = norm.forward(&x);
        let got = fused_rms_norm(&x, &weight, 1e-6);
        let diff = (&got - &want).abs().max().double_value(&[]);
        assert!(diff < 1e-5, "{diff}");
        // By hand for one row: x / sqrt(mean(x²) + eps) · w.
        let row = x.get(0).get(0);
        let rms = (row.pow_tensor_scalar(2).mean(Kind::Float).double_value(&[]) + 1e-6).sqrt();
        let first = row.double_value(&[0]) / rms * weight.double_value(&[0]);
        assert!((got.double_value(&[0, 0, 0]) - first).abs() < 1e-5);

        let (xb, wb) = (x.to_kind(Kind::BFloat16), weight.to_kind(Kind::BFloat16));
        let norm = RmsNorm {
            weight: wb.shallow_clone(),
            eps: 1e-6,
        };
        let want = norm.forward(&xb).to_kind(Kind::Float);
        let got = fused_rms_norm(&xb, &wb, 1e-6);
        assert_eq!(got.kind(), Kind::BFloat16);
        // One bf16 rounding is 2^-8 relative; the two paths differ by at most two.
        let rel = ((got.to_kind(Kind::Float) - &want).abs() / (want.abs() + 1e-3))
            .max()
            .double_value(&[]);
        assert!(rel <= 2.0 * 2f64.powi(-8), "{rel}");
    }

    /// Every row of `x` through `in_row_blocks` equals the same row computed alone,
    /// bit for bit, whatever the row count (under, at, and over a block, not a multiple
    /// of it, and a 3-D input), for SmolLM2's MLP down projection: the shape whose
    /// 57–192-row products split the sum over K on a 2-thread AVX-512 host.
    #[test]
    fn a_row_in_row_blocks_is_the_same_in_any_row_count() {
        tch::manual_seed(7);
        let w = Tensor::randn([576, 1536], (Kind::Float, Device::Cpu)) * 0.05;
        let x = Tensor::randn([150, 1536], (Kind::Float, Device::Cpu));
        let f = |x: &Tensor| x.linear::<Tensor>(&w, None);
        let alone = in_row_blocks(&x.narrow(0, 5, 1), 16, f);
        for m in [6, 16, 19, 64, 150] {
            let y = in_row_blocks(&x.narrow(0, 0, m), 16, f);
            assert_eq!(y.size(), [m, 576]);
            assert!(y.get(5).equal(&alone.get(0)), "row 5 of {m} rows");
        }
        let y = in_row_blocks(&x.narrow(0, 0, 64).view([4, 16, 1536]), 16, f);
        assert_eq!(y.size(), [4, 16, 576]);
        assert!(
            y.get(0).get(5).equal(&alone.get(0)),
            "row 5 of [4, 16] rows"
        );
        let last = in_row_blocks(&x.narrow(0, 149, 1), 16, f);
        assert!(
            in_row_blocks(&x, 16, f).get(149).equal(&last.get(0)),
            "the last row of an overlapping block"
        );
    }
}
