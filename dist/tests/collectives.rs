//! Two ranks on 127.0.0.1 (threads of this process, each with its own store client and
//! group, as two processes would have): the collectives' values, and a peer that is
//! missing or gone making the other fail within the timeout with c10d's text.

use drmas_dist::{Backend, Group, Store};
use std::time::{Duration, Instant};
use tch::Tensor;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Runs `f(rank, group)` on two ranks at once; returns their results in rank order.
fn two_ranks<T: Send + 'static>(
    timeout: Duration,
    f: impl Fn(usize, Group) -> T + Send + Sync + Clone + 'static,
) -> Vec<T> {
    let port = free_port();
    let handles: Vec<_> = (0..2)
        .map(|rank| {
            let f = f.clone();
            std::thread::spawn(move || {
                let store = Store::connect("127.0.0.1", port, 2, rank == 0, timeout).unwrap();
                let group = Group::new(&store, Backend::Gloo, "test", rank, 2, timeout).unwrap();
                f(rank, group)
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

#[test]
fn all_reduce_broadcast_and_gather() {
    let out = two_ranks(Duration::from_secs(30), |rank, mut g| {
        let r = rank as f32;
        let mut sum = Tensor::from_slice(&[1.0f32 + r, 10.0 * (r + 1.0), -r]);
        g.all_reduce_sum(&mut sum).unwrap();
        let mut max = Tensor::from_slice(&[r, 5.0 - r]);
        g.all_reduce_max(&mut max).unwrap();
        let mut b = Tensor::from_slice(&[r + 7.0; 4]);
        g.broadcast(&mut b, 1).unwrap();
        let bytes = if rank == 0 {
            b"rank zero".to_vec()
        } else {
            b"one".to_vec()
        };
        let gathered = g.all_gather_bytes(&bytes).unwrap();
        g.barrier().unwrap();
        (
            Vec::<f32>::try_from(sum).unwrap(),
            Vec::<f32>::try_from(max).unwrap(),
            Vec::<f32>::try_from(b).unwrap(),
            gathered,
        )
    });
    for (sum, max, b, gathered) in out {
        assert_eq!(sum, [3.0, 30.0, -1.0]);
        assert_eq!(max, [1.0, 5.0]);
        assert_eq!(b, [8.0; 4]);
        assert_eq!(gathered, [b"rank zero".to_vec(), b"one".to_vec()]);
    }
}

#[test]
fn a_rank_that_never_comes_fails_the_other_within_the_timeout() {
    let port = free_port();
    let timeout = Duration::from_secs(2);
    let started = Instant::now();
    let store = Store::connect("127.0.0.1", port, 2, true, timeout).unwrap();
    let err = Group::new(&store, Backend::Gloo, "lonely", 0, 2, timeout)
        .err()
        .expect("no peer: the rendezvous must fail");
    let took = started.elapsed();
    assert!(took < Duration::from_secs(20), "took {took:?}");
    let text = err.to_string();
    assert!(
        text.starts_with("process group `lonely` (rank 0 of 2, Gloo): "),
        "{text}"
    );
    assert!(
        text.len() > "process group `lonely` (rank 0 of 2, Gloo): ".len(),
        "{text}"
    );
}

#[test]
fn a_peer_that_is_gone_fails_the_collective_with_its_text() {
    let out = two_ranks(Duration::from_secs(3), |rank, mut g| {
        if rank == 1 {
            drop(g);
            return None;
        }
        std::thread::sleep(Duration::from_millis(300));
        let started = Instant::now();
        let mut t = Tensor::from_slice(&[1.0f32]);
        let err = g.all_reduce_sum(&mut t).err().map(|e| e.to_string());
        Some((err, started.elapsed()))
    });
    let (err, took) = out[0].clone().unwrap();
    let err = err.expect("the peer is gone: the all-reduce must fail");
    assert!(took < Duration::from_secs(20), "took {took:?}");
    assert!(
        err.starts_with("all-reduce (sum) in group `test` (rank 0 of 2): "),
        "{err}"
    );
}

#[test]
fn nccl_needs_its_feature() {
    if cfg!(feature = "nccl") {
        return;
    }
    let port = free_port();
    let store = Store::connect("127.0.0.1", port, 1, true, Duration::from_secs(5)).unwrap();
    let err = Group::new(&store, Backend::Nccl, "gpu", 0, 1, Duration::from_secs(5))
        .err()
        .unwrap()
        .to_string();
    assert_eq!(
        err,
        "process group `gpu` (rank 0 of 1, Nccl): this drmas was built without NCCL (cargo feature `nccl`)"
    );
}
