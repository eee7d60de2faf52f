//! The training forward: log-probs (and entropy) of response tokens given their prompts,
//! with grad, for one micro-batch; and the planner that cuts a batch into micro-batches
//! under a token budget.

use super::{
    decoder::{Decoder, positions_from_mask, prefill_mask},
    error::{ModelError, Result},
};
use tch::{Kind, Tensor};

/// One (prompt, response) pair.
#[derive(Debug, Clone, Copy)]
pub struct SequencePair<'a> {
    pub prompt: &'a [i64],
    pub response: &'a [i64],
}

/// Per-token values of a micro-batch, [N, R] with R the longest response. Responses are
/// right-aligned: row i's token j is at column R − len_i + j; `mask` is 1 there.
pub struct ResponseLogprobs {
    pub logprobs: Tensor,
    pub entropy: Option<Tensor>,
    pub mask: Tensor,
}

impl ResponseLogprobs {
    /// Row `i`'s values, in response order (for tests and inspection).
    pub fn row(&self, i: i64, len: usize) -> Vec<f32> {
        let r = self.logprobs.size()[1];
        let row = self.logprobs.get(i).narrow(0, r - len as i64, len as i64);
        Vec::<f32>::try_from(row.to_kind(Kind::Float)).unwrap_or_default()
    }
}

/// log p(response token | prefix) under softmax(logits / temperature), with grad.
pub fn response_logprobs(
    model: &Decoder,
    pairs: &[SequencePair],
    temperature: f64,
    with_entropy: bool,
) -> Result<ResponseLogprobs> {
    if pairs
        .iter()
        .any(|p| p.prompt.is_empty() || p.response.is_empty())
    {
        return Err(ModelError::Other {
            what: "training forward".into(),
            message: "a prompt or response is empty".into(),
        });
    }
    if temperature.is_nan() || temperature <= 0.0 {
        return Err(ModelError::Other {
            what: "training forward".into(),
            message: format!("temperature must be > 0, got {temperature}"),
        });
    }
    let device = model.device();
    let n = pairs.len() as i64;
    let width = pairs
        .iter()
        .map(|p| p.prompt.len() + p.response.len())
        .max()
        .unwrap_or(0) as i64;
    let r = pairs.iter().map(|p| p.response.len()).max().unwrap_or(0) as i64;
    let mut ids = Vec::with_capacity((n * width) as usize);
    let mut valid = Vec::with_capacity((n * width) as usize);
    let mut mask = Vec::with_capacity((n * r) as usize);
    for p in pairs {
        let len = p.prompt.len() + p.response.len();
        let pad = width as usize - len;
        ids.extend(
            std::iter::repeat_n(0i64, pad)
                .chain(p.prompt.iter().copied())
                .chain(p.response.iter().copied()),
        );
        valid.extend(std::iter::repeat_n(false, pad).chain(std::iter::repeat_n(true, len)));
        let rpad = r as usize - p.response.len();
        mask.extend(
            std::iter::repeat_n(0f32, rpad).chain(std::iter::repeat_n(1f32, p.response.len())),
        );
    }
    let ids = Tensor::from_slice(&ids).view([n, width]).to_device(device);
    let valid = Tensor::from_slice(&valid)
        .view([n, width])
        .to_device(device);
    let mask = Tensor::from_slice(&mask).view([n, r]).to_device(device);
    let hidden = model.forward(
        &ids,
        &positions_from_mask(&valid),
        &prefill_mask(&valid),
        None,
    );
    // Hidden states at width-R-1 .. width-2 predict the last R tokens.
    let logits = model
        .logits(&hidden.narrow(1, width - r - 1, r))
        .to_kind(Kind::Float)
        / temperature;
    let logp_all = logits.log_softmax(-1, Kind::Float);
    let targets = ids.narrow(1, width - r, r);
    let logprobs = logp_all
        .gather(2, &targets.unsqueeze(-1), false)
        .squeeze_dim(-1)
        * &mask;
    let entropy = with_entropy
        .then(|| -(logp_all.exp() * &logp_all).sum_dim_intlist(-1, false, Kind::Float) * &mask);
    Ok(ResponseLogprobs {
        logprobs,
        entropy,
        mask,
    })
}

/// Cuts sequences (by total length) into micro-batches whose padded size, rows × longest
/// row, stays within `token_budget`. Sequences are sorted by length so rows of a
/// micro-batch pad little; a sequence longer than the budget gets a micro-batch alone.
pub fn plan_micro_batches(lengths: &[usize], token_budget: usize) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..lengths.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(lengths[i]));
    let mut batches: Vec<Vec<usize>> = Vec::new();
    let mut longest = 0;
    for i in order {
        match batches.last_mut() {
            // Sorted descending: the first row of a micro-batch is its longest.
            Some(batch) if (batch.len() + 1) * longest <= token_budget => batch.push(i),
            _ => {
                longest = lengths[i];
                batches.push(vec![i]);
            }
        }
    }
    batches
}

#[cfg(test)]
mod tests {
    use super::plan_micro_batches;

    #[test]
    fn micro_batches_respect_the_budget() {
        let lengths = [10, 3, 7, 10, 2, 30];
        let plan = plan_micro_batches(&lengths, 20);
        assert_eq!(plan, vec![vec![5], vec![0, 3], vec![2, 1], vec![4]]);
        for batch in &plan {
            let longest = batch.iter().map(|&i| lengths[i]).max().unwrap();
            assert!(batch.len() == 1 || batch.len() * longest <= 20);
        }
        let mut all: Vec<usize> = plan.concat();
        all.sort();
        assert_eq!(all, vec![0, 1, 2, 3, 4, 5]);
    }
}
