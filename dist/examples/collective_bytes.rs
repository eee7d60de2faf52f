//! What each collective sends, per rank: N ranks on 127.0.0.1 (threads of this process,
//! each its own store client and Gloo group, talking over TCP as N processes would)
//! run an all-reduce of E f32, a reduce-scatter of E f32 into E/N, and an all-gather of
//! E/N f32 into E, and read the loopback interface's byte counter around each. The
//! counter counts every program's loopback traffic, so run this alone in a network
//! namespace of its own for exact numbers (as root: `unshare -n sh -c 'ip link set lo
//! up && cargo run …'`); TCP/IP headers are included (about 0.1 % at loopback's MTU).
//!
//!     cargo run -p drmas-dist --example collective_bytes [N] [E]

use drmas_dist::{Backend, Group, Store};
use std::time::Duration;
use tch::{Device, Kind, Tensor};

/// Bytes the loopback interface has sent so far.
fn loopback_bytes() -> u64 {
    let dev = std::fs::read_to_string("/proc/net/dev").expect("/proc/net/dev");
    dev.lines()
        .find_map(|l| {
            let (name, rest) = l.split_once(':')?;
            (name.trim() == "lo").then(|| rest.split_whitespace().nth(8)?.parse().ok())?
        })
        .expect("no loopback interface in /proc/net/dev")
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).map_or(2, |a| a.parse().expect("N: a count"));
    let e: i64 = args
        .get(2)
        .map_or(1 << 24, |a| a.parse().expect("E: a count"));
    assert!(e % n as i64 == 0, "E must be a multiple of N");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let timeout = Duration::from_secs(600);
    let ops = ["all-reduce", "reduce-scatter", "all-gather into tensor"];
    let handles: Vec<_> = (0..n)
        .map(|rank| {
            std::thread::spawn(move || {
                let store = Store::connect("127.0.0.1", port, n, rank == 0, timeout).unwrap();
                let mut g = Group::new(&store, Backend::Gloo, "bytes", rank, n, timeout).unwrap();
                let cpu = (Kind::Float, Device::Cpu);
                let whole = Tensor::ones([e], cpu);
                let mut part = Tensor::ones([e / n as i64], cpu);
                let mut run = |op: usize, g: &mut Group| match op {
                    0 => g.all_reduce_sum(&mut whole.shallow_clone()).unwrap(),
                    1 => g.reduce_scatter_sum(&whole, &mut part).unwrap(),
                    _ => g
                        .all_gather_into_tensor(&mut whole.shallow_clone(), &part)
                        .unwrap(),
                };
                // Once each first: connections and buffers are made on first use.
                for op in 0..ops.len() {
                    run(op, &mut g);
                }
                let mut sent = Vec::new();
                for op in 0..ops.len() {
                    g.barrier().unwrap();
                    let before = loopback_bytes();
                    g.barrier().unwrap();
                    run(op, &mut g);
                    g.barrier().unwrap();
                    sent.push(loopback_bytes() - before);
                    g.barrier().unwrap();
                }
                sent
            })
        })
        .collect();
    let sent: Vec<Vec<u64>> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let bytes = e as f64 * 4.0;
    println!("{n} ranks, E = {e} f32 ({:.1} MB)", bytes / 1e6);
    for (i, op) in ops.iter().enumerate() {
        // Every rank read the same counter around the same op: rank 0's reading is
        // the job's total.
        let per_rank = sent[0][i] as f64 / n as f64;
        println!(
            "{op}: {:.2} MB per rank = {:.3} × E's bytes ((N−1)/N = {:.3})",
            per_rank / 1e6,
            per_rank / bytes,
            (n as f64 - 1.0) / n as f64
        );
    }
}
