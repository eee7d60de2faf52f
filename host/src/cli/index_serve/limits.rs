//! The limits of `drmas index serve`: what one request may ask and how long a connection
//! may take, each a flag with a default sized for trainers' batches. Every value is
//! checked while the command line is parsed (0 is refused, naming the flag), and the
//! whole set is printed when the server starts.

use std::time::Duration;

/// The flags that bound the server. Defaults: a trainer's batch (Search-R1 sends one
/// request per turn of a generation batch, a few thousand queries at topk 3) passes with
/// room to spare; a request for millions of passages does not.
#[derive(clap::Args, Debug, Clone)]
pub struct LimitArgs {
    /// The most passages one request may ask for, counted as queries × topk (a query
    /// with topk 0 counts as one); a request over it is refused with 422.
    #[arg(long, value_name = "N", default_value = "65536", value_parser = at_least_one)]
    pub max_hits: usize,
    /// The largest `topk` a request may give.
    #[arg(long, value_name = "N", default_value = "1000", value_parser = at_least_one)]
    pub max_topk: usize,
    /// The largest answer the server builds (bytes, or with KiB/MiB/GiB); a request whose
    /// answer would be larger is refused with 422 as soon as it crosses the limit.
    #[arg(long, value_name = "BYTES", default_value = "64MiB", value_parser = bytes)]
    pub max_response_bytes: usize,
    /// The largest request body (bytes, or with KiB/MiB/GiB); a larger one gets 413.
    #[arg(long, value_name = "BYTES", default_value = "64MiB", value_parser = bytes)]
    pub max_request_bytes: usize,
    /// The most connections open at once. When a connection arrives at the limit, the one
    /// that has waited longest without a request under way is closed to make room; when
    /// every one is busy, the newcomer waits in the listen queue.
    #[arg(long, value_name = "N", default_value = "256", value_parser = at_least_one)]
    pub max_connections: usize,
    /// Seconds from the first byte of a request to the end of its head (request line and
    /// headers); a connection that trickles its head longer is closed.
    #[arg(long, value_name = "SECS", default_value = "10", value_parser = seconds)]
    pub header_timeout: Duration,
    /// Seconds from a request's head to the end of its body; a slower body gets 408.
    #[arg(long, value_name = "SECS", default_value = "30", value_parser = seconds)]
    pub body_timeout: Duration,
    /// Seconds a connection may stay with nothing moving either way and no search running:
    /// one that never sends, is kept alive unused, or stops reading its answer is closed.
    #[arg(long, value_name = "SECS", default_value = "60", value_parser = seconds)]
    pub idle_timeout: Duration,
}

impl LimitArgs {
    /// The limits as the server prints them at start.
    pub fn describe(&self) -> String {
        format!(
            "limits: {} passages (queries × topk), topk {}, a {} request, a {} answer per request; \
             {} connections; header timeout {}, body timeout {}, idle timeout {}",
            self.max_hits,
            self.max_topk,
            size(self.max_request_bytes),
            size(self.max_response_bytes),
            self.max_connections,
            secs(self.header_timeout),
            secs(self.body_timeout),
            secs(self.idle_timeout),
        )
    }
}

/// A count of at least 1.
fn at_least_one(text: &str) -> Result<usize, String> {
    let n: usize = text
        .trim()
        .parse()
        .map_err(|_| format!("`{text}` is not a whole number"))?;
    if n == 0 {
        return Err("must be at least 1".into());
    }
    Ok(n)
}

/// A size in bytes: `1048576`, `64KiB`, `64MiB`, `1GiB`; at least 1 byte.
fn bytes(text: &str) -> Result<usize, String> {
    let t = text.trim();
    let (number, unit) = match t.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => t.split_at(i),
        None => (t, ""),
    };
    let scale: usize = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        _ => {
            return Err(format!(
                "`{text}` is not a size (bytes, or a whole number with KiB, MiB or GiB)"
            ));
        }
    };
    let n: usize = number.parse().map_err(|_| {
        format!("`{text}` is not a size (bytes, or a whole number with KiB, MiB or GiB)")
    })?;
    let n = n
        .checked_mul(scale)
        .ok_or_else(|| format!("`{text}` is too large"))?;
    if n == 0 {
        return Err("must be at least 1 byte".into());
    }
    Ok(n)
}

/// A duration in seconds, fractions allowed (`0.5`); more than 0 and at most a day.
fn seconds(text: &str) -> Result<Duration, String> {
    let v: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("`{text}` is not a number of seconds"))?;
    if !v.is_finite() || v <= 0.0 {
        return Err(format!("must be more than 0 seconds, got {text}"));
    }
    if v > 86_400.0 {
        return Err(format!("must be at most 86400 seconds (a day), got {text}"));
    }
    Ok(Duration::from_secs_f64(v))
}

/// `64 MiB`, `1.5 KiB`, `300 bytes`.
pub fn size(n: usize) -> String {
    match n {
        n if n >= 1 << 30 && n % (1 << 30) == 0 => format!("{} GiB", n >> 30),
        n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{} MiB", n >> 20),
        n if n >= 1 << 10 && n % (1 << 10) == 0 => format!("{} KiB", n >> 10),
        n => format!("{n} bytes"),
    }
}

/// `10 s`, `0.5 s`.
pub fn secs(d: Duration) -> String {
    format!("{} s", d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_values_say_what_is_wrong() {
        assert_eq!(at_least_one("0").unwrap_err(), "must be at least 1");
        assert_eq!(
            at_least_one("-3").unwrap_err(),
            "`-3` is not a whole number"
        );
        assert_eq!(at_least_one("7").unwrap(), 7);
        assert_eq!(bytes("0").unwrap_err(), "must be at least 1 byte");
        assert_eq!(bytes("0MiB").unwrap_err(), "must be at least 1 byte");
        assert_eq!(
            bytes("12MB").unwrap_err(),
            "`12MB` is not a size (bytes, or a whole number with KiB, MiB or GiB)"
        );
        assert_eq!(
            bytes("MiB").unwrap_err(),
            "`MiB` is not a size (bytes, or a whole number with KiB, MiB or GiB)"
        );
        assert_eq!(
            bytes("99999999999999GiB").unwrap_err(),
            "`99999999999999GiB` is too large"
        );
        assert_eq!(bytes("1000").unwrap(), 1000);
        assert_eq!(bytes("64MiB").unwrap(), 64 << 20);
        assert_eq!(bytes("2 KiB").unwrap(), 2048);
        assert_eq!(
            seconds("0").unwrap_err(),
            "must be more than 0 seconds, got 0"
        );
        assert_eq!(
            seconds("nan").unwrap_err(),
            "must be more than 0 seconds, got nan"
        );
        assert_eq!(
            seconds("soon").unwrap_err(),
            "`soon` is not a number of seconds"
        );
        assert_eq!(
            seconds("1e9").unwrap_err(),
            "must be at most 86400 seconds (a day), got 1e9"
        );
        assert_eq!(seconds("0.25").unwrap(), Duration::from_millis(250));
    }

    #[test]
    fn sizes_print_in_their_unit() {
        assert_eq!(size(64 << 20), "64 MiB");
        assert_eq!(size(3 << 30), "3 GiB");
        assert_eq!(size(2048), "2 KiB");
        assert_eq!(size(1000), "1000 bytes");
        assert_eq!(secs(Duration::from_millis(500)), "0.5 s");
        assert_eq!(secs(Duration::from_secs(10)), "10 s");
    }
}
