//! All-reduce throughput between two ranks on 127.0.0.1 (two threads of this process,
//! each its own store client and Gloo group, talking over TCP as two processes would):
//! a buffer of N f32 (default 134,515,008, SmolLM2-135M's parameter count, so its
//! gradient) summed R times (default 3).
//!
//!     cargo run --release -p drmas-dist --example all_reduce_bench [N] [R]

use drmas_dist::{Backend, Group, Store};
use std::time::{Duration, Instant};
use tch::Tensor;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: i64 = args
        .get(1)
        .map_or(134_515_008, |a| a.parse().expect("N: a count"));
    let reps: usize = args.get(2).map_or(3, |a| a.parse().expect("R: a count"));
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let timeout = Duration::from_secs(600);
    let handles: Vec<_> = (0..2)
        .map(|rank| {
            std::thread::spawn(move || {
                let store = Store::connect("127.0.0.1", port, 2, rank == 0, timeout).unwrap();
                let mut g = Group::new(&store, Backend::Gloo, "bench", rank, 2, timeout).unwrap();
                let mut t = Tensor::ones([n], (tch::Kind::Float, tch::Device::Cpu));
                g.all_reduce_sum(&mut t).unwrap(); // warm-up: connections, buffers
                let mut times = Vec::new();
                for _ in 0..reps {
                    g.barrier().unwrap();
                    let started = Instant::now();
                    g.all_reduce_sum(&mut t).unwrap();
                    times.push(started.elapsed().as_secs_f64());
                }
                times
            })
        })
        .collect();
    let times: Vec<Vec<f64>> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let bytes = n as f64 * 4.0;
    for (i, t) in times[0].iter().enumerate() {
        println!(
            "rep {}: {:.3} s for {:.0} MB: {:.2} GB/s (buffer size / time)",
            i + 1,
            t,
            bytes / 1e6,
            bytes / t / 1e9
        );
    }
    let mut sorted = times[0].clone();
    sorted.sort_by(f64::total_cmp);
    let median = sorted[sorted.len() / 2];
    println!("median {median:.3} s: {:.2} GB/s", bytes / median / 1e9);
}
