//! Command-line values are refused while the command line is parsed, with the option's
//! name, before any model is loaded (the model folder here does not even exist).

use std::process::Command;

fn refused(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_drmas"))
        .args(args)
        .output()
        .unwrap();
    assert!(!out.status.success(), "{args:?} was accepted");
    let stderr = String::from_utf8_lossy(&out.stderr);
    stderr.lines().next().unwrap_or_default().to_string()
}

#[test]
fn sampling_and_device_values_are_checked_up_front() {
    let generate = ["generate", "--model", "/nonexistent", "--prompt", "hi"];
    let cuda = if tch::Cuda::device_count() == 0 {
        "this machine has no CUDA device (devices: cpu)".to_string()
    } else {
        return; // the message lists the machine's GPUs; covered by the unit test
    };
    for (extra, want) in [
        (
            vec!["--device", "cuda:7"],
            format!("error: invalid value 'cuda:7' for '--device <DEVICE>': device `cuda:7` does not exist: {cuda}"),
        ),
        (
            vec!["--device", "gpu"],
            "error: invalid value 'gpu' for '--device <DEVICE>': unknown device `gpu`: expected \"auto\", \"cpu\" or \"cuda:N\"".into(),
        ),
        (
            vec!["--temperature", "NaN"],
            "error: invalid value 'NaN' for '--temperature <TEMPERATURE>': must be a finite number, got NaN".into(),
        ),
        (
            vec!["--temperature", "-0.5"],
            "error: invalid value '-0.5' for '--temperature <TEMPERATURE>': must be >= 0 (0 = greedy), got -0.5".into(),
        ),
        (
            vec!["--top-p", "0"],
            "error: invalid value '0' for '--top-p <TOP_P>': must be in (0, 1], got 0".into(),
        ),
        (
            vec!["--top-k", "-1"],
            "error: invalid value '-1' for '--top-k <TOP_K>': -1 is not in 0..=4294967295".into(),
        ),
        (
            vec!["--n", "0"],
            "error: invalid value '0' for '--n <N>': 0 is not in 1..18446744073709551615".into(),
        ),
    ] {
        let args: Vec<&str> = generate.iter().copied().chain(extra.iter().copied()).collect();
        assert_eq!(refused(&args), want, "{extra:?}");
    }
    assert_eq!(
        refused(&[
            "bench",
            "generate",
            "--model",
            "m",
            "--prompts",
            "p",
            "--device",
            "cuda:7"
        ]),
        format!(
            "error: invalid value 'cuda:7' for '--device <DEVICE>': device `cuda:7` does not exist: {cuda}"
        )
    );
}
