//! MLflow's REST API (`/api/2.0/mlflow/…`): one blocking call at a time, each tried
//! [`ATTEMPTS`] times with a growing pause and [`TIMEOUT`] as its limit; a refusal (4xx)
//! is not tried again.

use serde_json::{Value, json};
use std::{collections::BTreeMap, time::Duration};

/// Tries per call.
pub const ATTEMPTS: u32 = 3;
/// One call's limit.
const TIMEOUT: Duration = Duration::from_secs(10);

/// Calls to the server.
pub(super) struct Api {
    pub base: String,
    agent: ureq::Agent,
}

impl Api {
    pub fn new(uri: &str) -> Api {
        let base = uri.trim_end_matches('/').to_string();
        let mut builder = ureq::Agent::config_builder()
            .timeout_global(Some(TIMEOUT))
            .http_status_as_error(false);
        let loopback = base.contains("://127.0.0.1") || base.contains("://localhost");
        if loopback {
            builder = builder.proxy(None);
        }
        Api {
            base,
            agent: ureq::Agent::new_with_config(builder.build()),
        }
    }

    /// One call, tried [`ATTEMPTS`] times: the answer, or the last failure's text.
    /// A refusal by the server (4xx) is not tried again.
    pub fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Result<Value, String> {
        let url = format!("{}{path}", self.base);
        let mut last = String::new();
        for attempt in 0..ATTEMPTS {
            if attempt > 0 {
                std::thread::sleep(Duration::from_millis(300 << attempt));
            }
            let response = match (method, body) {
                ("GET", _) => self.agent.get(&url).call(),
                (_, Some(b)) => self.agent.post(&url).send_json(b),
                (_, None) => self.agent.post(&url).send_empty(),
            };
            match response {
                Err(e) => last = format!("{url}: {e}"),
                Ok(mut r) => {
                    let status = r.status().as_u16();
                    let text = r.body_mut().read_to_string().unwrap_or_default();
                    if (200..300).contains(&status) {
                        return Ok(serde_json::from_str(&text).unwrap_or(Value::Null));
                    }
                    last = format!(
                        "{url}: HTTP {status}: {}",
                        text.chars().take(300).collect::<String>()
                    );
                    if (400..500).contains(&status) && status != 429 {
                        return Err(last);
                    }
                }
            }
        }
        Err(last)
    }

    pub fn put(&self, path: &str, bytes: &[u8]) -> Result<(), String> {
        let url = format!("{}{path}", self.base);
        let mut last = String::new();
        for attempt in 0..ATTEMPTS {
            if attempt > 0 {
                std::thread::sleep(Duration::from_millis(300 << attempt));
            }
            match self
                .agent
                .put(&url)
                .header("Content-Type", "application/octet-stream")
                .send(bytes)
            {
                Ok(r) if (200..300).contains(&r.status().as_u16()) => return Ok(()),
                Ok(r) => last = format!("{url}: HTTP {}", r.status().as_u16()),
                Err(e) => last = format!("{url}: {e}"),
            }
        }
        Err(last)
    }

    /// `runs/get`: the run's info and data (params, tags, each metric's newest value).
    pub fn run(&self, run_id: &str) -> Result<Value, String> {
        self.call(
            "GET",
            &format!("/api/2.0/mlflow/runs/get?run_id={}", percent_encode(run_id)),
            None,
        )
    }

    /// The oldest live run of `experiment_id` whose tag `key` is `value` (`runs/search`),
    /// if there is one. `value` is a run folder's key, letters and digits.
    pub fn find_tagged(
        &self,
        experiment_id: &str,
        key: &str,
        value: &str,
    ) -> Result<Option<String>, String> {
        let v = self.call(
            "POST",
            "/api/2.0/mlflow/runs/search",
            Some(&json!({
                "experiment_ids": [experiment_id],
                "filter": format!("tags.`{key}` = '{value}'"),
                "order_by": ["attributes.start_time ASC"],
                "max_results": 1,
            })),
        )?;
        Ok(v["runs"]
            .as_array()
            .and_then(|runs| runs.first())
            .and_then(|r| r["info"]["run_id"].as_str())
            .map(str::to_string))
    }

    /// The files the run holds under the artifact folder `dir` (`artifacts/list`), as
    /// `dir/name` with their sizes.
    pub fn artifacts(&self, run_id: &str, dir: &str) -> Result<BTreeMap<String, u64>, String> {
        let v = self.call(
            "GET",
            &format!(
                "/api/2.0/mlflow/artifacts/list?run_id={}&path={}",
                percent_encode(run_id),
                percent_encode(dir)
            ),
            None,
        )?;
        Ok(listed_files(&v))
    }
}

/// The files (not folders) of an `artifacts/list` answer with their sizes (int64: a
/// number or a string in MLflow's JSON).
fn listed_files(answer: &Value) -> BTreeMap<String, u64> {
    answer["files"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|f| f["is_dir"].as_bool() != Some(true))
        .filter_map(|f| {
            let size = &f["file_size"];
            let size = size.as_u64().or_else(|| size.as_str()?.parse().ok())?;
            Some((f["path"].as_str()?.to_string(), size))
        })
        .collect()
}

/// `text` for a URL query value.
pub(super) fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_artifact_listing_gives_the_files_with_their_sizes() {
        // As MLflow's artifacts/list answers (a size as a number or a string).
        let answer = json!({
            "root_uri": "mlflow-artifacts:/1/abc/artifacts",
            "files": [
                {"path": "samples/step-000002.jsonl", "is_dir": false, "file_size": 5},
                {"path": "samples/step-000004.jsonl", "is_dir": false, "file_size": "7"},
                {"path": "samples/more", "is_dir": true}
            ]
        });
        let want: BTreeMap<String, u64> = [
            ("samples/step-000002.jsonl".to_string(), 5),
            ("samples/step-000004.jsonl".to_string(), 7),
        ]
        .into();
        assert_eq!(listed_files(&answer), want);
        // An empty folder: MLflow leaves `files` out.
        assert!(listed_files(&json!({"root_uri": "x"})).is_empty());
    }

    #[test]
    fn query_values_are_percent_encoded() {
        assert_eq!(percent_encode("math team/2"), "math%20team%2F2");
        assert_eq!(percent_encode("a-b_c.d~e"), "a-b_c.d~e");
    }
}
