//! AdamW (torch.optim.AdamW semantics) whose moment tensors drmas owns, saves and restores.

use super::error::TrainError;
use std::collections::HashMap;
use tch::{Device, Kind, Tensor};

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamWConfig {
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
}

impl Default for AdamWConfig {
    /// torch's defaults, weight decay included (0.01).
    fn default() -> Self {
        AdamWConfig {
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.01,
        }
    }
}

/// AdamW over a fixed list of parameters. The moments are f32 whatever the parameter's
/// dtype. A parameter that is not f32 (bf16, f16) has an f32 master copy: the step
/// updates the master and rounds it into the parameter, so updates smaller than the
/// parameter's precision (lr 1e-6 on a bf16 weight of magnitude 0.01 is 2^-7 of its last
/// bit) accumulate instead of being rounded away every step.
///
/// One step count serves all parameters; torch keeps one per parameter, which differs only
/// when a parameter has no gradient at some step (it is then skipped, as in torch, but the
/// shared count still advances).
#[derive(Debug)]
pub struct AdamW {
    params: Vec<(String, Tensor)>,
    exp_avg: Vec<Tensor>,
    exp_avg_sq: Vec<Tensor>,
    /// f32 master weights of the parameters that are not f32.
    master: Vec<Option<Tensor>>,
    step: i64,
    config: AdamWConfig,
}

impl AdamW {
    /// `params` are shallow clones of the trainable variables (sharing their storage and
    /// gradients); they are kept sorted by name so that the state is in a stable order.
    pub fn new(mut params: Vec<(String, Tensor)>, config: AdamWConfig) -> Self {
        params.sort_by(|a, b| a.0.cmp(&b.0));
        let moments = || {
            params
                .iter()
                .map(|(_, p)| Tensor::zeros(p.size(), (Kind::Float, p.device())))
                .collect::<Vec<_>>()
        };
        let master = params
            .iter()
            .map(|(_, p)| {
                (p.kind() != Kind::Float).then(|| {
                    let _guard = tch::no_grad_guard();
                    p.to_kind(Kind::Float).detach()
                })
            })
            .collect();
        AdamW {
            exp_avg: moments(),
            exp_avg_sq: moments(),
            master,
            params,
            step: 0,
            config,
        }
    }

    /// The parameters, name-sorted, as given to [`AdamW::new`].
    pub fn params(&self) -> &[(String, Tensor)] {
        &self.params
    }

    pub fn zero_grad(&mut self) {
        for (_, p) in &mut self.params {
            p.zero_grad();
        }
    }

    /// Global L2 norm of all gradients, before any clipping; parameters without a
    /// gradient count as 0. See [`sum_of_squares`] for the precision.
    pub fn grad_norm(&self) -> f64 {
        let _guard = tch::no_grad_guard();
        let mut squares = SquaresOnDevice::new(-0.0);
        for (_, p) in &self.params {
            let g = p.grad();
            if g.defined() {
                squares.add(&g);
            }
        }
        squares.read().sqrt()
    }

    /// Scales the gradients so that their global norm is at most `max_norm` (coefficient
    /// max_norm / (norm + 1e-6), applied only when below 1). Returns the norm before
    /// clipping; a non-finite norm leaves the gradients alone, and the caller should skip
    /// the step.
    pub fn clip_grad_norm(&mut self, max_norm: f64) -> f64 {
        let norm = self.grad_norm();
        let coef = max_norm / (norm + 1e-6);
        if coef < 1.0 {
            let _guard = tch::no_grad_guard();
            for (_, p) in &self.params {
                let mut g = p.grad();
                if g.defined() {
                    g *= coef;
                }
            }
        }
        norm
    }

    /// One AdamW step at learning rate `lr`, in place on the parameters. On a GPU,
    /// libtorch's fused kernel over every parameter at once ([`fused_step`]); on the
    /// CPU, [`adamw_update`] per parameter (the formula the reproducibility tests pin).
    pub fn step(&mut self, lr: f64) {
        let _guard = tch::no_grad_guard();
        self.step += 1;
        if let Some((_, p)) = self.params.first()
            && crate::model::fused_kernels_on(p.device())
        {
            self.fused_step(lr);
            return;
        }
        let moments = self.exp_avg.iter_mut().zip(self.exp_avg_sq.iter_mut());
        let state = moments.zip(&self.master);
        for ((_, param), ((exp_avg, exp_avg_sq), master)) in self.params.iter_mut().zip(state) {
            let grad = param.grad();
            if !grad.defined() {
                continue;
            }
            let grad = grad.to_kind(Kind::Float);
            let mut p = match master {
                Some(m) => m.shallow_clone(),
                None => param.shallow_clone(),
            };
            adamw_update(
                &mut p,
                &grad,
                exp_avg,
                exp_avg_sq,
                &self.config,
                self.step,
                lr,
            );
            if master.is_some() {
                param.copy_(&p);
            }
        }
    }

    /// [`AdamW::step`] through `_fused_adamw_`: one multi-tensor kernel instead of about
    /// ten operators per parameter. The step count goes to the device as one scalar
    /// filled in place (no host wait). Its results differ from [`adamw_update`]'s in
    /// the last bits (the kernel computes `sqrt(v̂)` and the step size in another
    /// order); `fused_and_eager_adamw_agree` measures by how much.
    fn fused_step(&mut self, lr: f64) {
        let mut grads = Vec::new();
        let mut targets = Vec::new();
        let mut firsts = Vec::new();
        let mut seconds = Vec::new();
        let mut rounded = Vec::new();
        let moments = self.exp_avg.iter().zip(&self.exp_avg_sq);
        for ((_, param), ((m, v), master)) in self.params.iter().zip(moments.zip(&self.master)) {
            let grad = param.grad();
            if !grad.defined() {
                continue;
            }
            grads.push(grad.to_kind(Kind::Float));
            targets.push(match master {
                Some(m) => m.shallow_clone(),
                None => param.shallow_clone(),
            });
            firsts.push(m.shallow_clone());
            seconds.push(v.shallow_clone());
            if master.is_some() {
                rounded.push((param.shallow_clone(), targets.len() - 1));
            }
        }
        let Some(first) = targets.first() else {
            return;
        };
        let step = Tensor::full([], self.step as f64, (Kind::Float, first.device()));
        fn refs(v: &[Tensor]) -> Vec<&Tensor> {
            v.iter().collect()
        }
        let steps: Vec<&Tensor> = targets.iter().map(|_| &step).collect();
        drmas_kernels::fused_adamw(
            &refs(&targets),
            &refs(&grads),
            &refs(&firsts),
            &refs(&seconds),
            &steps,
            drmas_kernels::AdamW {
                lr,
                beta1: self.config.beta1,
                beta2: self.config.beta2,
                weight_decay: self.config.weight_decay,
                eps: self.config.eps,
            },
        )
        .expect("the optimizer's own tensors match their parameters");
        for (mut param, i) in rounded {
            param.copy_(&targets[i]);
        }
    }

    /// Steps taken (restored by [`AdamW::load_state`]).
    pub fn steps(&self) -> i64 {
        self.step
    }

    /// Named state for saving: "exp_avg.<param>" and "exp_avg_sq.<param>", plus the step
    /// count. The tensors share storage with the live moments: write them out before the
    /// next step.
    pub fn state(&self) -> (Vec<(String, Tensor)>, i64) {
        let names = self.params.iter().map(|(name, _)| name);
        let tensors = names
            .clone()
            .zip(&self.exp_avg)
            .map(|(name, t)| (format!("exp_avg.{name}"), t.shallow_clone()))
            .chain(
                names
                    .clone()
                    .zip(&self.exp_avg_sq)
                    .map(|(name, t)| (format!("exp_avg_sq.{name}"), t.shallow_clone())),
            )
            .chain(names.zip(&self.master).filter_map(|(name, m)| {
                m.as_ref()
                    .map(|t| (format!("master.{name}"), t.shallow_clone()))
            }))
            .collect();
        (tensors, self.step)
    }

    /// Restores the state [`AdamW::state`] gave, bit-exactly. Everything is checked before
    /// anything is changed: a missing, extra or repeated name, or a shape or dtype that
    /// differs, is refused naming the tensor.
    pub fn load_state(
        &mut self,
        tensors: &[(String, Tensor)],
        step: i64,
    ) -> Result<(), TrainError> {
        let (own, _) = self.state();
        let shapes: Vec<(String, Vec<i64>)> =
            own.iter().map(|(n, t)| (n.clone(), t.size())).collect();
        let checked = check_saved_state(&shapes, &self.params, tensors, step)?;
        let _guard = tch::no_grad_guard();
        for (name, mut own) in own {
            if let Some(t) = checked.given.get(name.as_str()) {
                own.f_copy_(t)?;
            }
        }
        if checked.rebuild_masters {
            let mut rebuilt = 0;
            for ((_, p), m) in self.params.iter().zip(&mut self.master) {
                if let Some(m) = m {
                    m.f_copy_(&p.to_kind(Kind::Float))?;
                    rebuilt += 1;
                }
            }
            warn_rebuilt(rebuilt);
        }
        self.step = step;
        Ok(())
    }

    /// Moves the moments and master weights (the parameters are moved by their owner).
    pub fn to_device(&mut self, device: Device) {
        self.map_state(|t| t.to_device(device));
    }

    /// Replaces every state tensor (moments, master weights) by `f` of it: how the
    /// owner moves the state to host memory and back.
    pub fn map_state(&mut self, mut f: impl FnMut(&Tensor) -> Tensor) {
        let masters = self.master.iter_mut().flatten();
        for t in self
            .exp_avg
            .iter_mut()
            .chain(self.exp_avg_sq.iter_mut())
            .chain(masters)
        {
            *t = f(t);
        }
    }

    /// Bytes of state (moments and master weights).
    pub fn state_bytes(&self) -> u64 {
        let masters = self.master.iter().flatten();
        self.exp_avg
            .iter()
            .chain(&self.exp_avg_sq)
            .chain(masters)
            .map(|t| (t.numel() * t.kind().elt_size_in_bytes()) as u64)
            .sum()
    }
}

/// A saved state (the names, shapes and values [`AdamW::state`] writes) checked against
/// the parameters it is to be loaded for: what to copy, by name.
pub(crate) struct CheckedState<'t> {
    /// Every expected tensor, by name (the masters left out when they are rebuilt).
    pub given: HashMap<&'t str, &'t Tensor>,
    /// The state has no master weights at all: they are rebuilt from the parameters.
    pub rebuild_masters: bool,
}

/// Checks a saved state against `expected` (its names and shapes, masters included) and
/// `params` before anything is changed: a negative step count, a missing, extra or
/// repeated name, a shape or dtype that differs, or values no optimizer writes are
/// refused naming the tensor. A state without any `master.` tensor (written before
/// drmas kept them, or in float32) is accepted: its masters are to be rebuilt.
pub(crate) fn check_saved_state<'t>(
    expected: &[(String, Vec<i64>)],
    params: &[(String, Tensor)],
    tensors: &'t [(String, Tensor)],
    step: i64,
) -> Result<CheckedState<'t>, TrainError> {
    if step < 0 {
        return Err(TrainError::State {
            name: "step".into(),
            message: format!("step count {step} is negative"),
        });
    }
    let mut given: HashMap<&str, &Tensor> = HashMap::new();
    for (name, t) in tensors {
        if given.insert(name, t).is_some() {
            return Err(TrainError::State {
                name: name.clone(),
                message: "given more than once".into(),
            });
        }
    }
    // A checkpoint written before master weights existed has none: they are rebuilt
    // from the (already restored) parameters, as that run's steps used them.
    let rebuild_masters = !given.keys().any(|n| n.starts_with("master."));
    let expected: Vec<&(String, Vec<i64>)> = expected
        .iter()
        .filter(|(n, _)| !(rebuild_masters && n.starts_with("master.")))
        .collect();
    let mut found: HashMap<&'t str, &'t Tensor> = HashMap::new();
    for (name, shape) in &expected {
        let Some((key, t)) = given.remove_entry(name.as_str()) else {
            return Err(TrainError::State {
                name: name.clone(),
                message: "missing".into(),
            });
        };
        if t.size() != *shape {
            return Err(TrainError::State {
                name: name.clone(),
                message: format!("shape {:?}, expected {:?}", t.size(), shape),
            });
        }
        if t.kind() != Kind::Float {
            return Err(TrainError::State {
                name: name.clone(),
                message: format!("dtype {:?}, expected Float", t.kind()),
            });
        }
        found.insert(key, t);
    }
    if let Some(name) = given.keys().min() {
        return Err(TrainError::State {
            name: name.to_string(),
            message: "not a moment of any parameter".into(),
        });
    }
    for (name, _) in &expected {
        check_values(name, found[name.as_str()], params)?;
    }
    Ok(CheckedState {
        given: found,
        rebuild_masters,
    })
}

/// What shapes cannot show about a saved state's tensor `name`: every value finite,
/// every second moment (a running mean of squares) at least 0, and every master weight
/// rounding to its (already restored) parameter, which a state saved beside other
/// weights does not. A damaged or mismatched file is refused naming the tensor.
fn check_values(name: &str, t: &Tensor, params: &[(String, Tensor)]) -> Result<(), TrainError> {
    let _guard = tch::no_grad_guard();
    let bad = |message: &str| {
        Err(TrainError::State {
            name: name.to_string(),
            message: message.into(),
        })
    };
    // One sum finds any NaN or infinity (a finite sum proves there is none).
    if !t.f_sum(Kind::Double)?.f_double_value(&[])?.is_finite()
        && t.f_isfinite()?.f_all()?.f_int64_value(&[])? == 0
    {
        return bad("holds NaN or infinite values: the file is damaged");
    }
    if name.starts_with("exp_avg_sq.") && t.numel() > 0 && t.f_min()?.f_double_value(&[])? < 0.0 {
        return bad(
            "holds negative values, which a second moment (a mean of squares) cannot: the file is damaged",
        );
    }
    if let Some((_, param)) = name
        .strip_prefix("master.")
        .and_then(|p| params.iter().find(|(n, _)| n == p))
        && !t.f_to_kind(param.kind())?.equal(param)
    {
        return bad("does not round to the parameter's weights: it was saved with other weights");
    }
    Ok(())
}

/// Says that master weights were rebuilt from the parameters, when some were.
pub(crate) fn warn_rebuilt(rebuilt: usize) {
    if rebuilt > 0 {
        tracing::warn!(
            rebuilt,
            "the optimizer state has no f32 master weights (written before drmas kept them, or by a run in float32): rebuilt from the parameters"
        );
    }
}

/// One AdamW update of `p` (f32 values: a master, or the parameter itself) from its f32
/// `grad` at step `step` (counted from 1), the moments in place: the same sequence of
/// operations as torch's single-tensor AdamW. The whole optimizer runs it per tensor,
/// the sharded one per rank's shard, so the two cannot drift apart.
pub(super) fn adamw_update(
    p: &mut Tensor,
    grad: &Tensor,
    exp_avg: &mut Tensor,
    exp_avg_sq: &mut Tensor,
    config: &AdamWConfig,
    step: i64,
    lr: f64,
) {
    let AdamWConfig {
        beta1,
        beta2,
        eps,
        weight_decay,
    } = *config;
    // powf, not powi: the same pow() as Python's `beta ** step` in torch.
    let bias_correction1 = 1.0 - beta1.powf(step as f64);
    let bias_correction2_sqrt = (1.0 - beta2.powf(step as f64)).sqrt();
    let step_size = lr / bias_correction1;
    *p *= 1.0 - lr * weight_decay;
    let _ = exp_avg.lerp_(grad, 1.0 - beta1);
    *exp_avg_sq *= beta2;
    let _ = exp_avg_sq.addcmul_(grad, &(grad * (1.0 - beta2)));
    // In place on one temporary: the same arithmetic as `sqrt(v) / bc2 + eps`.
    let mut denom = exp_avg_sq.sqrt();
    denom /= bias_correction2_sqrt;
    denom += eps;
    let _ = p.addcdiv_(&(&*exp_avg * -step_size), &denom);
}

/// Σ x² of a tensor, to about 1e-8 relative: the norms of its rows of 4096 elements in
/// the tensor's own precision, their squares summed in f64. As exact as converting the
/// tensor to f64 first (which a gradient the size of an embedding makes a 1 GiB copy
/// and 30× slower), unlike one norm over the whole tensor in f32 (3e-3 off on 28M
/// elements, measured).
pub fn sum_of_squares(t: &Tensor) -> f64 {
    sum_of_squares_on_device(t).double_value(&[])
}

/// [`sum_of_squares`] left on the tensor's device: a float64 scalar.
fn sum_of_squares_on_device(t: &Tensor) -> Tensor {
    const ROW: i64 = 4096;
    let flat = t.reshape([-1]);
    let n = flat.size()[0];
    let rows = n / ROW;
    let mut sum = Tensor::from(0f64).to_device(t.device());
    if rows > 0 {
        sum += flat
            .narrow(0, 0, rows * ROW)
            .view([rows, ROW])
            .norm_scalaropt_dim(2, [1i64].as_slice(), false)
            .to_kind(Kind::Double)
            .square()
            .sum(Kind::Double);
    }
    if n > rows * ROW {
        let tail = flat
            .narrow(0, rows * ROW, n - rows * ROW)
            .to_kind(Kind::Double);
        sum += tail.dot(&tail);
    }
    sum
}

/// Σ x² over many tensors, added on the device in the order given from `start` and
/// read once: the same float64 additions, so the same bits, as reading each
/// [`sum_of_squares`] and adding on the host, without a wait for the device per
/// tensor (a model's gradients are hundreds of them).
pub struct SquaresOnDevice {
    start: f64,
    acc: Option<Tensor>,
}

impl SquaresOnDevice {
    /// `start`: the host sum's first value (`Iterator::sum` of f64 starts at −0.0).
    pub fn new(start: f64) -> Self {
        Self { start, acc: None }
    }

    pub fn add(&mut self, t: &Tensor) {
        let s = sum_of_squares_on_device(t);
        self.acc = Some(match self.acc.take() {
            None => Tensor::from(self.start).to_device(s.device()) + s,
            Some(a) => a + s,
        });
    }

    pub fn read(self) -> f64 {
        self.acc.map_or(self.start, |a| a.double_value(&[]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fused kernel a GPU steps with against the formula the CPU steps with, on
    /// libtorch's CPU implementation of the same operator: 20 steps of 100,000 weights
    /// with random gradients (lr 1e-3, torch's defaults) end within 2 float32 last bits
    /// of each other, each weight judged at its own magnitude but at least 1's (a weight
    /// of 3 has a last bit of 2.4e-7, one of 1 or less 1.2e-7): the kernels round the
    /// weight's sum with its update differently. The most measured: 1.19e-7 on an
    /// AVX-512 Xeon, 2.38e-7 on an AMD EPYC.
    #[test]
    fn fused_and_eager_adamw_agree() {
        tch::manual_seed(11);
        let init = Tensor::randn([100_000], (Kind::Float, Device::Cpu));
        let make = || {
            let p = init.copy().set_requires_grad(true);
            AdamW::new(
                vec![("w".into(), p.shallow_clone())],
                AdamWConfig::default(),
            )
        };
        let (mut eager, mut fused) = (make(), make());
        let mut worst = 0f64;
        for _ in 0..20 {
            let g = Tensor::randn([100_000], (Kind::Float, Device::Cpu)) * 0.01;
            for o in [&mut eager, &mut fused] {
                o.zero_grad();
                // d/dw Σ w·g = g
                (&o.params[0].1 * &g).sum(Kind::Float).backward();
            }
            eager.step(1e-3);
            fused.step += 1;
            fused.fused_step(1e-3);
            let (e, f) = (&eager.params[0].1, &fused.params[0].1);
            // float32's last bit at each weight's magnitude, at least 1's.
            let ulp = e.abs().clamp_min(1.0) * f64::from(f32::EPSILON);
            let bits = ((e - f).abs() / ulp).max();
            worst = worst.max(bits.double_value(&[]));
        }
        assert!(worst <= 2.0, "{worst} last bits apart");
        let moved = (&fused.params[0].1 - &init).abs().max().double_value(&[]);
        assert!(moved > 1e-2, "the steps moved the weights: {moved}");
    }

    #[test]
    fn sum_of_squares_is_as_exact_as_f64_on_a_large_tensor() {
        // 10,000 halves (two rows of 4096 and a tail): exactly 2500.
        assert_eq!(
            sum_of_squares(&Tensor::full([100, 100], 0.5, (Kind::Float, Device::Cpu))),
            2500.0
        );
        tch::manual_seed(3);
        let g = Tensor::randn([3_000_001], (Kind::Float, Device::Cpu)) * 1e-3;
        let exact = g
            .to_kind(Kind::Double)
            .square()
            .sum(Kind::Double)
            .double_value(&[]);
        let ours = sum_of_squares(&g);
        assert!(((ours - exact) / exact).abs() < 1e-7, "{ours} vs {exact}");
        assert_eq!(sum_of_squares(&Tensor::from_slice(&[3.0f32, 4.0])), 25.0);
        // Many tensors summed on the device: the host's bits.
        let parts = [
            g.narrow(0, 0, 8193),
            g.narrow(0, 8193, 5),
            g.narrow(0, 9000, 70_000),
        ];
        let host: f64 = parts.iter().map(sum_of_squares).sum();
        let mut on_device = SquaresOnDevice::new(-0.0);
        for p in &parts {
            on_device.add(p);
        }
        assert_eq!(on_device.read().to_bits(), host.to_bits());
        assert_eq!(
            SquaresOnDevice::new(-0.0).read().to_bits(),
            (-0.0f64).to_bits()
        );
    }

    fn param(values: &[f32]) -> Tensor {
        Tensor::from_slice(values).set_requires_grad(true)
    }

    #[test]
    fn state_without_master_weights_rebuilds_them_from_the_parameters() {
        let p = Tensor::from_slice(&[0.5f32, -2.0])
            .to_kind(Kind::BFloat16)
            .set_requires_grad(true);
        let mut opt = AdamW::new(
            vec![("w".into(), p.shallow_clone())],
            AdamWConfig::default(),
        );
        let (state, _) = opt.state();
        let old: Vec<(String, Tensor)> = state
            .into_iter()
            .filter(|(n, _)| !n.starts_with("master."))
            .map(|(n, t)| (n, t.copy()))
            .collect();
        assert_eq!(old.len(), 2);
        opt.load_state(&old, 3).unwrap();
        assert_eq!(opt.steps(), 3);
        let (state, _) = opt.state();
        let master = &state.iter().find(|(n, _)| n == "master.w").unwrap().1;
        assert_eq!(Vec::<f32>::try_from(master).unwrap(), [0.5, -2.0]);
    }

    #[test]
    fn a_bf16_parameter_accumulates_steps_below_its_precision_in_an_f32_master() {
        // bf16 holds 1.0 and then 0.99609375: a step of 1e-4 rounds back to 1.0 every
        // time unless the update goes to an f32 copy.
        let p = Tensor::from_slice(&[1.0f32])
            .to_kind(Kind::BFloat16)
            .set_requires_grad(true);
        let config = AdamWConfig {
            weight_decay: 0.0,
            ..AdamWConfig::default()
        };
        let mut opt = AdamW::new(vec![("w".into(), p.shallow_clone())], config);
        for _ in 0..50 {
            opt.zero_grad();
            (&p * 1.0).sum(Kind::Float).backward();
            opt.step(1e-4);
        }
        // Adam's first steps move by lr each (a constant gradient): 1 − 50e-4 = 0.995.
        let (state, _) = opt.state();
        let master = state.iter().find(|(n, _)| n == "master.w").unwrap();
        assert_eq!(master.1.kind(), Kind::Float);
        let m = master.1.double_value(&[0]);
        assert!((m - 0.995).abs() < 1e-5, "{m}");
        assert_eq!(p.kind(), Kind::BFloat16);
        assert_eq!(p.to_kind(Kind::Float).double_value(&[0]), 0.99609375);
        assert_eq!(opt.state_bytes(), 3 * 4);
    }

    /// Makes `p.grad` exactly `g` (d/dp Σ p·g = g).
    fn set_grad(p: &Tensor, g: &[f32]) {
        let mut p = p.shallow_clone();
        p.zero_grad();
        (&p * Tensor::from_slice(g)).sum(Kind::Float).backward();
    }

    fn values(t: &Tensor) -> Vec<f32> {
        Vec::<f32>::try_from(t.detach()).unwrap()
    }

    #[track_caller]
    fn close(got: &[f32], want: &[f64]) {
        for (g, w) in got.iter().zip(want) {
            assert!(
                (f64::from(*g) - w).abs() < 1e-6,
                "got {got:?}, want {want:?}"
            );
        }
    }

    fn no_decay() -> AdamWConfig {
        AdamWConfig {
            weight_decay: 0.0,
            ..AdamWConfig::default()
        }
    }

    #[test]
    fn two_steps_by_hand() {
        // lr 0.1, β = (0.9, 0.999), eps 1e-8; p = [1, −2, 0.5]; g1 = [0.1, −0.2, 0], g2 = [0.3, 0.2, 0.4]
        // m_t = 0.9·m + 0.1·g, v_t = 0.999·v + 0.001·g², p −= 0.1·(m_t/(1−0.9^t)) / (√(v_t/(1−0.999^t)) + 1e-8)
        let p = param(&[1.0, -2.0, 0.5]);
        let mut opt = AdamW::new(vec![("w".into(), p.shallow_clone())], no_decay());
        set_grad(&p, &[0.1, -0.2, 0.0]);
        opt.step(0.1);
        // Step 1: m̂ = g, v̂ = g², so p −= 0.1·g/(|g| + 1e-8): [1 − 0.1, −2 + 0.1, 0.5 − 0]
        close(&values(&p), &[0.9, -1.9, 0.5]);
        set_grad(&p, &[0.3, 0.2, 0.4]);
        opt.step(0.1);
        // Step 2, bias corrections 1 − 0.9² = 0.19 and 1 − 0.999² = 0.001999:
        // [0] m = 0.009 + 0.03 = 0.039, m̂ = 0.205263; v = 0.999e-5 + 9e-5 = 9.999e-5,
        //     v̂ = 0.050020, √ = 0.223652; 0.9 − 0.1·0.205263/0.223652 = 0.808222
        // [1] m = −0.018 + 0.02 = 0.002, m̂ = 0.010526; v = 3.996e-5 + 4e-5 = 7.996e-5,
        //     v̂ = 0.04, √ = 0.2; −1.9 − 0.1·0.010526/0.2 = −1.905263
        // [2] m = 0.04, m̂ = 0.210526; v = 1.6e-4, v̂ = 0.080040, √ = 0.282913;
        //     0.5 − 0.1·0.210526/0.282913 = 0.425586
        close(&values(&p), &[0.808_221_9, -1.905_263_2, 0.425_586_3]);
        assert_eq!(opt.steps(), 2);
    }

    #[test]
    fn weight_decay_is_decoupled() {
        // p ← p·(1 − lr·wd) = p·(1 − 0.1·0.01) = 0.999·p, then the Adam step of 0.1·sign(g):
        // [0.999 − 0.1, −1.998 + 0.1, 0.4995 − 0]
        let p = param(&[1.0, -2.0, 0.5]);
        let mut opt = AdamW::new(
            vec![("w".into(), p.shallow_clone())],
            AdamWConfig::default(),
        );
        set_grad(&p, &[0.1, -0.2, 0.0]);
        opt.step(0.1);
        close(&values(&p), &[0.899, -1.898, 0.4995]);
    }

    #[test]
    fn a_parameter_without_gradient_is_left_alone() {
        let a = param(&[1.0]);
        let b = param(&[5.0]);
        let params = vec![
            ("a".into(), a.shallow_clone()),
            ("b".into(), b.shallow_clone()),
        ];
        let mut opt = AdamW::new(params, AdamWConfig::default());
        set_grad(&a, &[1.0]);
        opt.step(0.1);
        assert_eq!(values(&b), [5.0]);
    }

    #[test]
    fn grad_norm_and_clipping() {
        let a = param(&[0.0, 0.0, 0.0]);
        let b = param(&[0.0]);
        let no_grad = param(&[0.0]);
        let params = vec![
            ("a".into(), a.shallow_clone()),
            ("b".into(), b.shallow_clone()),
            ("c".into(), no_grad.shallow_clone()),
        ];
        let mut opt = AdamW::new(params, AdamWConfig::default());
        set_grad(&a, &[3.0, 4.0, 0.0]);
        set_grad(&b, &[12.0]);
        // √(9 + 16 + 144) = 13
        assert_eq!(opt.grad_norm(), 13.0);
        // Under the bound: untouched.
        assert_eq!(opt.clip_grad_norm(20.0), 13.0);
        assert_eq!(values(&a.grad()), [3.0, 4.0, 0.0]);
        // coef = 6.5 / (13 + 1e-6) ≈ 0.5: [1.5, 2, 0] and [6]
        assert_eq!(opt.clip_grad_norm(6.5), 13.0);
        let coef = 6.5 / (13.0 + 1e-6);
        close(&values(&a.grad()), &[3.0 * coef, 4.0 * coef, 0.0]);
        close(&values(&b.grad()), &[12.0 * coef]);
        assert!((opt.grad_norm() - 6.5).abs() < 1e-5);
        opt.zero_grad();
        assert_eq!(opt.grad_norm(), 0.0);
    }

    fn grad_at(step: usize) -> [f32; 3] {
        let s = step as f32;
        [0.1 * s - 0.2, 0.05 + 0.01 * s * s, -0.3 / (s + 1.0)]
    }

    #[test]
    fn saved_state_continues_bit_identically() {
        let start = [0.3f32, -0.7, 1.1];
        // Uninterrupted: four steps.
        let p = param(&start);
        let mut opt = AdamW::new(
            vec![("w".into(), p.shallow_clone())],
            AdamWConfig::default(),
        );
        for step in 0..4 {
            set_grad(&p, &grad_at(step));
            opt.step(0.01);
        }

        // Two steps, save (copies, as a checkpoint would), then a fresh optimizer resumes.
        let q = param(&start);
        let mut first = AdamW::new(
            vec![("w".into(), q.shallow_clone())],
            AdamWConfig::default(),
        );
        for step in 0..2 {
            set_grad(&q, &grad_at(step));
            first.step(0.01);
        }
        let (state, steps) = first.state();
        let saved: Vec<(String, Tensor)> =
            state.iter().map(|(n, t)| (n.clone(), t.copy())).collect();
        let names: Vec<&str> = saved.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["exp_avg.w", "exp_avg_sq.w"]);
        let resumed = param(&values(&q));
        let mut second = AdamW::new(
            vec![("w".into(), resumed.shallow_clone())],
            AdamWConfig::default(),
        );
        second.load_state(&saved, steps).unwrap();
        assert_eq!(second.steps(), 2);
        for step in 2..4 {
            set_grad(&resumed, &grad_at(step));
            second.step(0.01);
        }
        assert_eq!(values(&resumed), values(&p));
        let (a, _) = opt.state();
        let (b, _) = second.state();
        for ((_, a), (_, b)) in a.iter().zip(&b) {
            assert_eq!(values(a), values(b));
        }
    }

    #[test]
    fn load_state_refuses_a_wrong_name_or_shape() {
        let p = param(&[1.0, 2.0]);
        let mut opt = AdamW::new(
            vec![("w".into(), p.shallow_clone())],
            AdamWConfig::default(),
        );
        let zeros = |n: i64| Tensor::zeros([n], (Kind::Float, Device::Cpu));
        let error = |opt: &mut AdamW, state: Vec<(&str, Tensor)>| {
            let state: Vec<(String, Tensor)> =
                state.into_iter().map(|(n, t)| (n.to_string(), t)).collect();
            opt.load_state(&state, 1).unwrap_err().to_string()
        };
        assert_eq!(
            error(&mut opt, vec![("exp_avg.w", zeros(2))]),
            "optimizer state `exp_avg_sq.w`: missing"
        );
        assert_eq!(
            error(
                &mut opt,
                vec![("exp_avg.w", zeros(2)), ("exp_avg_sq.w", zeros(3))]
            ),
            "optimizer state `exp_avg_sq.w`: shape [3], expected [2]"
        );
        assert_eq!(
            error(
                &mut opt,
                vec![
                    ("exp_avg.w", zeros(2)),
                    ("exp_avg_sq.w", zeros(2)),
                    ("exp_avg.v", zeros(2))
                ]
            ),
            "optimizer state `exp_avg.v`: not a moment of any parameter"
        );
        assert_eq!(opt.steps(), 0);
    }
}
