//! Rotary position embeddings, rotate-half variant, computed as transformers does
//! (float32 inverse frequencies, one product per angle) so logits match to 1e-5.

use tch::{Device, Kind, Tensor};

pub struct Rope {
    /// [max_pos, head_dim]
    cos: Tensor,
    sin: Tensor,
}

impl Rope {
    pub fn new(head_dim: i64, theta: f64, max_pos: i64, device: Device, kind: Kind) -> Self {
        let exps = Tensor::arange_start_step(0, head_dim, 2, (Kind::Int64, device))
            .to_kind(Kind::Float)
            / head_dim as f64;
        let inv_freq = Tensor::from(theta as f32)
            .to_device(device)
            .pow(&exps)
            .reciprocal();
        let pos = Tensor::arange(max_pos, (Kind::Int64, device)).to_kind(Kind::Float);
        let freqs = pos.unsqueeze(1) * inv_freq.unsqueeze(0);
        let emb = Tensor::cat(&[&freqs, &freqs], -1);
        Self {
            cos: emb.cos().to_kind(kind),
            sin: emb.sin().to_kind(kind),
        }
    }

    pub fn max_positions(&self) -> i64 {
        self.cos.size()[0]
    }

    /// cos and sin for `positions` [B, T], shaped [B, 1, T, head_dim] to broadcast over heads.
    pub fn tables(&self, positions: &Tensor) -> (Tensor, Tensor) {
        let cos = self.cos.index_select(0, &positions.flatten(0, -1));
        let sin = self.sin.index_select(0, &positions.flatten(0, -1));
        let mut shape = positions.size();
        shape.push(-1);
        (
            cos.view(shape.as_slice()).unsqueeze(1),
            sin.view(shape.as_slice()).unsqueeze(1),
        )
    }
}

/// x * cos + rotate_half(x) * sin, for x [B, H, T, D].
pub fn apply(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Tensor {
    let half = x.size()[3] / 2;
    let x1 = x.narrow(3, 0, half);
    let x2 = x.narrow(3, half, half);
    let rotated = Tensor::cat(&[&x2.neg(), &x1], 3);
    x * cos + rotated * sin
}
