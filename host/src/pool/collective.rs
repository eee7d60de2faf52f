//! A c10d process group as the update's [`Collective`]: what a model's worker holds
//! when the job has several ranks (docs/distributed.md).

use crate::update::Collective;
use drmas_dist::Group;
use tch::Tensor;

impl Collective for Group {
    fn world_size(&self) -> usize {
        Group::world_size(self)
    }

    fn all_reduce_sum(&mut self, t: &mut Tensor) -> Result<(), String> {
        Group::all_reduce_sum(self, t).map_err(|e| e.to_string())
    }

    fn all_reduce_max(&mut self, t: &mut Tensor) -> Result<(), String> {
        Group::all_reduce_max(self, t).map_err(|e| e.to_string())
    }
}
