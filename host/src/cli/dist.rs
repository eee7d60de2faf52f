//! Joining a data-parallel job from the launch environment (torchrun, PyTorchJob, Ray,
//! SLURM: `drmas_dist::World`): the job's store, and this rank's place in it. No
//! launcher's variables: `None`, one process as always. A world of one set explicitly
//! is a job of one rank: its collectives run (on itself), which is how the GPU check
//! exercises NCCL on one GPU.

use drmas::pool::DistJob;
use drmas_dist::{Store, World};
use std::{sync::Arc, time::Duration};

pub fn join(exp: &drmas::config::Experiment) -> anyhow::Result<Option<Arc<DistJob>>> {
    let Some(world) = World::from_env()? else {
        return Ok(None);
    };
    let timeout = Duration::from_secs_f64(exp.file.pool.collective_timeout_s);
    let store = Store::connect(
        &world.master_addr,
        world.master_port,
        world.world_size,
        world.hosts_store(),
        timeout,
    )
    .map_err(|e| anyhow::anyhow!("rank {} of {}: {e}", world.rank, world.world_size))?;
    Ok(Some(Arc::new(DistJob {
        store: Arc::new(store),
        rank: world.rank,
        world_size: world.world_size,
        local_rank: world.local_rank,
        timeout,
        prefix: format!("drmas/attempt_{}/", world.restart_count),
    })))
}
