//! Joining a data-parallel job from the launch environment (torchrun, PyTorchJob, Ray,
//! SLURM: `drmas_dist::World`): the job's store, and this rank's place in it. No
//! launcher's variables: `None`, one process as always. A world of one set explicitly
//! is a job of one rank: its collectives run (on itself), which is how the GPU check
//! exercises NCCL on one GPU.

use drmas::{pool::DistJob, train::fingerprint::Fingerprint};
use drmas_dist::{Store, World};
use std::{sync::Arc, time::Duration};

/// A rank in its job, and the experiment's fingerprint it agreed on with the others
/// (the trainer records it without hashing the files again).
pub struct Joined {
    pub job: Arc<DistJob>,
    pub fingerprint: Fingerprint,
}

/// Joins the job the launch environment names, if any: connects to its store (waiting
/// at most `[pool] collective_timeout_s`), then checks that every rank runs the same
/// experiment with the same drmas and the same `options` (the command's own values,
/// `--name` → value), refusing the first difference on every rank.
pub fn join(
    exp: &drmas::config::Experiment,
    options: &[(&str, String)],
) -> anyhow::Result<Option<Joined>> {
    let Some(world) = World::from_env()? else {
        return Ok(None);
    };
    // `main` restores SIGPIPE's default (end quietly when our reader goes away), but
    // Gloo and the store write to their sockets without MSG_NOSIGNAL: a peer that died
    // would kill this rank with SIGPIPE before it could say which peer failed. In a job,
    // a write to a closed socket must be an error the collective reports.
    // SAFETY: setting a signal's disposition; no handler runs.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
    let timeout = Duration::from_secs_f64(exp.file.pool.collective_timeout_s);
    let store = Store::connect(
        &world.master_addr,
        world.master_port,
        world.world_size,
        world.hosts_store(),
        timeout,
    )
    .map_err(|e| anyhow::anyhow!("rank {} of {}: {e}", world.rank, world.world_size))?;
    let job = Arc::new(DistJob {
        store: Arc::new(store),
        rank: world.rank,
        world_size: world.world_size,
        local_rank: world.local_rank,
        timeout,
        prefix: format!("drmas/attempt_{}/", world.restart_count),
    });
    let fingerprint = drmas::train::fingerprint::of_files(exp)
        .map_err(|(path, e)| anyhow::anyhow!("{}: {e}", path.display()))?;
    let mut mine = fingerprint.clone();
    mine.insert(
        drmas::train::fingerprint::VERSION_KEY.into(),
        env!("CARGO_PKG_VERSION").into(),
    );
    for (name, value) in options {
        mine.insert(format!("options.{name}"), value.clone());
    }
    drmas::train::check_ranks_agree(&job, &mine)?;
    Ok(Some(Joined { job, fingerprint }))
}
