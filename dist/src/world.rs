//! The launch contract: where this process sits in the job, read from the variables
//! torchrun, Kubernetes' PyTorchJob and Ray drivers set (`RANK`, `WORLD_SIZE`,
//! `LOCAL_RANK`, `LOCAL_WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`,
//! `TORCHELASTIC_USE_AGENT_STORE`), or from SLURM's (`SLURM_PROCID`, `SLURM_NTASKS`,
//! `SLURM_LOCALID`, `SLURM_NTASKS_PER_NODE`, `SLURM_JOB_NODELIST`) when those are
//! absent. Neither set: a single process.

use crate::DistError;

/// Which launcher's variables said it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorldSource {
    /// `RANK` and `WORLD_SIZE` (torchrun, PyTorchJob, Ray, or by hand).
    Torch,
    Slurm,
}

/// This process's place in a job of several.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct World {
    pub rank: usize,
    pub world_size: usize,
    pub local_rank: usize,
    pub local_world_size: usize,
    pub master_addr: String,
    pub master_port: u16,
    /// The launcher's agent already hosts the store (torchrun): every rank connects as
    /// a client. Otherwise rank 0 hosts it.
    pub agent_store: bool,
    /// torchrun's `TORCHELASTIC_RESTART_COUNT`: a restarted job's keys in the store must
    /// not meet its earlier attempt's.
    pub restart_count: usize,
    pub source: WorldSource,
}

/// torch's default store port when `MASTER_PORT` is not set under SLURM.
const DEFAULT_PORT: u16 = 29500;

impl World {
    /// Reads the process environment; `None` when no launcher's variables are set.
    pub fn from_env() -> Result<Option<Self>, DistError> {
        Self::from_vars(|k| std::env::var(k).ok())
    }

    /// Whether this process hosts the store.
    pub fn hosts_store(&self) -> bool {
        self.rank == 0 && !self.agent_store
    }

    /// The same rules over any source of variables (tests).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Option<Self>, DistError> {
        let get = |k: &str| var(k).filter(|v| !v.trim().is_empty());
        let num = |k: &str| -> Result<Option<usize>, DistError> {
            get(k)
                .map(|v| {
                    v.trim().parse::<usize>().map_err(|_| {
                        DistError::Launch(format!("{k}=`{v}` is not a non-negative integer"))
                    })
                })
                .transpose()
        };
        let port = |k: &str| -> Result<Option<u16>, DistError> {
            get(k)
                .map(|v| {
                    v.trim()
                        .parse::<u16>()
                        .ok()
                        .filter(|p| *p > 0)
                        .ok_or_else(|| {
                            DistError::Launch(format!("{k}=`{v}` is not a port (1–65535)"))
                        })
                })
                .transpose()
        };
        let world = match (num("RANK")?, num("WORLD_SIZE")?) {
            (Some(rank), Some(world_size)) => {
                let master_addr = get("MASTER_ADDR").ok_or_else(|| {
                    DistError::Launch("RANK and WORLD_SIZE are set but MASTER_ADDR is not".into())
                })?;
                let master_port = port("MASTER_PORT")?.ok_or_else(|| {
                    DistError::Launch("RANK and WORLD_SIZE are set but MASTER_PORT is not".into())
                })?;
                let local_world_size = num("LOCAL_WORLD_SIZE")?.unwrap_or(world_size);
                let local_rank = num("LOCAL_RANK")?.unwrap_or(rank % local_world_size.max(1));
                let agent_store = get("TORCHELASTIC_USE_AGENT_STORE").is_some_and(|v| {
                    matches!(v.trim().to_ascii_lowercase().as_str(), "true" | "1")
                });
                World {
                    rank,
                    world_size,
                    local_rank,
                    local_world_size,
                    master_addr,
                    master_port,
                    agent_store,
                    restart_count: num("TORCHELASTIC_RESTART_COUNT")?.unwrap_or(0),
                    source: WorldSource::Torch,
                }
            }
            (Some(_), None) => {
                return Err(DistError::Launch(
                    "RANK is set but WORLD_SIZE is not".into(),
                ));
            }
            (None, Some(_)) => {
                return Err(DistError::Launch(
                    "WORLD_SIZE is set but RANK is not".into(),
                ));
            }
            (None, None) => match (num("SLURM_PROCID")?, num("SLURM_NTASKS")?) {
                (Some(rank), Some(world_size)) => {
                    let local_world_size = match get("SLURM_NTASKS_PER_NODE") {
                        // "4" or "4(x2)": tasks per node, the same on every node here.
                        Some(v) => v
                            .split(['(', ','])
                            .next()
                            .and_then(|n| n.trim().parse::<usize>().ok())
                            .ok_or_else(|| {
                                DistError::Launch(format!(
                                    "SLURM_NTASKS_PER_NODE=`{v}` is not a task count"
                                ))
                            })?,
                        None => world_size,
                    };
                    let local_rank =
                        num("SLURM_LOCALID")?.unwrap_or(rank % local_world_size.max(1));
                    let master_addr = match get("MASTER_ADDR") {
                        Some(a) => a,
                        None => {
                            let list = get("SLURM_JOB_NODELIST").ok_or_else(|| {
                                DistError::Launch(
                                    "under SLURM, set MASTER_ADDR or run inside a job (SLURM_JOB_NODELIST)"
                                        .into(),
                                )
                            })?;
                            first_host(&list)?
                        }
                    };
                    World {
                        rank,
                        world_size,
                        local_rank,
                        local_world_size,
                        master_addr,
                        master_port: port("MASTER_PORT")?.unwrap_or(DEFAULT_PORT),
                        agent_store: false,
                        restart_count: num("SLURM_RESTART_COUNT")?.unwrap_or(0),
                        source: WorldSource::Slurm,
                    }
                }
                _ => return Ok(None),
            },
        };
        if world.world_size == 0 {
            return Err(DistError::Launch("the world size is 0".into()));
        }
        if world.rank >= world.world_size {
            return Err(DistError::Launch(format!(
                "rank {} is not below the world size {}",
                world.rank, world.world_size
            )));
        }
        if world.local_rank >= world.local_world_size {
            return Err(DistError::Launch(format!(
                "local rank {} is not below the local world size {}",
                world.local_rank, world.local_world_size
            )));
        }
        Ok(Some(world))
    }
}

/// The first host of a SLURM node list in its compressed form: `node[03-05,07],gpu1` →
/// `node03`.
fn first_host(list: &str) -> Result<String, DistError> {
    let bad = || DistError::Launch(format!("SLURM_JOB_NODELIST=`{list}` is not a node list"));
    let first = list.trim();
    let (head, rest) = match first.find(['[', ',']) {
        Some(i) => (&first[..i], &first[i..]),
        None => (first, ""),
    };
    if head.is_empty() {
        return Err(bad());
    }
    match rest.strip_prefix('[') {
        Some(range) => {
            let first_range = range.split([',', ']']).next().ok_or_else(bad)?;
            let start = first_range.split('-').next().ok_or_else(bad)?.trim();
            if start.is_empty() || !start.chars().all(|c| c.is_ascii_digit()) {
                return Err(bad());
            }
            Ok(format!("{head}{start}"))
        }
        None => Ok(head.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn world(vars: &[(&str, &str)]) -> Result<Option<World>, DistError> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        World::from_vars(|k| map.get(k).cloned())
    }

    fn err(vars: &[(&str, &str)]) -> String {
        world(vars).unwrap_err().to_string()
    }

    #[test]
    fn nothing_set_is_one_process() {
        assert_eq!(world(&[]).unwrap(), None);
        assert_eq!(world(&[("RANK", "")]).unwrap(), None);
    }

    #[test]
    fn torchrun_variables() {
        let w = world(&[
            ("RANK", "3"),
            ("WORLD_SIZE", "4"),
            ("LOCAL_RANK", "1"),
            ("LOCAL_WORLD_SIZE", "2"),
            ("MASTER_ADDR", "10.0.0.1"),
            ("MASTER_PORT", "29400"),
            ("TORCHELASTIC_USE_AGENT_STORE", "True"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(
            w,
            World {
                rank: 3,
                world_size: 4,
                local_rank: 1,
                local_world_size: 2,
                master_addr: "10.0.0.1".into(),
                master_port: 29400,
                agent_store: true,
                restart_count: 0,
                source: WorldSource::Torch,
            }
        );
        assert!(!w.hosts_store());
        // By hand: rank 0 hosts the store; LOCAL_* default to one node.
        let w = world(&[
            ("RANK", "0"),
            ("WORLD_SIZE", "2"),
            ("MASTER_ADDR", "127.0.0.1"),
            ("MASTER_PORT", "29500"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!((w.local_rank, w.local_world_size), (0, 2));
        assert!(w.hosts_store());
    }

    #[test]
    fn slurm_variables_when_torch_ones_are_absent() {
        let w = world(&[
            ("SLURM_PROCID", "5"),
            ("SLURM_NTASKS", "8"),
            ("SLURM_LOCALID", "1"),
            ("SLURM_NTASKS_PER_NODE", "4(x2)"),
            ("SLURM_JOB_NODELIST", "gpu[07-08,11],cpu1"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(
            (w.rank, w.world_size, w.local_rank, w.local_world_size),
            (5, 8, 1, 4)
        );
        assert_eq!(w.master_addr, "gpu07");
        assert_eq!(w.master_port, 29500);
        assert_eq!(w.source, WorldSource::Slurm);
        assert_eq!(first_host("node1").unwrap(), "node1");
        assert_eq!(first_host("a[3],b").unwrap(), "a3");
    }

    #[test]
    fn bad_variables_are_named() {
        let base = [("MASTER_ADDR", "h"), ("MASTER_PORT", "1")];
        let with = |extra: &[(&'static str, &'static str)]| {
            let mut v: Vec<(&str, &str)> = base.to_vec();
            v.extend_from_slice(extra);
            err(&v)
        };
        assert_eq!(
            with(&[("RANK", "x"), ("WORLD_SIZE", "2")]),
            "launch environment: RANK=`x` is not a non-negative integer"
        );
        assert_eq!(
            with(&[("RANK", "0")]),
            "launch environment: RANK is set but WORLD_SIZE is not"
        );
        assert_eq!(
            with(&[("RANK", "2"), ("WORLD_SIZE", "2")]),
            "launch environment: rank 2 is not below the world size 2"
        );
        assert_eq!(
            err(&[("RANK", "0"), ("WORLD_SIZE", "2")]),
            "launch environment: RANK and WORLD_SIZE are set but MASTER_ADDR is not"
        );
        assert_eq!(
            err(&[
                ("RANK", "0"),
                ("WORLD_SIZE", "2"),
                ("MASTER_ADDR", "h"),
                ("MASTER_PORT", "0")
            ]),
            "launch environment: MASTER_PORT=`0` is not a port (1–65535)"
        );
        assert_eq!(
            err(&[("SLURM_PROCID", "0"), ("SLURM_NTASKS", "2")]),
            "launch environment: under SLURM, set MASTER_ADDR or run inside a job (SLURM_JOB_NODELIST)"
        );
        assert_eq!(
            err(&[
                ("SLURM_PROCID", "0"),
                ("SLURM_NTASKS", "2"),
                ("SLURM_JOB_NODELIST", "[1-2]")
            ]),
            "launch environment: SLURM_JOB_NODELIST=`[1-2]` is not a node list"
        );
    }
}
