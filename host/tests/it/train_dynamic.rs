//! Dynamic sampling (`[trainer.dynamic_sampling]`) through the trainer: groups whose
//! binary outcomes are all equal stay out of the update, refills never grow the batch
//! past the step's own count, and every count adds up in the step's line.

use crate::common;

use common::train::{Setup, metrics, pick_target, quiet, temp_run};
use drmas::config::DynamicSampling;
use std::num::NonZeroU32;

fn setup(refill: Option<u32>) -> Setup {
    let mut s = Setup::new("norms/grpo");
    // A target the tiny model hits about a third of the time: groups of 4 are mixed
    // often and uniform sometimes.
    s.agents = vec![("solo", "lm", pick_target("solo", &s.questions, 0.35))];
    s.trainer.steps = 2;
    s.trainer.prompts_per_step = 3;
    s.trainer.group_size = 4;
    s.trainer.dynamic_sampling = Some(DynamicSampling {
        refill_tasks: refill.map(|n| NonZeroU32::new(n).unwrap()),
    });
    s
}

#[test]
fn dynamic_sampling_keeps_the_batch_size_and_counts_what_it_left_out() {
    for refill in [None, Some(6)] {
        let s = setup(refill);
        let (_dir, run) = temp_run();
        s.trainer(&run, quiet()).unwrap().run().unwrap();
        let lines = metrics(&run);
        assert_eq!(lines.len(), 2);
        let (mut dropped_any, mut refilled_any) = (false, false);
        for line in &lines {
            let d = &line["dynamic_sampling"];
            let n = |k: &str| d[k].as_u64().unwrap_or_else(|| panic!("{k}: {d}"));
            // The step's own rollout: 3 tasks × 4 trajectories, one sample each.
            assert_eq!(n("target_samples"), 12, "{d}");
            // Never more than the step's count; what was left out and kept add up to
            // every sample of every round.
            assert!(n("kept_samples") <= 12, "{d}");
            let rolled = 4 * (3 + n("refill_tasks"));
            assert_eq!(n("kept_samples") + n("dropped_samples"), rolled, "{d}");
            assert_eq!(n("groups"), 3 + n("refill_tasks"), "{d}");
            // The update saw exactly the kept samples (none: the agent has no entry).
            let seen = line["agents"]["solo"]["samples"].as_u64().unwrap_or(0);
            assert_eq!(seen, n("kept_samples"), "{d}");
            match refill {
                None => {
                    assert_eq!((n("refill_tasks"), n("refill_rounds")), (0, 0), "{d}");
                    assert_eq!(n("kept_samples"), 4 * (3 - n("dropped_groups")), "{d}");
                }
                Some(bound) => {
                    assert!(n("refill_tasks") <= u64::from(bound), "{d}");
                    // Refills run only while samples are missing.
                    if n("dropped_groups") == 0 {
                        assert_eq!(n("refill_rounds"), 0, "{d}");
                    }
                }
            }
            dropped_any |= n("dropped_groups") > 0;
            refilled_any |= n("refill_rounds") > 0;
        }
        assert!(dropped_any, "the seed gave no uniform group: {lines:?}");
        assert_eq!(refilled_any, refill.is_some(), "{lines:?}");
    }
}
