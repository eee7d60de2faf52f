//! The PPO/GRPO policy loss of one chunk of a model's update batch, with its statistics.

use super::error::TrainError;
use serde::{Deserialize, Serialize};
use tch::{Device, Kind, Tensor};

/// How per-token losses are averaged into the batch loss (`[trainer] loss_agg`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LossAgg {
    #[default]
    TokenMean,
    SeqMeanTokenSum,
    SeqMeanTokenMean,
    SeqMeanTokenSumNorm,
}

/// The estimator of KL(π‖π_ref) per token (`[trainer] kl.estimator`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum KlEstimator {
    K1,
    Abs,
    K2,
    K3,
}

/// Log-ratios are clamped to ±this before `exp`: far past any clip range, and e^20 stays
/// finite in f32, so one stale token cannot turn the loss into inf/NaN.
const LOG_RATIO_BOUND: f64 = 20.0;
/// The KL estimators' log-ratio is clamped to ±this (k3 grows as e^d).
const KL_LOG_RATIO_BOUND: f64 = 10.0;

/// How the loss is formed; the same for every chunk of an update.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LossSettings {
    pub clip_low: f64,
    pub clip_high: f64,
    /// Bound c on −A·ρ for negative advantages (dual clip); `f64::INFINITY` disables it.
    pub dual_clip: f64,
    pub agg: LossAgg,
    /// (coefficient, estimator) of the KL penalty to the reference policy.
    pub kl: Option<(f64, KlEstimator)>,
    pub entropy_coef: f64,
    /// Sequence-level importance ratio (GSPO-token form) instead of per-token.
    pub gspo: bool,
    /// Cap C of the truncated importance weight min(π_old/π_sample, C).
    pub tis_cap: Option<f64>,
    /// Horizon for seq-mean-token-sum-norm (the generation budget).
    pub norm_len: f64,
}

/// Counts of the whole update batch of one model, so that chunk losses add up to the batch
/// loss.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Denominators {
    pub tokens: f64,
    pub seqs: f64,
}

/// One chunk of rows (sequences). Per-token tensors are [N, R]; padding may be anywhere.
#[derive(Debug, Clone, Copy)]
pub struct LossInputs<'a> {
    /// Log-probs of the response tokens under the current policy, with grad.
    pub logp: &'a Tensor,
    /// Log-probs under the policy the ratio is taken against (detached).
    pub logp_old: &'a Tensor,
    /// [N], one per sequence.
    pub advantages: &'a Tensor,
    /// 1 = real token, 0 = padding.
    pub mask: &'a Tensor,
    /// Frozen reference policy; needed iff `kl` is set.
    pub logp_ref: Option<&'a Tensor>,
    /// The behaviour policy's sampling log-probs; needed iff `tis_cap` is set, and used for
    /// the mismatch statistics whenever given.
    pub logp_sample: Option<&'a Tensor>,
    /// Per-token entropy, with grad; needed iff `entropy_coef` is not 0.
    pub entropy: Option<&'a Tensor>,
}

#[derive(Debug)]
pub struct LossOutput {
    /// Scalar with grad: this chunk's contribution to the batch loss.
    pub loss: Tensor,
    pub stats: LossStats,
}

/// Sums over a chunk (and, after [`LossStats::merge`], over chunks); a caller divides by
/// `tokens` where it wants means. Token counts are mask-weighted.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LossStats {
    /// agg(L) contributed (after the TIS weight).
    pub pg_loss: f64,
    /// agg(k) contributed, before the KL coefficient.
    pub kl_loss: f64,
    /// agg(entropy) contributed, before the entropy coefficient.
    pub entropy_loss: f64,
    pub tokens: f64,
    /// Tokens with A > 0 and ρ > 1 + clip_high.
    pub clip_upper: f64,
    /// Tokens with A < 0 and ρ < 1 − clip_low.
    pub clip_lower: f64,
    /// Tokens with A < 0 and ρ > dual_clip.
    pub clip_dual: f64,
    /// Σ (logp_old − logp).
    pub approx_kl_sum: f64,
    pub entropy_sum: f64,
    /// Σ |logp_old − logp_sample|.
    pub mismatch_abs_sum: f64,
    /// Max of exp(logp_old − logp_sample) over real tokens.
    pub mismatch_max_ratio: f64,
    pub tis_weight_sum: f64,
}

impl LossStats {
    /// Every field that adds up over micro-batches (all but `mismatch_max_ratio`, a
    /// maximum), in one order: what [`Self::merge`] adds and data-parallel ranks sum.
    pub fn sums_mut(&mut self) -> [&mut f64; 11] {
        [
            &mut self.pg_loss,
            &mut self.kl_loss,
            &mut self.entropy_loss,
            &mut self.tokens,
            &mut self.clip_upper,
            &mut self.clip_lower,
            &mut self.clip_dual,
            &mut self.approx_kl_sum,
            &mut self.entropy_sum,
            &mut self.mismatch_abs_sum,
            &mut self.tis_weight_sum,
        ]
    }

    pub fn merge(&mut self, other: &LossStats) {
        let mut other = other.clone();
        for (mine, theirs) in self.sums_mut().into_iter().zip(other.sums_mut()) {
            *mine += *theirs;
        }
        self.mismatch_max_ratio = self.mismatch_max_ratio.max(other.mismatch_max_ratio);
    }
}

/// The clipped policy-gradient loss of one chunk, plus the KL penalty and entropy bonus,
/// aggregated with the whole batch's denominators.
pub fn policy_loss(
    inputs: &LossInputs,
    settings: &LossSettings,
    den: &Denominators,
) -> Result<LossOutput, TrainError> {
    let (loss, stats) = policy_loss_on_device(inputs, settings, den)?;
    let stats = Vec::<f64>::try_from(stats.to_device(Device::Cpu))?;
    Ok(LossOutput {
        loss,
        stats: LossStats::from_values(&stats),
    })
}

/// [`policy_loss`] with its stats left on the device: a float64 tensor [12] in
/// [`LossStats::from_values`]'s order, for a caller that sums chunks there and reads
/// once ([`StatsOnDevice`]).
pub fn policy_loss_on_device(
    inputs: &LossInputs,
    settings: &LossSettings,
    den: &Denominators,
) -> Result<(Tensor, Tensor), TrainError> {
    validate(inputs, settings, den)?;
    // Half-precision log-probs would make ratios near 1 too coarse to clip meaningfully.
    let kind = match inputs.logp.kind() {
        Kind::Double => Kind::Double,
        _ => Kind::Float,
    };
    let logp = inputs.logp.to_kind(kind);
    let logp_old = inputs.logp_old.detach().to_kind(kind);
    let mask = inputs.mask.detach().to_kind(kind);
    let adv = inputs.advantages.detach().to_kind(kind).unsqueeze(1);
    let logp_sample = inputs.logp_sample.map(|t| t.detach().to_kind(kind));
    // Rows without tokens contribute nothing; dividing by 1 keeps them at 0, not NaN.
    let lens = mask.sum_dim_intlist(1, false, kind).clamp_min(1.0);
    let agg = Aggregator {
        mask: &mask,
        lens: &lens,
        agg: settings.agg,
        den,
        norm_len: settings.norm_len,
    };

    let log_ratio = &logp - &logp_old;
    let ratio = if settings.gspo {
        let seq_log_ratio = (&log_ratio * &mask).sum_dim_intlist(1, false, kind) / &lens;
        let seq_ratio = seq_log_ratio
            .clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)
            .exp()
            .detach();
        // Value s_i; gradient s_i · ∂logp_t per token (GSPO-token).
        seq_ratio.unsqueeze(1) * (&logp - logp.detach()).exp()
    } else {
        log_ratio.clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND).exp()
    };
    let neg_adv = -&adv;
    let clipped = ratio.clamp(1.0 - settings.clip_low, 1.0 + settings.clip_high);
    let pg = (&neg_adv * &ratio).maximum(&(&neg_adv * &clipped));
    let negative = adv.lt(0.0);
    let pg = pg
        .minimum(&(&neg_adv * settings.dual_clip))
        .where_self(&negative, &pg);
    let tis_weight = settings
        .tis_cap
        .zip(logp_sample.as_ref())
        .map(|(cap, sample)| (&logp_old - sample).exp().clamp_max(cap));
    let pg = match &tis_weight {
        Some(w) => pg * w,
        None => pg,
    };

    let pg_loss = agg.apply(&pg);
    // Terms are added out of place: `+=` on a Tensor writes into the storage it shares
    // with `pg_loss`.
    let mut loss = pg_loss.shallow_clone();
    let kl_loss = match (settings.kl, inputs.logp_ref) {
        (Some((coef, estimator)), Some(logp_ref)) => {
            let d = (logp_ref.detach().to_kind(kind) - &logp)
                .clamp(-KL_LOG_RATIO_BOUND, KL_LOG_RATIO_BOUND);
            let k = match estimator {
                KlEstimator::K1 => -d,
                KlEstimator::Abs => d.abs(),
                KlEstimator::K2 => d.square() * 0.5,
                KlEstimator::K3 => d.exp() - &d - 1.0,
            };
            let kl = agg.apply(&k);
            loss = &loss + &kl * coef;
            Some(kl)
        }
        _ => None,
    };
    let entropy = inputs.entropy.map(|t| t.to_kind(kind));
    let entropy_loss = entropy.as_ref().map(|e| agg.apply(e));
    if settings.entropy_coef != 0.0
        && let Some(e) = &entropy_loss
    {
        loss = &loss - e * settings.entropy_coef;
    }

    let stats = tch::no_grad(|| {
        let device = logp.device();
        let zero = Tensor::zeros([], (Kind::Double, device));
        let sum = |x: &Tensor| (x * &mask).sum(Kind::Double);
        let count = |hit: Tensor| sum(&hit.to_kind(kind));
        let value = |x: Option<&Tensor>| {
            x.map_or_else(
                || zero.shallow_clone(),
                |t| t.detach().to_kind(Kind::Double),
            )
        };
        let real = mask.gt(0.0);
        let mismatch = logp_sample.as_ref().map(|s| &logp_old - s);
        let max_ratio = mismatch.as_ref().map(|m| {
            let ratios = m.exp().to_kind(Kind::Double).masked_select(&real);
            // The appended 0 keeps max() defined for a chunk without real tokens.
            Tensor::cat(&[ratios, zero.reshape([1])], 0).max()
        });
        let values = [
            value(Some(&pg_loss)),
            value(kl_loss.as_ref()),
            value(entropy_loss.as_ref()),
            mask.sum(Kind::Double),
            count(ratio.gt(1.0 + settings.clip_high).logical_and(&adv.gt(0.0))),
            count(ratio.lt(1.0 - settings.clip_low).logical_and(&negative)),
            count(ratio.gt(settings.dual_clip).logical_and(&negative)),
            sum(&(&logp_old - &logp)),
            entropy.as_ref().map_or_else(|| zero.shallow_clone(), sum),
            mismatch
                .as_ref()
                .map_or_else(|| zero.shallow_clone(), |m| sum(&m.abs())),
            max_ratio.unwrap_or_else(|| zero.shallow_clone()),
            tis_weight
                .as_ref()
                .map_or_else(|| zero.shallow_clone(), sum),
        ];
        Tensor::stack(&values, 0)
    });
    Ok((loss, stats))
}

/// The index of the one stat that is a maximum over chunks, not a sum.
const MAX_STAT: i64 = 10;

/// The loss values and stats of a micro-batch's chunks, summed on the device in the
/// order the host would (float64, chunk after chunk, from the step's running loss), so
/// that reading them once gives the same bits as reading each chunk: one wait for the
/// device per micro-batch instead of two per chunk.
pub struct StatsOnDevice {
    loss: Tensor,
    sums: Tensor,
    max: Tensor,
}

impl StatsOnDevice {
    /// Starting from the step's running loss `loss` (stats from zero).
    pub fn new(loss: f64, device: Device) -> Self {
        let opts = (Kind::Double, device);
        Self {
            loss: Tensor::from(loss).to_device(device),
            sums: Tensor::zeros([12], opts),
            max: Tensor::zeros([], opts),
        }
    }

    /// Adds one chunk's loss (any float dtype) and stats ([`policy_loss_on_device`]).
    pub fn add(&mut self, loss: &Tensor, stats: &Tensor) {
        tch::no_grad(|| {
            self.loss = &self.loss + loss.detach().to_kind(Kind::Double);
            self.sums = &self.sums + stats;
            // fmax, as f64::max: a NaN does not replace a number.
            self.max = self.max.fmax(&stats.get(MAX_STAT));
        });
    }

    /// The running loss and the chunks' stats, in one read.
    pub fn read(self) -> Result<(f64, LossStats), TrainError> {
        let all = Tensor::cat(
            &[self.loss.reshape([1]), self.sums, self.max.reshape([1])],
            0,
        );
        let v = Vec::<f64>::try_from(all.to_device(Device::Cpu))?;
        let mut values = v[1..13].to_vec();
        values[MAX_STAT as usize] = v[13];
        Ok((v[0], LossStats::from_values(&values)))
    }
}

impl LossStats {
    /// The stats from their 12 values in the order [`policy_loss_on_device`] stacks them.
    pub fn from_values(v: &[f64]) -> Self {
        LossStats {
            pg_loss: v[0],
            kl_loss: v[1],
            entropy_loss: v[2],
            tokens: v[3],
            clip_upper: v[4],
            clip_lower: v[5],
            clip_dual: v[6],
            approx_kl_sum: v[7],
            entropy_sum: v[8],
            mismatch_abs_sum: v[9],
            mismatch_max_ratio: v[10],
            tis_weight_sum: v[11],
        }
    }
}

/// agg(X) of a per-token tensor, over the chunk, with the batch's denominators.
struct Aggregator<'a> {
    mask: &'a Tensor,
    lens: &'a Tensor,
    agg: LossAgg,
    den: &'a Denominators,
    norm_len: f64,
}

impl Aggregator<'_> {
    fn apply(&self, x: &Tensor) -> Tensor {
        let masked = x * self.mask;
        match self.agg {
            LossAgg::TokenMean => masked.sum(x.kind()) / self.den.tokens,
            LossAgg::SeqMeanTokenSum => masked.sum(x.kind()) / self.den.seqs,
            LossAgg::SeqMeanTokenMean => {
                (masked.sum_dim_intlist(1, false, x.kind()) / self.lens).sum(x.kind())
                    / self.den.seqs
            }
            LossAgg::SeqMeanTokenSumNorm => masked.sum(x.kind()) / self.norm_len / self.den.seqs,
        }
    }
}

fn validate(
    inputs: &LossInputs,
    settings: &LossSettings,
    den: &Denominators,
) -> Result<(), TrainError> {
    let logp = inputs.logp;
    let size = logp.size();
    if size.len() != 2 {
        return Err(TrainError::Shape {
            what: "logp".into(),
            expected: "[N, R]".into(),
            got: size,
        });
    }
    let device = logp.device();
    let per_token = [
        ("logp", Some(logp)),
        ("logp_old", Some(inputs.logp_old)),
        ("mask", Some(inputs.mask)),
        ("logp_ref", inputs.logp_ref),
        ("logp_sample", inputs.logp_sample),
        ("entropy", inputs.entropy),
    ];
    let per_seq = [("advantages", inputs.advantages, vec![size[0]])];
    let given = per_token
        .into_iter()
        .filter_map(|(what, t)| t.map(|t| (what, t, size.clone())))
        .chain(per_seq);
    for (what, t, expected) in given {
        if t.size() != expected {
            return Err(TrainError::Shape {
                what: what.into(),
                expected: format!("{expected:?}"),
                got: t.size(),
            });
        }
        if !t.is_floating_point() {
            return Err(TrainError::Kind {
                what: what.into(),
                got: t.kind(),
            });
        }
        if t.device() != device {
            return Err(TrainError::Device {
                what: what.into(),
                expected: device,
                got: t.device(),
            });
        }
    }

    if settings.kl.is_some() && inputs.logp_ref.is_none() {
        return Err(TrainError::Missing {
            what: "logp_ref",
            when: "a KL penalty is set",
        });
    }
    if settings.tis_cap.is_some() && inputs.logp_sample.is_none() {
        return Err(TrainError::Missing {
            what: "logp_sample",
            when: "tis_cap is set",
        });
    }
    if settings.entropy_coef != 0.0 && inputs.entropy.is_none() {
        return Err(TrainError::Missing {
            what: "entropy",
            when: "entropy_coef is not 0",
        });
    }

    let setting = |name, value: f64, ok: bool, why| {
        if ok {
            Ok(())
        } else {
            Err(TrainError::Setting { name, value, why })
        }
    };
    let c = settings;
    setting(
        "clip_low",
        c.clip_low,
        (0.0..1.0).contains(&c.clip_low),
        "must be in [0, 1)",
    )?;
    setting(
        "clip_high",
        c.clip_high,
        c.clip_high >= 0.0 && c.clip_high.is_finite(),
        "must be finite and >= 0",
    )?;
    setting("dual_clip", c.dual_clip, c.dual_clip > 1.0, "must be > 1")?;
    if let Some((coef, _)) = c.kl {
        setting("kl coef", coef, coef.is_finite(), "must be finite")?;
    }
    setting(
        "entropy_coef",
        c.entropy_coef,
        c.entropy_coef.is_finite(),
        "must be finite",
    )?;
    if let Some(cap) = c.tis_cap {
        setting("tis_cap", cap, cap > 0.0, "must be > 0")?;
    }
    let positive = |v: f64| v > 0.0 && v.is_finite();
    match c.agg {
        LossAgg::TokenMean => setting(
            "tokens denominator",
            den.tokens,
            positive(den.tokens),
            "must be finite and > 0",
        ),
        LossAgg::SeqMeanTokenSumNorm if !positive(c.norm_len) => {
            setting("norm_len", c.norm_len, false, "must be finite and > 0")
        }
        _ => setting(
            "seqs denominator",
            den.seqs,
            positive(den.seqs),
            "must be finite and > 0",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const AGGS: [LossAgg; 4] = [
        LossAgg::TokenMean,
        LossAgg::SeqMeanTokenSum,
        LossAgg::SeqMeanTokenMean,
        LossAgg::SeqMeanTokenSumNorm,
    ];
    /// Stands in for garbage in padded positions; any leak into a result shows.
    const PAD: f64 = 3.0;

    /// Two rows of three tokens; clip_low 0.2, clip_high 0.28, dual clip 3.
    /// Row 0: A = +1, mask [1 1 1], ρ = [1.5, 1, 0.9]
    ///   L = max(−ρ, −clip(ρ, 0.8, 1.28)) = [−1.28 (clipped above), −1, −0.9]; Σ = −3.18
    /// Row 1: A = −2, mask [1 0 1], ρ = [0.5, pad, 4]
    ///   0.5: max(1.0, 2·0.8) = 1.6 (clipped below)
    ///   4:   max(8, 2·1.28) = 8, then min(8, 2·3) = 6 (dual clip); Σ = 7.6
    /// Σ L = 4.42 over 5 tokens, 2 sequences.
    struct Fixture {
        logp: Tensor,
        logp_old: Tensor,
        advantages: Tensor,
        mask: Tensor,
        logp_ref: Tensor,
        logp_sample: Tensor,
        entropy: Tensor,
    }

    fn tensor(values: &[f64], kind: Kind) -> Tensor {
        let t = Tensor::from_slice(values).to_kind(kind);
        if values.len() == 6 {
            t.reshape([2, 3])
        } else {
            t
        }
    }

    fn fixture_with(ratios: [f64; 6], advantages: [f64; 2], mask: [f64; 6], kind: Kind) -> Fixture {
        let old = [-1.0, -2.0, -0.5, -1.5, -0.7, -3.0];
        let logp: Vec<f64> = old.iter().zip(ratios).map(|(o, r)| o + r.ln()).collect();
        // d = logp_ref − logp: [0, 1, −1 | 2, pad 50, −0.5]
        let d = [0.0, 1.0, -1.0, 2.0, 50.0, -0.5];
        let logp_ref: Vec<f64> = logp.iter().zip(d).map(|(l, d)| l + d).collect();
        // logp_old − logp_sample: ln [1, 3, 0.5 | 1.5, pad 100, 1]
        let mismatch = [1.0f64, 3.0, 0.5, 1.5, 100.0, 1.0];
        let sample: Vec<f64> = old.iter().zip(mismatch).map(|(o, m)| o - m.ln()).collect();
        Fixture {
            logp: tensor(&logp, kind).set_requires_grad(true),
            logp_old: tensor(&old, kind),
            advantages: tensor(&advantages, kind),
            mask: tensor(&mask, kind),
            logp_ref: tensor(&logp_ref, kind),
            logp_sample: tensor(&sample, kind),
            entropy: tensor(&[0.5, 1.0, 1.5, 2.0, 9.0, 1.0], kind).set_requires_grad(true),
        }
    }

    fn fixture(kind: Kind) -> Fixture {
        fixture_with(
            [1.5, 1.0, 0.9, 0.5, PAD.exp(), 4.0],
            [1.0, -2.0],
            [1.0, 1.0, 1.0, 1.0, 0.0, 1.0],
            kind,
        )
    }

    impl Fixture {
        /// All optional inputs given.
        fn inputs(&self) -> LossInputs<'_> {
            LossInputs {
                logp: &self.logp,
                logp_old: &self.logp_old,
                advantages: &self.advantages,
                mask: &self.mask,
                logp_ref: Some(&self.logp_ref),
                logp_sample: Some(&self.logp_sample),
                entropy: Some(&self.entropy),
            }
        }

        fn bare(&self) -> LossInputs<'_> {
            LossInputs {
                logp_ref: None,
                logp_sample: None,
                entropy: None,
                ..self.inputs()
            }
        }
    }

    fn settings(agg: LossAgg) -> LossSettings {
        LossSettings {
            clip_low: 0.2,
            clip_high: 0.28,
            dual_clip: 3.0,
            agg,
            kl: None,
            entropy_coef: 0.0,
            gspo: false,
            tis_cap: None,
            norm_len: 4.0,
        }
    }

    const DEN: Denominators = Denominators {
        tokens: 5.0,
        seqs: 2.0,
    };

    fn value(t: &Tensor) -> f64 {
        t.double_value(&[])
    }

    fn grad(t: &Tensor) -> Vec<f64> {
        Vec::<f64>::try_from(t.grad().to_kind(Kind::Double).flatten(0, -1)).unwrap()
    }

    #[track_caller]
    fn close(got: f64, want: f64, tol: f64) {
        assert!((got - want).abs() <= tol, "got {got}, want {want}");
    }

    /// Chunks summed on the device and read once give the bits the host got adding
    /// each chunk as it was read, from the step's running loss; a NaN ratio does not
    /// replace the running maximum (as `f64::max`), and a non-finite chunk loss makes
    /// the sum non-finite.
    #[test]
    fn stats_summed_on_the_device_read_as_the_hosts_running_sums() {
        let chunk = |seed: f64| {
            let v: Vec<f64> = (0..12).map(|i| seed * (i as f64 + 0.1) / 3.0).collect();
            Tensor::from_slice(&v)
        };
        let losses = [0.1f32, 0.2, 1e-7];
        let mut on_device = StatsOnDevice::new(0.3, Device::Cpu);
        let (mut loss, mut stats) = (0.3f64, LossStats::default());
        for (k, l) in losses.iter().enumerate() {
            let s = chunk(k as f64 + 0.7);
            on_device.add(&Tensor::from(*l), &s);
            loss += f64::from(*l);
            stats.merge(&LossStats::from_values(&Vec::<f64>::try_from(&s).unwrap()));
        }
        let (got_loss, got) = on_device.read().unwrap();
        assert_eq!(got_loss.to_bits(), loss.to_bits());
        assert_eq!(got, stats);
        assert_eq!(got.mismatch_max_ratio, 2.7 * 10.1 / 3.0);

        let mut on_device = StatsOnDevice::new(0.0, Device::Cpu);
        let mut nan = vec![1.0f64; 12];
        nan[10] = f64::NAN;
        on_device.add(&Tensor::from(2.0f32), &chunk(1.0));
        on_device.add(&Tensor::from(f32::INFINITY), &Tensor::from_slice(&nan));
        let (loss, stats) = on_device.read().unwrap();
        assert!(loss.is_infinite());
        assert_eq!(stats.mismatch_max_ratio, 10.1 / 3.0);
    }

    #[test]
    fn each_aggregation_of_the_clipped_loss() {
        let f = fixture(Kind::Float);
        let expected = [
            // token-mean: 4.42 / 5 tokens
            (LossAgg::TokenMean, 0.884),
            // seq-mean-token-sum: 4.42 / 2 seqs
            (LossAgg::SeqMeanTokenSum, 2.21),
            // seq-mean-token-mean: (−3.18/3 + 7.6/2) / 2 = (−1.06 + 3.8) / 2
            (LossAgg::SeqMeanTokenMean, 1.37),
            // seq-mean-token-sum-norm: 4.42 / norm_len 4 / 2 seqs
            (LossAgg::SeqMeanTokenSumNorm, 0.5525),
        ];
        for (agg, want) in expected {
            let out = policy_loss(&f.bare(), &settings(agg), &DEN).unwrap();
            close(value(&out.loss), want, 1e-5);
            close(out.stats.pg_loss, want, 1e-5);
        }
    }

    #[test]
    fn stats_count_each_kind_of_clip() {
        let f = fixture(Kind::Float);
        let s = policy_loss(&f.bare(), &settings(LossAgg::TokenMean), &DEN)
            .unwrap()
            .stats;
        assert_eq!(s.tokens, 5.0);
        // The padded token (ρ = e³ at A < 0) would count as a dual clip if it leaked.
        assert_eq!((s.clip_upper, s.clip_lower, s.clip_dual), (1.0, 1.0, 1.0));
        // Σ (logp_old − logp) = −ln(1.5 · 1 · 0.9 · 0.5 · 4) = −ln 2.7
        close(s.approx_kl_sum, -(2.7f64.ln()), 1e-5);
        assert_eq!(s.kl_loss, 0.0);
        assert_eq!(s.mismatch_max_ratio, 0.0);
    }

    #[test]
    fn each_kl_estimator() {
        let f = fixture(Kind::Float);
        let e = std::f64::consts::E;
        // d = [0, 1, −1, 2, −0.5] on the real tokens, token-mean over 5.
        let expected = [
            // −d: 0 − 1 + 1 − 2 + 0.5 = −1.5
            (KlEstimator::K1, -1.5 / 5.0),
            // |d|: 0 + 1 + 1 + 2 + 0.5 = 4.5
            (KlEstimator::Abs, 4.5 / 5.0),
            // d²/2: 0 + 0.5 + 0.5 + 2 + 0.125 = 3.125
            (KlEstimator::K2, 3.125 / 5.0),
            // e^d − d − 1: 0 + (e − 2) + e⁻¹ + (e² − 3) + (e^−½ − ½) ≈ 5.5817480
            (
                KlEstimator::K3,
                ((e - 2.0) + 1.0 / e + (e * e - 3.0) + ((-0.5f64).exp() - 0.5)) / 5.0,
            ),
        ];
        for (estimator, want) in expected {
            let s = LossSettings {
                kl: Some((0.1, estimator)),
                ..settings(LossAgg::TokenMean)
            };
            let out = policy_loss(&f.inputs(), &s, &DEN).unwrap();
            close(out.stats.kl_loss, want, 1e-5);
            close(value(&out.loss), 0.884 + 0.1 * want, 1e-5);
        }
    }

    #[test]
    fn entropy_is_a_bonus() {
        let f = fixture(Kind::Float);
        let s = LossSettings {
            entropy_coef: 0.01,
            ..settings(LossAgg::TokenMean)
        };
        let out = policy_loss(&f.inputs(), &s, &DEN).unwrap();
        // entropy on real tokens: 0.5 + 1 + 1.5 + 2 + 1 = 6 (the padded 9 is out); mean 1.2
        close(out.stats.entropy_sum, 6.0, 1e-6);
        close(out.stats.entropy_loss, 1.2, 1e-6);
        close(value(&out.loss), 0.884 - 0.01 * 1.2, 1e-5);
        // Raising entropy lowers the loss: ∂loss/∂entropy = −0.01 / 5 on real tokens.
        out.loss.backward();
        let g = grad(&f.entropy);
        for (g, m) in g.iter().zip([1.0, 1.0, 1.0, 1.0, 0.0, 1.0]) {
            close(*g, -0.002 * m, 1e-9);
        }
    }

    #[test]
    fn tis_weights_are_capped() {
        let f = fixture(Kind::Float);
        let s = LossSettings {
            tis_cap: Some(2.0),
            ..settings(LossAgg::TokenMean)
        };
        let out = policy_loss(&f.inputs(), &s, &DEN).unwrap();
        // π_old/π_sample = [1, 3, 0.5 | 1.5, pad, 1] → w = min(·, 2) = [1, 2, 0.5 | 1.5, 1]
        // w·L = −1.28 − 2 − 0.45 + 2.4 + 6 = 4.67, over 5 tokens
        close(value(&out.loss), 0.934, 1e-5);
        close(out.stats.tis_weight_sum, 6.0, 1e-5);
        // The padded ratio of 100 is not the max.
        close(out.stats.mismatch_max_ratio, 3.0, 1e-5);
        // |ln 3| + |ln 0.5| + |ln 1.5| = ln 9
        close(out.stats.mismatch_abs_sum, 9f64.ln(), 1e-5);
    }

    #[test]
    fn gspo_value_and_per_token_gradient() {
        // Row 0: A = +1, mask [1 0 1], ρ = [2, pad, 8] → s = √(2·8) = 4, clipped at 1.28
        // Row 1: A = −1, mask [1 1 0], ρ = [0.5, 4.5, pad] → s = √(0.5·4.5) = 1.5, unclipped
        //   (max(1.5, 1.28) = 1.5 < dual bound 3)
        // token-mean over 4 tokens: (2·(−1.28) + 2·1.5) / 4 = 0.11
        let f = fixture_with(
            [2.0, PAD.exp(), 8.0, 0.5, 4.5, PAD.exp()],
            [1.0, -1.0],
            [1.0, 0.0, 1.0, 1.0, 1.0, 0.0],
            Kind::Float,
        );
        let s = LossSettings {
            gspo: true,
            ..settings(LossAgg::TokenMean)
        };
        let den = Denominators {
            tokens: 4.0,
            seqs: 2.0,
        };
        let out = policy_loss(&f.bare(), &s, &den).unwrap();
        close(value(&out.loss), 0.11, 1e-5);
        assert_eq!(out.stats.clip_upper, 2.0);
        // ∂/∂logp_t = sg(s_i) · (−A, or 0 where clipped) · mask / 4
        out.loss.backward();
        let want = [0.0, 0.0, 0.0, 1.5 / 4.0, 1.5 / 4.0, 0.0];
        for (g, w) in grad(&f.logp).iter().zip(want) {
            close(*g, w, 1e-6);
        }
    }

    fn everything(agg: LossAgg) -> LossSettings {
        LossSettings {
            kl: Some((0.1, KlEstimator::K3)),
            entropy_coef: 0.01,
            tis_cap: Some(2.0),
            ..settings(agg)
        }
    }

    #[test]
    fn chunks_add_up_to_the_batch() {
        for agg in AGGS {
            let whole = fixture(Kind::Float);
            let out = policy_loss(&whole.inputs(), &everything(agg), &DEN).unwrap();
            out.loss.backward();

            let split = fixture(Kind::Float);
            let mut loss = 0.0;
            let mut stats = LossStats::default();
            for row in 0..2 {
                let rows = |t: &Tensor| t.narrow(0, row, 1);
                let (logp, old, adv, mask) = (
                    rows(&split.logp),
                    rows(&split.logp_old),
                    rows(&split.advantages),
                    rows(&split.mask),
                );
                let (r, sample, entropy) = (
                    rows(&split.logp_ref),
                    rows(&split.logp_sample),
                    rows(&split.entropy),
                );
                let inputs = LossInputs {
                    logp: &logp,
                    logp_old: &old,
                    advantages: &adv,
                    mask: &mask,
                    logp_ref: Some(&r),
                    logp_sample: Some(&sample),
                    entropy: Some(&entropy),
                };
                let part = policy_loss(&inputs, &everything(agg), &DEN).unwrap();
                part.loss.backward();
                loss += value(&part.loss);
                stats.merge(&part.stats);
            }
            close(loss, value(&out.loss), 1e-5);
            let fields = |s: &LossStats| {
                [
                    s.pg_loss,
                    s.kl_loss,
                    s.entropy_loss,
                    s.tokens,
                    s.clip_upper,
                    s.clip_lower,
                    s.clip_dual,
                    s.approx_kl_sum,
                    s.entropy_sum,
                    s.mismatch_abs_sum,
                    s.mismatch_max_ratio,
                    s.tis_weight_sum,
                ]
            };
            for (a, b) in fields(&stats).into_iter().zip(fields(&out.stats)) {
                close(a, b, 1e-5);
            }
            for (a, b) in grad(&split.logp).into_iter().zip(grad(&whole.logp)) {
                close(a, b, 1e-6);
            }
        }
    }

    #[test]
    fn gradient_matches_finite_differences() {
        let h = 1e-6;
        for agg in AGGS {
            let f = fixture(Kind::Double);
            let s = everything(agg);
            let out = policy_loss(&f.inputs(), &s, &DEN).unwrap();
            out.loss.backward();
            let autograd = grad(&f.logp);
            let base = Vec::<f64>::try_from(f.logp.detach().flatten(0, -1)).unwrap();
            let loss_at = |values: &[f64]| {
                let logp = tensor(values, Kind::Double);
                let inputs = LossInputs {
                    logp: &logp,
                    ..f.inputs()
                };
                value(&policy_loss(&inputs, &s, &DEN).unwrap().loss)
            };
            for (k, g) in autograd.iter().enumerate() {
                let (mut up, mut down) = (base.clone(), base.clone());
                up[k] += h;
                down[k] -= h;
                let numeric = (loss_at(&up) - loss_at(&down)) / (2.0 * h);
                // Relative, with a floor so the zero gradients of padding and clipped tokens
                // are held to the noise of the difference quotient.
                let tol = 1e-6 * numeric.abs().max(1e-2);
                assert!(
                    (g - numeric).abs() <= tol,
                    "{agg:?} token {k}: autograd {g}, finite differences {numeric}"
                );
            }
        }
    }

    fn error(inputs: &LossInputs, settings: &LossSettings) -> String {
        policy_loss(inputs, settings, &DEN).unwrap_err().to_string()
    }

    #[test]
    fn shape_mismatches_are_refused() {
        let f = fixture(Kind::Float);
        let narrow = f.logp_old.narrow(1, 0, 2);
        let inputs = LossInputs {
            logp_old: &narrow,
            ..f.bare()
        };
        assert_eq!(
            error(&inputs, &settings(LossAgg::TokenMean)),
            "logp_old: expected shape [2, 3], got [2, 2]"
        );
        let three = Tensor::ones([3], (Kind::Float, Device::Cpu));
        let inputs = LossInputs {
            advantages: &three,
            ..f.bare()
        };
        assert_eq!(
            error(&inputs, &settings(LossAgg::TokenMean)),
            "advantages: expected shape [2], got [3]"
        );
        let flat = f.logp.flatten(0, -1);
        let inputs = LossInputs {
            logp: &flat,
            ..f.bare()
        };
        assert_eq!(
            error(&inputs, &settings(LossAgg::TokenMean)),
            "logp: expected shape [N, R], got [6]"
        );
    }

    #[test]
    fn missing_inputs_are_named() {
        let f = fixture(Kind::Float);
        let base = settings(LossAgg::TokenMean);
        let cases = [
            (
                LossSettings {
                    kl: Some((0.1, KlEstimator::K3)),
                    ..base
                },
                "logp_ref is required when a KL penalty is set",
            ),
            (
                LossSettings {
                    tis_cap: Some(2.0),
                    ..base
                },
                "logp_sample is required when tis_cap is set",
            ),
            (
                LossSettings {
                    entropy_coef: 0.01,
                    ..base
                },
                "entropy is required when entropy_coef is not 0",
            ),
        ];
        for (s, message) in cases {
            assert_eq!(error(&f.bare(), &s), message);
        }
        let zero = Denominators {
            tokens: 0.0,
            seqs: 2.0,
        };
        let message = policy_loss(&f.bare(), &base, &zero)
            .unwrap_err()
            .to_string();
        assert_eq!(message, "tokens denominator = 0: must be finite and > 0");
    }
}
