//! Sizes for people, shared by the memory estimates and the errors that report them.

/// A size for people: MiB below one GiB, GiB above.
pub fn gib(bytes: u64) -> String {
    const MIB: f64 = (1u64 << 20) as f64;
    const GIB: f64 = (1u64 << 30) as f64;
    if (bytes as f64) < GIB {
        format!("{:.1} MiB", bytes as f64 / MIB)
    } else {
        format!("{:.1} GiB", bytes as f64 / GIB)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn sizes_below_a_gib_are_in_mib() {
        assert_eq!(super::gib(3 << 30), "3.0 GiB");
        assert_eq!(super::gib(512 << 20), "512.0 MiB");
    }
}
