//! Learning-rate schedules: linear warm-up, then constant, linear or cosine decay.

use serde::{Deserialize, Serialize};
use std::f64::consts::PI;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ScheduleKind {
    #[default]
    Constant,
    Linear,
    Cosine,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LrSchedule {
    pub kind: ScheduleKind,
    pub warmup_steps: u32,
    /// The step at which the decay reaches `min_lr_ratio`.
    pub total_steps: u32,
    /// The floor of the decay, as a fraction of the base rate.
    pub min_lr_ratio: f64,
}

impl LrSchedule {
    /// The learning rate of (0-based) `step`: base·(step+1)/warmup during warm-up, then the
    /// decay from base at `warmup_steps` to base·min_lr_ratio at `total_steps`, and flat after.
    pub fn lr_at(&self, base_lr: f64, step: u32) -> f64 {
        if step < self.warmup_steps {
            return base_lr * f64::from(step + 1) / f64::from(self.warmup_steps);
        }
        let decay_steps = self.total_steps.saturating_sub(self.warmup_steps);
        // No decay span (total <= warm-up) means every step is already past its end.
        let progress = if decay_steps == 0 {
            1.0
        } else {
            (f64::from(step - self.warmup_steps) / f64::from(decay_steps)).clamp(0.0, 1.0)
        };
        let min = self.min_lr_ratio;
        match self.kind {
            ScheduleKind::Constant => base_lr,
            ScheduleKind::Linear => base_lr * (1.0 - (1.0 - min) * progress),
            ScheduleKind::Cosine => {
                base_lr * (min + (1.0 - min) * 0.5 * (1.0 + (PI * progress).cos()))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schedule(kind: ScheduleKind) -> LrSchedule {
        LrSchedule {
            kind,
            warmup_steps: 4,
            total_steps: 16,
            min_lr_ratio: 0.1,
        }
    }

    #[track_caller]
    fn close(got: f64, want: f64) {
        assert!((got - want).abs() < 1e-12, "got {got}, want {want}");
    }

    #[test]
    fn warm_up_is_linear_for_every_kind() {
        // base·(step + 1)/4
        for kind in [
            ScheduleKind::Constant,
            ScheduleKind::Linear,
            ScheduleKind::Cosine,
        ] {
            let s = schedule(kind);
            close(s.lr_at(2.0, 0), 0.5);
            close(s.lr_at(2.0, 2), 1.5);
            close(s.lr_at(2.0, 3), 2.0);
            close(s.lr_at(2.0, 4), 2.0);
        }
    }

    #[test]
    fn constant_stays() {
        close(schedule(ScheduleKind::Constant).lr_at(2.0, 100), 2.0);
    }

    #[test]
    fn linear_decays_to_the_floor() {
        let s = schedule(ScheduleKind::Linear);
        // progress = (step − 4)/12; lr = 2·(1 − 0.9·progress)
        close(s.lr_at(2.0, 7), 2.0 * (1.0 - 0.9 * 0.25)); // 1.55
        close(s.lr_at(2.0, 10), 2.0 * (1.0 - 0.9 * 0.5)); // 1.1
        close(s.lr_at(2.0, 16), 0.2);
        close(s.lr_at(2.0, 40), 0.2);
    }

    #[test]
    fn cosine_decays_to_the_floor() {
        let s = schedule(ScheduleKind::Cosine);
        // lr = 2·(0.1 + 0.9·½(1 + cos(π·progress)))
        // progress ¼: cos(π/4) = √½ → 2·(0.1 + 0.45·1.7071068) = 1.7364062
        close(s.lr_at(2.0, 7), 2.0 * (0.1 + 0.45 * (1.0 + 0.5f64.sqrt())));
        // progress ½: cos = 0 → 2·0.55 = 1.1
        close(s.lr_at(2.0, 10), 1.1);
        close(s.lr_at(2.0, 16), 0.2);
        close(s.lr_at(2.0, 40), 0.2);
    }

    #[test]
    fn no_warm_up_and_no_decay_span() {
        let s = LrSchedule {
            kind: ScheduleKind::Linear,
            warmup_steps: 0,
            total_steps: 0,
            min_lr_ratio: 0.5,
        };
        close(s.lr_at(1.0, 0), 0.5);
    }

    #[test]
    fn kinds_by_name() {
        let kind = |name: &str| serde_json::from_str::<ScheduleKind>(&format!("\"{name}\""));
        assert_eq!(kind("constant").unwrap(), ScheduleKind::Constant);
        assert_eq!(kind("linear").unwrap(), ScheduleKind::Linear);
        assert_eq!(kind("cosine").unwrap(), ScheduleKind::Cosine);
        assert!(kind("step").is_err());
        assert_eq!(ScheduleKind::default(), ScheduleKind::Constant);
    }
}
