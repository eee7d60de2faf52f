//! Ranks on 127.0.0.1 (threads of this process, each with its own store client and
//! group, as separate processes would have): the collectives' values, sizes refused
//! before anything is sent, and a peer that is missing or gone making the other fail
//! within the timeout with c10d's text.

use drmas_dist::{Backend, Group, Store};
use std::time::{Duration, Instant};
use tch::{Kind, Tensor};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Runs `f(rank, group)` on `n` ranks at once; returns their results in rank order.
fn ranks<T: Send + 'static>(
    n: usize,
    timeout: Duration,
    f: impl Fn(usize, Group) -> T + Send + Sync + Clone + 'static,
) -> Vec<T> {
    let port = free_port();
    let handles: Vec<_> = (0..n)
        .map(|rank| {
            let f = f.clone();
            std::thread::spawn(move || {
                let store = Store::connect("127.0.0.1", port, n, rank == 0, timeout).unwrap();
                let group = Group::new(&store, Backend::Gloo, "test", rank, n, timeout).unwrap();
                f(rank, group)
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

/// Runs `f(rank, group)` on two ranks at once; returns their results in rank order.
fn two_ranks<T: Send + 'static>(
    timeout: Duration,
    f: impl Fn(usize, Group) -> T + Send + Sync + Clone + 'static,
) -> Vec<T> {
    ranks(2, timeout, f)
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

/// Rank r's 7 values: element i is (i + 1) + 100·r, padded with zeros to a multiple of
/// `n` (the caller's padding: the collective takes only whole slices).
fn padded_input(rank: usize, n: usize) -> Vec<f32> {
    let mut v: Vec<f32> = (0..7)
        .map(|i| (i + 1) as f32 + 100.0 * rank as f32)
        .collect();
    v.resize(7usize.div_ceil(n) * n, 0.0);
    v
}

/// Reduce-scatters the padded inputs and all-gathers `[10r + 1, 10r + 2, 10r + 3]` on
/// `n` ranks: each rank's slice of the sum and the gathered tensor.
fn scatter_and_gather(n: usize) -> Vec<(Vec<f32>, Vec<f32>)> {
    ranks(n, Duration::from_secs(30), move |rank, mut g| {
        let input = Tensor::from_slice(&padded_input(rank, n));
        let mut slice = Tensor::zeros(
            [input.numel() as i64 / n as i64],
            (Kind::Float, tch::Device::Cpu),
        );
        g.reduce_scatter_sum(&input, &mut slice).unwrap();
        let base = 10.0 * rank as f32;
        let mine = Tensor::from_slice(&[base + 1.0, base + 2.0, base + 3.0]);
        let mut all = Tensor::zeros([3 * n as i64], (Kind::Float, tch::Device::Cpu));
        g.all_gather_into_tensor(&mut all, &mine).unwrap();
        (
            Vec::<f32>::try_from(slice).unwrap(),
            Vec::<f32>::try_from(all).unwrap(),
        )
    })
}

#[test]
fn reduce_scatter_and_all_gather_into_tensor_on_two_ranks() {
    // 7 values padded to 8, slices of 4; the sum of element i is 2(i + 1) + 100.
    let out = scatter_and_gather(2);
    assert_eq!(out[0].0, [102.0, 104.0, 106.0, 108.0]);
    assert_eq!(out[1].0, [110.0, 112.0, 114.0, 0.0]);
    for (_, all) in &out {
        assert_eq!(all, &[1.0, 2.0, 3.0, 11.0, 12.0, 13.0]);
    }
}

#[test]
fn reduce_scatter_and_all_gather_into_tensor_on_three_ranks() {
    // 7 values padded to 9, slices of 3; the sum of element i is 3(i + 1) + 300.
    let out = scatter_and_gather(3);
    assert_eq!(out[0].0, [303.0, 306.0, 309.0]);
    assert_eq!(out[1].0, [312.0, 315.0, 318.0]);
    assert_eq!(out[2].0, [321.0, 0.0, 0.0]);
    for (_, all) in &out {
        assert_eq!(all, &[1.0, 2.0, 3.0, 11.0, 12.0, 13.0, 21.0, 22.0, 23.0]);
    }
}

#[test]
fn a_job_of_one_rank_keeps_its_own_values() {
    let out = scatter_and_gather(1);
    assert_eq!(out[0].0, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]);
    assert_eq!(out[0].1, [1.0, 2.0, 3.0]);
}

#[test]
fn shaped_non_contiguous_and_bf16_tensors_are_taken_flat() {
    let out = two_ranks(Duration::from_secs(30), |rank, mut g| {
        // bf16, the weights' dtype: these small integers are exact in it.
        let r = rank as f32;
        let input = Tensor::from_slice(&[1.0f32 + r, 2.0, 3.0, 4.0 * (r + 1.0), 5.0, 6.0])
            .to_kind(Kind::BFloat16)
            .reshape([2, 3]);
        // Column 0 of a [3, 2] tensor (stride 2) is not contiguous: it is filled in its
        // own element order all the same, and column 1 is left alone.
        let base = Tensor::zeros([3, 2], (Kind::BFloat16, tch::Device::Cpu));
        let mut slice = base.select(1, 0);
        assert!(!slice.is_contiguous());
        g.reduce_scatter_sum(&input, &mut slice).unwrap();
        let mut all = Tensor::zeros([2, 2], (Kind::BFloat16, tch::Device::Cpu));
        let mine = Tensor::from_slice(&[r, -r]).to_kind(Kind::BFloat16);
        g.all_gather_into_tensor(&mut all, &mine).unwrap();
        (
            Vec::<f32>::try_from(base.to_kind(Kind::Float).reshape([-1])).unwrap(),
            Vec::<f32>::try_from(all.to_kind(Kind::Float).reshape([-1])).unwrap(),
        )
    });
    assert_eq!(out[0].0, [3.0, 0.0, 4.0, 0.0, 6.0, 0.0]);
    assert_eq!(out[1].0, [12.0, 0.0, 10.0, 0.0, 12.0, 0.0]);
    for (_, all) in &out {
        assert_eq!(all, &[0.0, 0.0, 1.0, -1.0]);
    }
}

#[test]
fn wrong_sizes_are_refused_before_anything_is_sent() {
    let out = two_ranks(Duration::from_secs(30), |_, mut g| {
        let cpu = (Kind::Float, tch::Device::Cpu);
        let mut three = Tensor::zeros([3], cpu);
        let scatter = g
            .reduce_scatter_sum(&Tensor::zeros([7], cpu), &mut three)
            .unwrap_err()
            .to_string();
        let gather = g
            .all_gather_into_tensor(&mut Tensor::zeros([2, 4], cpu), &three)
            .unwrap_err()
            .to_string();
        let kind = g
            .reduce_scatter_sum(
                &Tensor::zeros([6], (Kind::Double, tch::Device::Cpu)),
                &mut three,
            )
            .unwrap_err()
            .to_string();
        // Nothing was sent: the group still works.
        let mut t = Tensor::from_slice(&[1.0f32]);
        g.all_reduce_sum(&mut t).unwrap();
        (scatter, gather, kind, Vec::<f32>::try_from(t).unwrap())
    });
    let (scatter, gather, kind, sum) = &out[1];
    assert_eq!(
        scatter,
        "reduce-scatter (sum) in group `test` (rank 1 of 2): the input has 7 elements and the output 3: the input must hold 2 ranks × 3 = 6"
    );
    assert_eq!(
        gather,
        "all-gather (into one tensor) in group `test` (rank 1 of 2): the output has 8 elements and the input 3: the output must hold 2 ranks × 3 = 6"
    );
    assert_eq!(
        kind,
        "reduce-scatter (sum) in group `test` (rank 1 of 2): the input is Double and the output Float: both must have one dtype"
    );
    assert_eq!(sum, &[2.0]);
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

#[test]
fn a_peer_that_is_gone_fails_the_reduce_scatter_and_the_gather() {
    let out = two_ranks(Duration::from_secs(3), |rank, mut g| {
        if rank == 1 {
            drop(g);
            return None;
        }
        let cpu = (Kind::Float, tch::Device::Cpu);
        let started = Instant::now();
        let scatter = g
            .reduce_scatter_sum(&Tensor::ones([4], cpu), &mut Tensor::zeros([2], cpu))
            .err()
            .map(|e| e.to_string());
        let gather = g
            .all_gather_into_tensor(&mut Tensor::zeros([4], cpu), &Tensor::ones([2], cpu))
            .err()
            .map(|e| e.to_string());
        Some((scatter, gather, started.elapsed()))
    });
    let (scatter, gather, took) = out[0].clone().unwrap();
    assert!(took < Duration::from_secs(20), "took {took:?}");
    let scatter = scatter.expect("the peer is gone: the reduce-scatter must fail");
    assert!(
        scatter.starts_with("reduce-scatter (sum) in group `test` (rank 0 of 2): "),
        "{scatter}"
    );
    let gather = gather.expect("the peer is gone: the all-gather must fail");
    assert!(
        gather.starts_with("all-gather (into one tensor) in group `test` (rank 0 of 2): "),
        "{gather}"
    );
}

#[test]
fn started_gathers_end_in_order_with_collectives_issued_meanwhile() {
    // Two gathers started, a reduce-scatter and an all-reduce issued while they run
    // (as the sharded update prefetches a layer while reducing the previous one), then
    // the gathers waited for in turn: every value is the synchronous calls' value.
    let out = ranks(3, Duration::from_secs(30), |rank, mut g| {
        let cpu = (Kind::Float, tch::Device::Cpu);
        let r = rank as f32;
        let first = Tensor::zeros([6], cpu);
        let second = Tensor::zeros([3], cpu);
        let a = g
            .start_all_gather_into_tensor(&first, &Tensor::from_slice(&[r, 10.0 + r]))
            .unwrap();
        let b = g
            .start_all_gather_into_tensor(&second, &Tensor::from_slice(&[100.0 + r]))
            .unwrap();
        let mut mine = Tensor::zeros([1], cpu);
        g.reduce_scatter_sum(&Tensor::from_slice(&[1.0f32, 2.0, 3.0]), &mut mine)
            .unwrap();
        let mut sum = Tensor::from_slice(&[r]);
        g.all_reduce_sum(&mut sum).unwrap();
        a.wait().unwrap();
        b.wait().unwrap();
        // A started gather dropped unwaited is waited for by the drop.
        let third = Tensor::zeros([3], cpu);
        drop(
            g.start_all_gather_into_tensor(&third, &Tensor::from_slice(&[r]))
                .unwrap(),
        );
        let v = |t: &Tensor| Vec::<f32>::try_from(t).unwrap();
        (v(&first), v(&second), v(&mine), v(&sum), v(&third))
    });
    for (rank, (first, second, mine, sum, third)) in out.into_iter().enumerate() {
        assert_eq!(first, [0.0, 10.0, 1.0, 11.0, 2.0, 12.0]);
        assert_eq!(second, [100.0, 101.0, 102.0]);
        assert_eq!(mine, [3.0 * (rank as f32 + 1.0)]);
        assert_eq!(sum, [3.0]);
        assert_eq!(third, [0.0, 1.0, 2.0]);
    }
}

#[test]
fn a_started_gather_refuses_a_non_contiguous_output_before_sending() {
    let out = ranks(1, Duration::from_secs(10), |_, mut g| {
        let cpu = (Kind::Float, tch::Device::Cpu);
        let strided = Tensor::zeros([4], cpu).slice(0, 0, 4, 2);
        g.start_all_gather_into_tensor(&strided, &Tensor::ones([2], cpu))
            .err()
            .map(|e| e.to_string())
    });
    assert_eq!(
        out[0].as_deref(),
        Some(
            "all-gather (into one tensor) in group `test` (rank 0 of 1): a started all-gather writes a contiguous output"
        )
    );
}
