//! Integer-only inference (PROTOCOL §5, Mlp): the reference of every rule a provider and a
//! verifier must agree on to the bit — the accumulator bound, the requantization rounding
//! rule, the class tie rule and the output layout — and a plain forward pass over them.
//!
//! Integers only: an int32 accumulation is exact in any order as long as it cannot overflow,
//! so CPUs, SIMD and GPUs produce the same bytes, which floating point does not. Parsing a model
//! from its file is the keeper's business; this module takes the tensors as slices and checks
//! every bound before anything is computed.

/// Most layers.
pub const MAX_LAYERS: usize = crate::job::MAX_MLP_LAYERS as usize;
/// Widest layer (inputs or outputs).
pub const MAX_WIDTH: usize = crate::job::MAX_MLP_WIDTH as usize;
/// Largest magnitude of an int8 operand (−128): the accumulator bound's factor.
const OPERAND: i64 = 128;

/// One dense layer: `out × inp` int8 weights (row-major), int32 biases, and — for every layer
/// but the last — a fixed-point multiplier and shift per output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layer {
    /// Inputs.
    pub inp: usize,
    /// Outputs.
    pub out: usize,
    /// `W[o][j]` at `o · inp + j`.
    pub weight: Vec<i8>,
    /// One per output.
    pub bias: Vec<i32>,
    /// `(multiplier, shift)` per output, for a hidden layer.
    pub requant: Option<(Vec<i32>, Vec<i32>)>,
}

impl Layer {
    /// A hidden layer's output `o` from its accumulator: requantized, then ReLU. The layer
    /// must have passed [`Mlp::check`] (hidden layers carry a multiplier and shift).
    pub fn activation(&self, o: usize, acc: i32) -> i8 {
        let (m, s) = self
            .requant
            .as_ref()
            .expect("checked: hidden layers requantize");
        requantize(acc, m[o], s[o]).max(0)
    }
}

/// A dense ReLU classifier.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mlp {
    /// Its layers, first to last.
    pub layers: Vec<Layer>,
}

/// A model of widths `w_0 … w_L` with weights from a fixed generator seeded by `seed`, inside
/// every bound of PROTOCOL §5 (biases within ±1 000, multipliers 1 ..= 1 000, shifts
/// 14 ..= 17, so hidden values spread over the int8 range): for tests, the CU report and the
/// demo's model too large to read in a dispute.
pub fn random_mlp(widths: &[usize], seed: u64) -> Mlp {
    let mut x = seed;
    let mut next = move || {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        x >> 33
    };
    let n = widths.len() - 1;
    Mlp {
        layers: (0..n)
            .map(|l| {
                let (inp, out) = (widths[l], widths[l + 1]);
                Layer {
                    inp,
                    out,
                    weight: (0..inp * out).map(|_| next() as i8).collect(),
                    bias: (0..out).map(|_| (next() % 2_000) as i32 - 1_000).collect(),
                    requant: (l + 1 < n).then(|| {
                        (
                            (0..out).map(|_| 1 + (next() % 1_000) as i32).collect(),
                            (0..out).map(|_| 14 + (next() % 4) as i32).collect(),
                        )
                    }),
                }
            })
            .collect(),
    }
}

/// Why a model is refused (each names what broke which bound).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelError(pub String);

impl core::fmt::Display for ModelError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(&self.0)
    }
}

fn refuse<T>(msg: String) -> Result<T, ModelError> {
    Err(ModelError(msg))
}

pub use crate::feed::requantize;

/// The class of a row: the lowest index of the largest logit.
pub fn class_of(logits: &[i32]) -> u32 {
    let mut best = 0;
    for (i, &v) in logits.iter().enumerate() {
        if v > logits[best] {
            best = i;
        }
    }
    best as u32
}

/// Bytes of one output row with `classes` logits: the logits as LE `i32`, then the class.
pub fn row_len(classes: usize) -> usize {
    4 * classes + 4
}

impl Mlp {
    /// Checks every bound for a batch of width `features` and `classes` outputs: layer
    /// count, widths, that the shapes chain, tensor lengths, multipliers and shifts in range,
    /// and that no accumulator can overflow int32 for any int8 input.
    pub fn check(&self, features: usize, classes: usize) -> Result<(), ModelError> {
        let n = self.layers.len();
        if n == 0 || n > MAX_LAYERS {
            return refuse(format!(
                "a model has 1 to {MAX_LAYERS} layers, this one {n}"
            ));
        }
        let mut width = features;
        for (i, l) in self.layers.iter().enumerate() {
            if l.inp != width {
                return refuse(format!(
                    "the shapes do not chain: layer {i} takes {} inputs, {} come in",
                    l.inp, width
                ));
            }
            if l.out == 0 || l.out > MAX_WIDTH || l.inp == 0 || l.inp > MAX_WIDTH {
                return refuse(format!(
                    "layer {i} is {}×{}: widths are 1 to {MAX_WIDTH}",
                    l.out, l.inp
                ));
            }
            if l.weight.len() != l.out * l.inp {
                return refuse(format!(
                    "layer {i}'s weight holds {} values, its shape {}×{} needs {}",
                    l.weight.len(),
                    l.out,
                    l.inp,
                    l.out * l.inp
                ));
            }
            if l.bias.len() != l.out {
                return refuse(format!(
                    "layer {i}'s bias holds {} values, it has {} outputs",
                    l.bias.len(),
                    l.out
                ));
            }
            // |bias| + in·128·128 ≤ 2^31 − 1: no input can overflow an accumulator
            let room = i64::from(i32::MAX) - l.inp as i64 * OPERAND * OPERAND;
            if let Some((o, b)) = l
                .bias
                .iter()
                .enumerate()
                .find(|(_, b)| i64::from(**b).abs() > room)
            {
                return refuse(format!(
                    "layer {i} output {o}: bias {b} with {} inputs could overflow an int32 accumulator (|bias| must be at most {room})",
                    l.inp
                ));
            }
            let last = i + 1 == n;
            match (&l.requant, last) {
                (Some(_), true) => {
                    return refuse(format!(
                        "layer {i} is the last: its accumulators are the logits, it has no multiplier or shift"
                    ))
                }
                (None, false) => {
                    return refuse(format!("hidden layer {i} needs a multiplier and a shift"))
                }
                (Some((m, s)), false) => {
                    if m.len() != l.out || s.len() != l.out {
                        return refuse(format!(
                            "layer {i}: {} multipliers and {} shifts for {} outputs",
                            m.len(),
                            s.len(),
                            l.out
                        ));
                    }
                    if let Some((o, v)) = m.iter().enumerate().find(|(_, v)| **v < 1) {
                        return refuse(format!(
                            "layer {i} output {o}: multiplier {v} is outside 1 ..= 2^31 − 1"
                        ));
                    }
                    if let Some((o, v)) = s.iter().enumerate().find(|(_, v)| !(1..=62).contains(*v))
                    {
                        return refuse(format!(
                            "layer {i} output {o}: shift {v} is outside 1 ..= 62"
                        ));
                    }
                }
                (None, true) => {}
            }
            width = l.out;
        }
        if width != classes {
            return refuse(format!(
                "the model has {width} outputs, the job {classes} classes"
            ));
        }
        Ok(())
    }

    /// Multiply-adds per row.
    pub fn work_per_row(&self) -> u64 {
        self.layers.iter().map(|l| (l.inp * l.out) as u64).sum()
    }

    /// The logits of one row (the plain reference: one output at a time). The model must
    /// have passed [`Mlp::check`] for `x.len()` features.
    pub fn logits(&self, x: &[i8]) -> Vec<i32> {
        let mut a: Vec<i8> = x.to_vec();
        let last = self.layers.len() - 1;
        for (i, l) in self.layers.iter().enumerate() {
            let mut acc = vec![0i32; l.out];
            for (o, acc) in acc.iter_mut().enumerate() {
                let w = &l.weight[o * l.inp..(o + 1) * l.inp];
                *acc = l.bias[o]
                    + w.iter()
                        .zip(&a)
                        .map(|(&w, &x)| i32::from(w) * i32::from(x))
                        .sum::<i32>();
            }
            if i == last {
                return acc;
            }
            a = acc
                .iter()
                .enumerate()
                .map(|(o, &v)| l.activation(o, v))
                .collect();
        }
        unreachable!("a checked model has a last layer")
    }

    /// One output row: logits and class, laid out as PROTOCOL §5 says.
    pub fn row(&self, x: &[i8]) -> Vec<u8> {
        let logits = self.logits(x);
        let mut out = Vec::with_capacity(row_len(logits.len()));
        for v in &logits {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&class_of(&logits).to_le_bytes());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requantization_rounds_half_up_and_clamps() {
        // m / 2^s = 1/2: 3/2 → 2, −3/2 → −1 (half up, towards +∞), 5/2 → 3
        assert_eq!(requantize(3, 1, 1), 2);
        assert_eq!(requantize(-3, 1, 1), -1);
        assert_eq!(requantize(5, 1, 1), 3);
        assert_eq!(requantize(-5, 1, 1), -2);
        assert_eq!(requantize(1000, 1, 1), 127);
        assert_eq!(requantize(-1000, 1, 1), -128);
        // the largest operands stay inside int64
        assert_eq!(requantize(i32::MAX, i32::MAX, 62), 1);
        assert_eq!(requantize(i32::MIN, i32::MAX, 62), -1);
        assert_eq!(requantize(i32::MIN, i32::MAX, 1), -128);
    }

    #[test]
    fn ties_go_to_the_lowest_class() {
        assert_eq!(class_of(&[1, 7, 7, 3]), 1);
        assert_eq!(class_of(&[-5, -5]), 0);
        assert_eq!(class_of(&[i32::MIN, i32::MIN + 1]), 1);
    }

    fn tiny() -> Mlp {
        Mlp {
            layers: vec![
                Layer {
                    inp: 2,
                    out: 2,
                    weight: vec![1, 2, -3, 4],
                    bias: vec![1, -1],
                    requant: Some((vec![1, 1], vec![1, 1])),
                },
                Layer {
                    inp: 2,
                    out: 3,
                    weight: vec![1, 0, 0, 1, 1, 1],
                    bias: vec![0, 0, -1],
                    requant: None,
                },
            ],
        }
    }

    #[test]
    fn a_row_is_its_logits_then_its_class() {
        let m = tiny();
        m.check(2, 3).unwrap();
        // hidden: (1 + 1·3 + 2·4) = 12 → 6; (−1 − 9 + 16) = 6 → 3; logits 6, 3, 8
        assert_eq!(m.logits(&[3, 4]), vec![6, 3, 8]);
        let row = m.row(&[3, 4]);
        assert_eq!(row.len(), row_len(3));
        assert_eq!(&row[12..], &2u32.to_le_bytes());
        // hidden: −99 → −49 → 0 (ReLU), 299 → 150 → 127 (clamped); logits 0, 127, 126
        assert_eq!(m.logits(&[-100, 0]), vec![0, 127, 126]);
        assert_eq!(m.work_per_row(), 4 + 6);
    }

    #[test]
    fn models_outside_the_bounds_are_refused_by_name() {
        let bad = |f: &dyn Fn(&mut Mlp), features: usize, classes: usize, why: &str| {
            let mut m = tiny();
            f(&mut m);
            let e = m.check(features, classes).unwrap_err().0;
            assert!(e.contains(why), "{e} (wanted {why})");
        };
        bad(
            &|_| {},
            3,
            3,
            "the shapes do not chain: layer 0 takes 2 inputs, 3 come in",
        );
        bad(&|_| {}, 2, 4, "the model has 3 outputs, the job 4 classes");
        bad(&|m| m.layers[1].inp = 5, 2, 3, "layer 1 takes 5 inputs");
        bad(
            &|m| m.layers[0].weight.pop().map(drop).unwrap(),
            2,
            3,
            "weight holds 3 values",
        );
        bad(&|m| m.layers[1].bias.push(0), 2, 3, "bias holds 4 values");
        bad(
            &|m| m.layers[0].bias[1] = i32::MAX - 2 * 16384 + 1,
            2,
            3,
            "could overflow an int32 accumulator",
        );
        bad(
            &|m| m.layers[0].requant = None,
            2,
            3,
            "hidden layer 0 needs a multiplier",
        );
        bad(
            &|m| m.layers[1].requant = Some((vec![1; 3], vec![1; 3])),
            2,
            3,
            "layer 1 is the last",
        );
        bad(
            &|m| m.layers[0].requant.as_mut().unwrap().0[1] = 0,
            2,
            3,
            "multiplier 0 is outside",
        );
        bad(
            &|m| m.layers[0].requant.as_mut().unwrap().1[0] = 63,
            2,
            3,
            "shift 63 is outside 1 ..= 62",
        );
        bad(
            &|m| {
                m.layers[0]
                    .requant
                    .as_mut()
                    .unwrap()
                    .1
                    .pop()
                    .map(drop)
                    .unwrap()
            },
            2,
            3,
            "2 multipliers and 1 shifts for 2 outputs",
        );
        bad(&|m| m.layers.clear(), 2, 3, "1 to 8 layers");
        // the bound is exact: the largest bias allowed passes
        let mut m = tiny();
        m.layers[0].bias[1] = i32::MAX - 2 * 16384;
        m.check(2, 3).unwrap();
        assert_eq!(m.logits(&[-128, -128]).len(), 3, "no overflow at the bound");
    }
}
