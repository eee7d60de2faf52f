//! Overrides: `--set key.path=value` on the command line, and a sweep arm's settings.
//!
//! An override is applied to the experiment file's table before it is deserialized, so
//! it is typed and checked exactly like the file: an unknown key, a wrong type or a
//! value out of range is refused, and the error names the override instead of a line
//! of the file that does not hold the value.
//!
//! A key path is dotted (`trainer.steps`); a key with dots in it is quoted
//! (`plugins.sha256."libacme.so"`). In an array of tables an element is chosen by its
//! index (`agents.1.sampling.temperature`) or by its `name`, `id` or `component`
//! (`agents.verifier.sampling.temperature`, `models.solver-lm.lr`,
//! `rewards."math/boxed".weight`).

use super::source::KeyPath;
use std::fmt;

/// One override: where, what, and how the user wrote it.
#[derive(Debug, Clone, PartialEq)]
pub struct Override {
    /// The key path's segments as written.
    segments: Vec<String>,
    pub value: toml::Value,
    /// How messages name it: `--set trainer.steps=3`, or a sweep arm's key.
    pub origin: String,
}

/// The keys an array element may be chosen by, in the order they are tried.
const SELECTOR_KEYS: [&str; 3] = ["name", "id", "component"];

impl Override {
    /// An override of `key` with a typed value; `origin` is how messages name it.
    pub fn new(key: &str, value: toml::Value, origin: String) -> Result<Self, String> {
        Ok(Self {
            segments: split_key(key)?,
            value,
            origin,
        })
    }

    /// Parses `KEY=VALUE` as given to `--set`. The value is read as a TOML value
    /// (`3`, `5e-6`, `true`, `"text"`, `[1, 2]`, `{ low = 0.2 }`); what is not TOML
    /// and does not start like a quoted string, array or table is taken as a plain
    /// string, so `--set normalizer.component=norms/grpo` needs no quotes.
    pub fn parse_arg(arg: &str) -> Result<Self, String> {
        let Some((key, raw)) = arg.split_once('=') else {
            return Err(format!(
                "`{arg}` is not KEY=VALUE (e.g. trainer.steps=30, normalizer.component=norms/grpo)"
            ));
        };
        let key = key.trim();
        let raw = raw.trim();
        let value = parse_value(raw).map_err(|e| format!("`{}`: {e}", arg.escape_debug()))?;
        Self::new(key, value, format!("--set {key}={raw}")).map_err(|e| format!("`{arg}`: {e}"))
    }

    /// The key path as the user wrote it, dotted.
    pub fn key(&self) -> String {
        self.segments
            .iter()
            .map(|s| KeyPath::root().key(s).to_string())
            .collect::<Vec<_>>()
            .join(".")
    }

    /// Sets the value in `root`, creating tables on the way; returns the key path it
    /// resolved to (array elements by index), which errors are matched against.
    pub fn apply(&self, root: &mut toml::Table) -> Result<KeyPath, String> {
        self.apply_noting(root).map(|(path, _)| path)
    }

    /// [`Self::apply`], and the keys a table value dropped: a table value replaces the
    /// whole table that was there, so each key of the old table (dotted below it) that
    /// the new value lacks is no longer set.
    pub fn apply_noting(&self, root: &mut toml::Table) -> Result<(KeyPath, Vec<String>), String> {
        let mut whole = toml::Value::Table(std::mem::take(root));
        let mut dropped = Vec::new();
        let result = self.set_in(&mut whole, &self.segments, KeyPath::root(), &mut dropped);
        let toml::Value::Table(t) = whole else {
            unreachable!("the root stays a table")
        };
        *root = t;
        result.map(|path| (path, dropped))
    }

    fn set_in(
        &self,
        node: &mut toml::Value,
        segments: &[String],
        path: KeyPath,
        dropped: &mut Vec<String>,
    ) -> Result<KeyPath, String> {
        let (seg, rest) = segments.split_first().expect("a key has a segment");
        match node {
            toml::Value::Table(t) => {
                let path = path.key(seg);
                if rest.is_empty() {
                    if let Some(old) = t.insert(seg.clone(), self.value.clone()) {
                        missing_keys(&old, &self.value, "", dropped);
                    }
                    return Ok(path);
                }
                let child = t
                    .entry(seg.clone())
                    .or_insert_with(|| toml::Value::Table(toml::Table::new()));
                self.set_in(child, rest, path, dropped)
            }
            toml::Value::Array(items) => {
                let i = select_element(items, seg).map_err(|e| format!("`{path}`: {e}"))?;
                let path = path.index(i);
                if rest.is_empty() {
                    let old = std::mem::replace(&mut items[i], self.value.clone());
                    missing_keys(&old, &self.value, "", dropped);
                    return Ok(path);
                }
                self.set_in(&mut items[i], rest, path, dropped)
            }
            other => Err(format!(
                "`{path}` is {}, not a table that could hold `{}`",
                kind(other),
                self.key()
            )),
        }
    }
}

impl fmt::Display for Override {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.origin)
    }
}

/// The keys of table `old` (dotted from `prefix`) that table `new` lacks, nested tables
/// compared key by key; nothing when either is not a table.
fn missing_keys(old: &toml::Value, new: &toml::Value, prefix: &str, out: &mut Vec<String>) {
    let (toml::Value::Table(old), toml::Value::Table(new)) = (old, new) else {
        return;
    };
    for (k, v) in old {
        let key = format!("{prefix}{}", KeyPath::root().key(k));
        match new.get(k) {
            None => out.push(key),
            Some(n) => missing_keys(v, n, &format!("{key}."), out),
        }
    }
}

/// The index of the array element `select` names: a number, or the one element whose
/// `name`, `id` or `component` it is.
fn select_element(items: &[toml::Value], select: &str) -> Result<usize, String> {
    if let Ok(i) = select.parse::<usize>() {
        return if i < items.len() {
            Ok(i)
        } else {
            Err(format!(
                "has {} entries; index {i} is out of range",
                items.len()
            ))
        };
    }
    for key in SELECTOR_KEYS {
        let hits: Vec<usize> = items
            .iter()
            .enumerate()
            .filter(|(_, v)| v.get(key).and_then(toml::Value::as_str) == Some(select))
            .map(|(i, _)| i)
            .collect();
        match hits.as_slice() {
            [i] => return Ok(*i),
            [] => {}
            _ => {
                return Err(format!(
                    "{} entries have {key} `{select}`; choose one by its index",
                    hits.len()
                ));
            }
        }
    }
    let names: Vec<String> = items
        .iter()
        .filter_map(|v| {
            SELECTOR_KEYS
                .iter()
                .find_map(|k| v.get(k).and_then(toml::Value::as_str))
                .map(|s| format!("`{s}`"))
        })
        .collect();
    Err(format!(
        "no entry is named `{select}` (by name, id or component); there are {}",
        if names.is_empty() {
            format!("{} entries, chosen by index", items.len())
        } else {
            names.join(", ")
        }
    ))
}

fn kind(v: &toml::Value) -> &'static str {
    match v {
        toml::Value::String(_) => "a string",
        toml::Value::Integer(_) => "an integer",
        toml::Value::Float(_) => "a float",
        toml::Value::Boolean(_) => "a boolean",
        toml::Value::Datetime(_) => "a date",
        toml::Value::Array(_) => "an array",
        toml::Value::Table(_) => "a table",
    }
}

/// A dotted key path into segments; `"…"` quotes a segment with dots in it.
fn split_key(key: &str) -> Result<Vec<String>, String> {
    let mut segments = Vec::new();
    let mut rest = key.trim();
    if rest.is_empty() {
        return Err("the key path is empty".into());
    }
    loop {
        let (segment, after) = if let Some(quoted) = rest.strip_prefix('"') {
            let end = quoted
                .find('"')
                .ok_or_else(|| format!("`{key}`: a quoted key is not closed"))?;
            (quoted[..end].to_string(), &quoted[end + 1..])
        } else {
            let end = rest.find('.').unwrap_or(rest.len());
            (rest[..end].trim().to_string(), &rest[end..])
        };
        if segment.is_empty() {
            return Err(format!("`{key}` has an empty segment"));
        }
        segments.push(segment);
        if after.is_empty() {
            return Ok(segments);
        }
        rest = after
            .strip_prefix('.')
            .ok_or_else(|| format!("`{key}`: expected `.` after a quoted key"))?;
    }
}

/// A value as given after `=`: TOML, or else a plain string.
fn parse_value(raw: &str) -> Result<toml::Value, String> {
    if raw.is_empty() {
        return Err("the value is empty (write \"\" for an empty string)".into());
    }
    match toml::from_str::<toml::Table>(&format!("v = {raw}")) {
        Ok(mut t) => {
            let v = t.remove("v").expect("the key just parsed");
            if !t.is_empty() {
                // `2\nbogus = 99` reads as a document of two keys: a value is one.
                let more: Vec<String> = t.keys().map(|k| format!("`{k}`")).collect();
                return Err(format!(
                    "the value must be exactly one TOML value, but after `{}` it goes on with {} (a newline in the value?)",
                    v,
                    more.join(", ")
                ));
            }
            Ok(v)
        }
        Err(e) if raw.starts_with(['"', '\'', '[', '{']) => {
            Err(format!("not a TOML value: {}", e.message().trim_end()))
        }
        Err(_) => Ok(toml::Value::String(raw.to_string())),
    }
}

/// Whether an error about `key` (as `KeyPath` prints it) concerns what `set` (a
/// resolved override path) wrote: the path itself or anything below it.
pub(super) fn is_under(key: &str, set: &str) -> bool {
    key == set
        || key
            .strip_prefix(set)
            .is_some_and(|rest| rest.starts_with('.') || rest.starts_with('['))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(text: &str) -> toml::Table {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn values_are_toml_or_plain_strings() {
        let v = |a: &str| Override::parse_arg(a).unwrap().value;
        assert_eq!(v("trainer.steps=30"), toml::Value::Integer(30));
        assert_eq!(v("models.0.lr=5e-6"), toml::Value::Float(5e-6));
        assert_eq!(v("x=true"), toml::Value::Boolean(true));
        assert_eq!(v("normalizer.component=norms/grpo"), "norms/grpo".into());
        assert_eq!(v("x=\"3\""), "3".into());
        assert_eq!(v("x=[1, 2]"), toml::Value::Array(vec![1.into(), 2.into()]));
        assert_eq!(v(" x = 1.5 "), toml::Value::Float(1.5));
    }

    #[test]
    fn bad_arguments_say_what_is_wrong() {
        let e = |a: &str| Override::parse_arg(a).unwrap_err();
        assert!(
            e("trainer.steps").contains("is not KEY=VALUE"),
            "{}",
            e("trainer.steps")
        );
        assert!(e("=3").contains("the key path is empty"));
        assert!(e("a..b=1").contains("has an empty segment"));
        assert!(e("x=").contains("the value is empty"));
        assert!(e("x=[1, ").contains("not a TOML value"), "{}", e("x=[1, "));
        assert!(e("\"a.b=1").contains("a quoted key is not closed"));
        // One value, not a document: what follows a newline is not dropped.
        assert_eq!(
            e("trainer.steps=2\nbogus_key = 99"),
            "`trainer.steps=2\\nbogus_key = 99`: the value must be exactly one TOML value, but after `2` it goes on with `bogus_key` (a newline in the value?)"
        );
        assert!(e("x=1\n[trainer]\nsteps = 3").contains("goes on with `trainer`"));
    }

    #[test]
    fn a_table_value_names_the_keys_it_drops() {
        let mut t = table("[trainer]\nclip = { low = 0.2, high = 0.28, dual = 3.0 }\n");
        let o = Override::parse_arg("trainer.clip={ low = 0.3 }").unwrap();
        let (path, dropped) = o.apply_noting(&mut t).unwrap();
        assert_eq!(path.to_string(), "trainer.clip");
        assert_eq!(dropped, ["dual", "high"]);
        // Nested tables compare key by key; a key set alone drops nothing.
        let mut t = table("[a]\nb = { c = 1, d = { e = 2, f = 3 } }\n");
        let o = Override::parse_arg("a.b={ c = 1, d = { e = 5 } }").unwrap();
        assert_eq!(o.apply_noting(&mut t).unwrap().1, ["d.f"]);
        let o = Override::parse_arg("a.b.c=4").unwrap();
        assert!(o.apply_noting(&mut t).unwrap().1.is_empty());
    }

    #[test]
    fn keys_set_values_and_create_tables() {
        let mut t = table("[trainer]\nsteps = 3\n");
        let o = Override::parse_arg("trainer.steps=30").unwrap();
        assert_eq!(o.apply(&mut t).unwrap().to_string(), "trainer.steps");
        let o = Override::parse_arg("trainer.kl.coef=0.1").unwrap();
        assert_eq!(o.apply(&mut t).unwrap().to_string(), "trainer.kl.coef");
        assert_eq!(t, table("[trainer]\nsteps = 30\nkl = { coef = 0.1 }\n"));
        let o = Override::parse_arg("plugins.sha256.\"libacme.so\"=\"ab\"").unwrap();
        assert_eq!(o.key(), "plugins.sha256.\"libacme.so\"");
        assert_eq!(
            o.apply(&mut t).unwrap().to_string(),
            "plugins.sha256.\"libacme.so\""
        );
        assert_eq!(t["plugins"]["sha256"]["libacme.so"].as_str(), Some("ab"));
    }

    #[test]
    fn array_elements_by_index_or_name() {
        let text = "[[agents]]\nname = \"solver\"\n[[agents]]\nname = \"verifier\"\n\
                    [[models]]\nid = \"a-lm\"\n[[rewards]]\ncomponent = \"math/boxed\"\n";
        let mut t = table(text);
        let set = |t: &mut toml::Table, a: &str| {
            Override::parse_arg(a)
                .unwrap()
                .apply(t)
                .map(|p| p.to_string())
        };
        assert_eq!(
            set(&mut t, "agents.verifier.sampling.temperature=0.5").unwrap(),
            "agents[1].sampling.temperature"
        );
        assert_eq!(set(&mut t, "agents.0.model=x").unwrap(), "agents[0].model");
        assert_eq!(set(&mut t, "models.a-lm.lr=1e-5").unwrap(), "models[0].lr");
        assert_eq!(
            set(&mut t, "rewards.\"math/boxed\".weight=2").unwrap(),
            "rewards[0].weight"
        );
        assert_eq!(
            t["agents"][1]["sampling"]["temperature"].as_float(),
            Some(0.5)
        );
        assert_eq!(t["agents"][0]["model"].as_str(), Some("x"));
        // A whole element replaced by index.
        assert_eq!(set(&mut t, "models.0={ id = \"b\" }").unwrap(), "models[0]");
        assert_eq!(t["models"][0]["id"].as_str(), Some("b"));

        let e = set(&mut t, "agents.critic.model=x").unwrap_err();
        assert_eq!(
            e,
            "`agents`: no entry is named `critic` (by name, id or component); there are `solver`, `verifier`"
        );
        let e = set(&mut t, "agents.5.model=x").unwrap_err();
        assert_eq!(e, "`agents`: has 2 entries; index 5 is out of range");
        let e = set(&mut t, "agents.solver.model.x=1").unwrap_err();
        assert_eq!(
            e,
            "`agents[0].model` is a string, not a table that could hold `agents.solver.model.x`"
        );
    }

    #[test]
    fn errors_below_an_override_are_its_own() {
        assert!(is_under("agents[1].sampling", "agents[1].sampling"));
        assert!(is_under("agents[1].sampling.top_p", "agents[1].sampling"));
        assert!(is_under("data.val[2].path", "data.val"));
        assert!(!is_under("agents[1].samplingx", "agents[1].sampling"));
        assert!(!is_under("agents[1]", "agents[1].sampling"));
    }
}
