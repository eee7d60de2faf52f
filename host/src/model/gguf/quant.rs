//! ggml tensor types and their dequantization to f32, block by block, following the
//! block layouts and arithmetic of ggml's reference `dequantize_row_*` (ggml-quants.c)
//! exactly, so the values equal gguf-py's `gguf.quants.dequantize` bit for bit.
//!
//! Block layouts (bytes, in order):
//! - Q4_0 (32 values, 18 B): f16 d, 16 B nibbles; y = (q - 8)·d
//! - Q4_1 (32, 20): f16 d, f16 m, 16 B nibbles; y = q·d + m
//! - Q5_0 (32, 22): f16 d, u32 high bits, 16 B nibbles; y = (q - 16)·d
//! - Q5_1 (32, 24): f16 d, f16 m, u32 high bits, 16 B nibbles; y = q·d + m
//! - Q8_0 (32, 34): f16 d, 32 × i8; y = q·d
//!
//! (nibbles: byte j holds value j in its low half and value j + 16 in its high half)
//!
//! K-quants, super-blocks of 256:
//! - Q2_K (84): 16 B scales (4-bit scale | 4-bit min), 64 B 2-bit quants, f16 d, f16 dmin
//! - Q3_K (110): 32 B high-bit mask, 64 B 2-bit quants, 12 B 6-bit scales, f16 d
//! - Q4_K (144): f16 d, f16 dmin, 12 B 6-bit scales and mins, 128 B nibbles
//! - Q5_K (176): f16 d, f16 dmin, 12 B scales and mins, 32 B high bits, 128 B nibbles
//! - Q6_K (210): 128 B low nibbles, 64 B high 2 bits, 16 × i8 scales, f16 d

use super::reader::TensorInfo;

/// The ggml types this importer dequantizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GgmlType {
    F32,
    F16,
    BF16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q2K,
    Q3K,
    Q4K,
    Q5K,
    Q6K,
}

/// Names of every ggml type id, for messages (including those not implemented).
pub fn type_name(id: u32) -> String {
    let name = match id {
        0 => "F32",
        1 => "F16",
        2 => "Q4_0",
        3 => "Q4_1",
        6 => "Q5_0",
        7 => "Q5_1",
        8 => "Q8_0",
        9 => "Q8_1",
        10 => "Q2_K",
        11 => "Q3_K",
        12 => "Q4_K",
        13 => "Q5_K",
        14 => "Q6_K",
        15 => "Q8_K",
        16 => "IQ2_XXS",
        17 => "IQ2_XS",
        18 => "IQ3_XXS",
        19 => "IQ1_S",
        20 => "IQ4_NL",
        21 => "IQ3_S",
        22 => "IQ2_S",
        23 => "IQ4_XS",
        24 => "I8",
        25 => "I16",
        26 => "I32",
        27 => "I64",
        28 => "F64",
        29 => "IQ1_M",
        30 => "BF16",
        34 => "TQ1_0",
        35 => "TQ2_0",
        39 => "MXFP4",
        40 => "NVFP4",
        41 => "Q1_0",
        other => return format!("type {other}"),
    };
    name.to_string()
}

const QK_K: usize = 256;

impl GgmlType {
    pub const ALL: [GgmlType; 13] = [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::BF16,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q8_0,
        GgmlType::Q2K,
        GgmlType::Q3K,
        GgmlType::Q4K,
        GgmlType::Q5K,
        GgmlType::Q6K,
    ];

    pub fn from_id(id: u32) -> Option<Self> {
        Some(match id {
            0 => GgmlType::F32,
            1 => GgmlType::F16,
            30 => GgmlType::BF16,
            2 => GgmlType::Q4_0,
            3 => GgmlType::Q4_1,
            6 => GgmlType::Q5_0,
            7 => GgmlType::Q5_1,
            8 => GgmlType::Q8_0,
            10 => GgmlType::Q2K,
            11 => GgmlType::Q3K,
            12 => GgmlType::Q4K,
            13 => GgmlType::Q5K,
            14 => GgmlType::Q6K,
            _ => return None,
        })
    }

    pub fn id(self) -> u32 {
        match self {
            GgmlType::F32 => 0,
            GgmlType::F16 => 1,
            GgmlType::BF16 => 30,
            GgmlType::Q4_0 => 2,
            GgmlType::Q4_1 => 3,
            GgmlType::Q5_0 => 6,
            GgmlType::Q5_1 => 7,
            GgmlType::Q8_0 => 8,
            GgmlType::Q2K => 10,
            GgmlType::Q3K => 11,
            GgmlType::Q4K => 12,
            GgmlType::Q5K => 13,
            GgmlType::Q6K => 14,
        }
    }

    pub fn name(self) -> String {
        type_name(self.id())
    }

    /// (values per block, bytes per block).
    pub fn block(self) -> (usize, usize) {
        match self {
            GgmlType::F32 => (1, 4),
            GgmlType::F16 | GgmlType::BF16 => (1, 2),
            GgmlType::Q4_0 => (32, 18),
            GgmlType::Q4_1 => (32, 20),
            GgmlType::Q5_0 => (32, 22),
            GgmlType::Q5_1 => (32, 24),
            GgmlType::Q8_0 => (32, 34),
            GgmlType::Q2K => (QK_K, 84),
            GgmlType::Q3K => (QK_K, 110),
            GgmlType::Q4K => (QK_K, 144),
            GgmlType::Q5K => (QK_K, 176),
            GgmlType::Q6K => (QK_K, 210),
        }
    }

    /// Stored size of `info` in this type; blocks run along the innermost dimension, so
    /// it must be a multiple of the block size.
    pub fn bytes_for(self, info: &TensorInfo) -> Result<u64, String> {
        let (per_block, block_bytes) = self.block();
        let inner = info.dims[0];
        if !inner.is_multiple_of(per_block as u64) {
            return Err(format!(
                "innermost size {inner} is not a multiple of the {} block size {per_block}",
                self.name()
            ));
        }
        info.dims
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .and_then(|n| (n / per_block as u64).checked_mul(block_bytes as u64))
            .ok_or_else(|| format!("sizes {:?} overflow", info.dims))
    }
}

#[inline]
fn f16_at(b: &[u8], at: usize) -> f32 {
    half::f16::from_bits(u16::from_le_bytes([b[at], b[at + 1]])).to_f32()
}

/// Dequantizes `data` (whole blocks of `kind`) into `out`, which holds exactly the
/// values those blocks encode.
pub fn dequantize(kind: GgmlType, data: &[u8], out: &mut [f32]) {
    let (per_block, block_bytes) = kind.block();
    assert_eq!(data.len() % block_bytes, 0, "{kind:?}: partial block");
    assert_eq!(
        data.len() / block_bytes * per_block,
        out.len(),
        "{kind:?}: output size"
    );
    let blocks = data
        .chunks_exact(block_bytes)
        .zip(out.chunks_exact_mut(per_block));
    match kind {
        GgmlType::F32 => {
            for (b, y) in blocks {
                y[0] = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            }
        }
        GgmlType::F16 => {
            for (b, y) in blocks {
                y[0] = f16_at(b, 0);
            }
        }
        GgmlType::BF16 => {
            for (b, y) in blocks {
                y[0] = f32::from_bits(u32::from(u16::from_le_bytes([b[0], b[1]])) << 16);
            }
        }
        GgmlType::Q4_0 => blocks.for_each(|(b, y)| q4_0(b, y)),
        GgmlType::Q4_1 => blocks.for_each(|(b, y)| q4_1(b, y)),
        GgmlType::Q5_0 => blocks.for_each(|(b, y)| q5_0(b, y)),
        GgmlType::Q5_1 => blocks.for_each(|(b, y)| q5_1(b, y)),
        GgmlType::Q8_0 => blocks.for_each(|(b, y)| q8_0(b, y)),
        GgmlType::Q2K => blocks.for_each(|(b, y)| q2_k(b, y)),
        GgmlType::Q3K => blocks.for_each(|(b, y)| q3_k(b, y)),
        GgmlType::Q4K => blocks.for_each(|(b, y)| q4_k(b, y)),
        GgmlType::Q5K => blocks.for_each(|(b, y)| q5_k(b, y)),
        GgmlType::Q6K => blocks.for_each(|(b, y)| q6_k(b, y)),
    }
}

fn q4_0(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let qs = &b[2..18];
    for j in 0..16 {
        y[j] = ((qs[j] & 0x0F) as i32 - 8) as f32 * d;
        y[j + 16] = ((qs[j] >> 4) as i32 - 8) as f32 * d;
    }
}

fn q4_1(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let m = f16_at(b, 2);
    let qs = &b[4..20];
    for j in 0..16 {
        y[j] = (qs[j] & 0x0F) as f32 * d + m;
        y[j + 16] = (qs[j] >> 4) as f32 * d + m;
    }
}

fn q5_0(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
    let qs = &b[6..22];
    for j in 0..16 {
        let h0 = ((qh >> j) << 4) & 0x10;
        let h1 = (qh >> (j + 12)) & 0x10;
        y[j] = ((u32::from(qs[j] & 0x0F) | h0) as i32 - 16) as f32 * d;
        y[j + 16] = ((u32::from(qs[j] >> 4) | h1) as i32 - 16) as f32 * d;
    }
}

fn q5_1(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let m = f16_at(b, 2);
    let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
    let qs = &b[8..24];
    for j in 0..16 {
        let h0 = ((qh >> j) << 4) & 0x10;
        let h1 = (qh >> (j + 12)) & 0x10;
        y[j] = (u32::from(qs[j] & 0x0F) | h0) as f32 * d + m;
        y[j + 16] = (u32::from(qs[j] >> 4) | h1) as f32 * d + m;
    }
}

fn q8_0(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    for j in 0..32 {
        y[j] = (b[2 + j] as i8) as f32 * d;
    }
}

fn q2_k(b: &[u8], y: &mut [f32]) {
    let scales = &b[0..16];
    let qs = &b[16..80];
    let d = f16_at(b, 80);
    let dmin = f16_at(b, 82);
    let mut out = 0;
    let mut is = 0;
    for n in 0..2 {
        let q = &qs[n * 32..n * 32 + 32];
        for shift in [0u32, 2, 4, 6] {
            for half in 0..2 {
                let sc = scales[is];
                is += 1;
                let dl = d * (sc & 0x0F) as f32;
                let ml = dmin * (sc >> 4) as f32;
                for l in 0..16 {
                    y[out] = dl * ((q[half * 16 + l] >> shift) & 3) as f32 - ml;
                    out += 1;
                }
            }
        }
    }
}

fn q3_k(b: &[u8], y: &mut [f32]) {
    let hmask = &b[0..32];
    let qs = &b[32..96];
    let raw = &b[96..108];
    let d = f16_at(b, 108);
    // The 16 six-bit scales: low 4 bits from bytes 0..8 (low nibbles, then high
    // nibbles), high 2 bits from bytes 8..12 (two bits per scale, by quarter).
    let mut scales = [0i32; 16];
    for (i, s) in scales.iter_mut().enumerate() {
        let low = (raw[i % 8] >> (4 * (i / 8))) & 0x0F;
        let high = (raw[8 + i % 4] >> (2 * (i / 4))) & 0x03;
        *s = i32::from(low | (high << 4)) - 32;
    }
    let mut out = 0;
    let mut is = 0;
    let mut m: u8 = 1;
    for n in 0..2 {
        let q = &qs[n * 32..n * 32 + 32];
        for shift in [0u32, 2, 4, 6] {
            for half in 0..2 {
                let dl = d * scales[is] as f32;
                is += 1;
                for l in 0..16 {
                    let k = half * 16 + l;
                    let low = ((q[k] >> shift) & 3) as i32;
                    let sub = if hmask[k] & m != 0 { 0 } else { 4 };
                    y[out] = dl * (low - sub) as f32;
                    out += 1;
                }
            }
            m <<= 1;
        }
    }
}

/// ggml's `get_scale_min_k4`: the j-th 6-bit scale and min of a Q4_K / Q5_K block.
#[inline]
fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

fn q4_k(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let dmin = f16_at(b, 2);
    let scales = &b[4..16];
    let qs = &b[16..144];
    for g in 0..4 {
        let q = &qs[g * 32..g * 32 + 32];
        let (sc1, m1) = scale_min_k4(2 * g, scales);
        let (sc2, m2) = scale_min_k4(2 * g + 1, scales);
        let (d1, min1) = (d * sc1 as f32, dmin * m1 as f32);
        let (d2, min2) = (d * sc2 as f32, dmin * m2 as f32);
        let y = &mut y[g * 64..g * 64 + 64];
        for l in 0..32 {
            y[l] = d1 * (q[l] & 0x0F) as f32 - min1;
            y[l + 32] = d2 * (q[l] >> 4) as f32 - min2;
        }
    }
}

fn q5_k(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let dmin = f16_at(b, 2);
    let scales = &b[4..16];
    let qh = &b[16..48];
    let qs = &b[48..176];
    for g in 0..4 {
        let ql = &qs[g * 32..g * 32 + 32];
        let (u1, u2) = (1u8 << (2 * g), 2u8 << (2 * g));
        let (sc1, m1) = scale_min_k4(2 * g, scales);
        let (sc2, m2) = scale_min_k4(2 * g + 1, scales);
        let (d1, min1) = (d * sc1 as f32, dmin * m1 as f32);
        let (d2, min2) = (d * sc2 as f32, dmin * m2 as f32);
        let y = &mut y[g * 64..g * 64 + 64];
        for l in 0..32 {
            let h1 = if qh[l] & u1 != 0 { 16 } else { 0 };
            let h2 = if qh[l] & u2 != 0 { 16 } else { 0 };
            y[l] = d1 * ((ql[l] & 0x0F) + h1) as f32 - min1;
            y[l + 32] = d2 * ((ql[l] >> 4) + h2) as f32 - min2;
        }
    }
}

fn q6_k(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 208);
    for n in 0..2 {
        let ql = &b[n * 64..n * 64 + 64];
        let qh = &b[128 + n * 32..128 + n * 32 + 32];
        let sc = &b[192 + n * 8..192 + n * 8 + 8];
        let y = &mut y[n * 128..n * 128 + 128];
        for l in 0..32 {
            let is = l / 16;
            let q1 = ((ql[l] & 0x0F) | ((qh[l] & 3) << 4)) as i32 - 32;
            let q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
            let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
            let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
            y[l] = d * (sc[is] as i8) as f32 * q1 as f32;
            y[l + 32] = d * (sc[is + 2] as i8) as f32 * q2 as f32;
            y[l + 64] = d * (sc[is + 4] as i8) as f32 * q3 as f32;
            y[l + 96] = d * (sc[is + 6] as i8) as f32 * q4 as f32;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every f16 bit pattern converts as libtorch converts it.
    #[test]
    fn f16_matches_torch() {
        let bits: Vec<u8> = (0..=u16::MAX).flat_map(|v| v.to_le_bytes()).collect();
        let mut ours = vec![0f32; 1 << 16];
        dequantize(GgmlType::F16, &bits, &mut ours);
        let t = tch::Tensor::from_data_size(&bits, &[1 << 16], tch::Kind::Half)
            .to_kind(tch::Kind::Float);
        let theirs = Vec::<f32>::try_from(&t).unwrap();
        for (i, (a, b)) in ours.iter().zip(&theirs).enumerate() {
            assert!(
                a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
                "f16 {i:#06x}: {a} vs {b}"
            );
        }
    }

    #[test]
    fn q4_0_block_by_hand() {
        // d = 0.5; low nibbles 0..16, high nibbles 15..0
        let mut b = vec![0u8; 18];
        b[..2].copy_from_slice(&half::f16::from_f32(0.5).to_bits().to_le_bytes());
        for j in 0..16 {
            b[2 + j] = (j as u8) | ((15 - j as u8) << 4);
        }
        let mut y = [0f32; 32];
        dequantize(GgmlType::Q4_0, &b, &mut y);
        for j in 0..16 {
            assert_eq!(y[j], (j as f32 - 8.0) * 0.5);
            assert_eq!(y[j + 16], (7.0 - j as f32) * 0.5);
        }
    }

    #[test]
    fn q8_0_block_by_hand() {
        let mut b = vec![0u8; 34];
        b[..2].copy_from_slice(&half::f16::from_f32(0.25).to_bits().to_le_bytes());
        for j in 0..32 {
            b[2 + j] = (j as i8 - 16) as u8;
        }
        let mut y = [0f32; 32];
        dequantize(GgmlType::Q8_0, &b, &mut y);
        for (j, v) in y.iter().enumerate() {
            assert_eq!(*v, (j as f32 - 16.0) * 0.25);
        }
    }

    #[test]
    fn k_scales_unpack_six_bits() {
        // scales 0..8 = [1, 2, .., 8] | 0x40, mins = 60..; the high bits of 4..8 come
        // from the top two bits of bytes 0..8.
        let mut q = [0u8; 12];
        for j in 0..4 {
            q[j] = (j as u8 + 1) | 0x40; // scale j = j + 1, top bits 01 -> high part of scale j + 4
            q[j + 4] = (60 + j as u8) | 0x80; // min j = 60 + j, top bits 10 -> high part of min j + 4
            q[j + 8] = 0x21; // scale j + 4 low = 1, min j + 4 low = 2
        }
        for j in 0..4 {
            assert_eq!(scale_min_k4(j, &q), (j as u8 + 1, 60 + j as u8));
            assert_eq!(scale_min_k4(j + 4, &q), (1 | (1 << 4), 2 | (2 << 4)));
        }
    }
}
