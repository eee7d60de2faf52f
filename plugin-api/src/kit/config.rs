//! Config tables whose described keys are derived from the struct that parses them.
//!
//! [`config_table!`](crate::config_table) declares a component's config struct once:
//! each field's name is a key, its Rust type gives the key's TOML type
//! ([`ConfigType`]), its doc comment is the key's doc, and `= expr` its default. From
//! that one declaration come the struct, its parser (unknown keys refused, absent keys
//! taking their defaults, a missing required key named with its doc), `Default` when
//! every key has one, and [`ConfigTable::config_keys`], whose defaults are those very
//! values written by the `toml` crate. The description `drmas check` and `drmas
//! plugins inspect` use therefore cannot disagree with what the component parses.

use crate::ConfigKey;
use serde::{
    Serialize,
    de::{self, DeserializeSeed, Deserializer, Visitor},
};
use std::{
    collections::{BTreeMap, HashMap},
    fmt,
    path::PathBuf,
};

/// A config struct declared with [`config_table!`](crate::config_table): it parses
/// its TOML table and describes its keys.
pub trait ConfigTable: serde::de::DeserializeOwned {
    /// The keys of the table, in field order, with their types, defaults and docs.
    fn config_keys() -> Vec<ConfigKey>;
}

/// The TOML type of a config value, as a reader would write it: `string`, `integer`,
/// `float`, `boolean`, `array of strings`, `table {question, answer}`.
///
/// Implemented for strings, paths, numbers, booleans, `Vec`s and string-keyed maps of
/// such values, and for every [`config_table!`](crate::config_table) (a nested table).
/// Implement it for your own value types, e.g. an enum read from a string:
///
/// ```
/// use drmas_plugin_api::kit::ConfigType;
///
/// #[derive(serde::Deserialize, serde::Serialize)]
/// #[serde(rename_all = "lowercase")]
/// enum Mode { Fast, Exact }
///
/// impl ConfigType for Mode {
///     fn config_type() -> String {
///         "string".into()
///     }
/// }
/// assert_eq!(<Vec<Mode>>::config_type(), "array of strings");
/// ```
///
/// `Option` has no type of its own on purpose: a key the table may lack takes a
/// default that says what absent means (`""` for "no verifier"), so the description
/// shows it.
pub trait ConfigType {
    fn config_type() -> String;
}

macro_rules! config_types {
    ($name:literal: $($t:ty),*) => {
        $(impl ConfigType for $t {
            fn config_type() -> String {
                $name.to_string()
            }
        })*
    };
}

config_types!("string": String, char, PathBuf);
config_types!("integer": i8, i16, i32, i64, isize, u8, u16, u32, u64, usize);
config_types!("float": f32, f64);
config_types!("boolean": bool);

impl<T: ConfigType> ConfigType for Vec<T> {
    fn config_type() -> String {
        format!("array of {}", plural(&T::config_type()))
    }
}

impl<T: ConfigType> ConfigType for BTreeMap<String, T> {
    fn config_type() -> String {
        "table".to_string()
    }
}

impl<T: ConfigType, S> ConfigType for HashMap<String, T, S> {
    fn config_type() -> String {
        "table".to_string()
    }
}

/// `strings` for `string`, `tables {a, b}` for `table {a, b}`: the first word gets the
/// `s`.
fn plural(ty: &str) -> String {
    match ty.split_once(' ') {
        Some((word, rest)) => format!("{word}s {rest}"),
        None => format!("{ty}s"),
    }
}

/// The default of a config key as TOML text, on one line: what the `toml` crate writes
/// for `value`, with strings as basic (double-quoted, escaped) strings and tables
/// inline, so `drmas plugins inspect` shows it in one row.
///
/// ```
/// use drmas_plugin_api::kit::toml_text;
///
/// assert_eq!(toml_text(&"say \"hi\"\n").unwrap(), r#""say \"hi\"\n""#);
/// assert_eq!(toml_text(&vec![1, 2]).unwrap(), "[1, 2]");
/// assert_eq!(toml_text(&0.5f32).unwrap(), "0.5");
/// assert!(toml_text(&None::<u32>).is_err());
/// ```
pub fn toml_text<T: Serialize + ?Sized>(value: &T) -> Result<String, String> {
    let mut written = String::new();
    value
        .serialize(toml::ser::ValueSerializer::new(&mut written))
        .map_err(|e| e.to_string().trim_end().to_string())?;
    // What the toml crate wrote is exact but may span lines (`'''` strings); read it
    // back and write it out again on one line.
    let parsed: toml::Value = written
        .parse()
        .map_err(|e: toml::de::Error| e.message().to_string())?;
    let mut out = String::new();
    write_inline(&parsed, &mut out);
    Ok(out)
}

fn write_inline(value: &toml::Value, out: &mut String) {
    use toml_writer::{ToTomlKey, ToTomlValue, TomlKeyBuilder, TomlStringBuilder};
    match value {
        toml::Value::String(s) => {
            out.push_str(&TomlStringBuilder::new(s).as_basic().to_toml_value())
        }
        toml::Value::Integer(i) => out.push_str(&i.to_toml_value()),
        toml::Value::Float(f) => out.push_str(&f.to_toml_value()),
        toml::Value::Boolean(b) => out.push_str(&b.to_toml_value()),
        toml::Value::Datetime(d) => out.push_str(&d.to_string()),
        toml::Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_inline(item, out);
            }
            out.push(']');
        }
        toml::Value::Table(table) if table.is_empty() => out.push_str("{}"),
        toml::Value::Table(table) => {
            out.push_str("{ ");
            for (i, (key, item)) in table.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                out.push_str(&TomlKeyBuilder::new(key).as_default().to_toml_key());
                out.push_str(" = ");
                write_inline(item, out);
            }
            out.push_str(" }");
        }
    }
}

/// The one-line doc of a key from its doc-comment lines.
fn doc_line(lines: &[&str]) -> String {
    lines
        .iter()
        .map(|l| l.trim())
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

// What `config_table!` expands to calls the items below; they are public only so that
// the expansion, in the author's crate, can name them.

#[doc(hidden)]
pub fn __key<T: ConfigType>(name: &str, docs: &[&str], default: Option<String>) -> ConfigKey {
    ConfigKey {
        name: name.to_string(),
        ty: T::config_type(),
        default,
        doc: doc_line(docs),
    }
}

#[doc(hidden)]
pub fn __default_text<T: Serialize>(table: &str, key: &str, value: &T) -> String {
    toml_text(value).unwrap_or_else(|e| {
        panic!("config key `{key}` of {table}: its default cannot be written as TOML ({e})")
    })
}

#[doc(hidden)]
pub fn __missing<T: ConfigType>(key: &str, docs: &[&str]) -> String {
    let doc = doc_line(docs);
    if doc.is_empty() {
        format!("missing required key `{key}` ({})", T::config_type())
    } else {
        format!("missing required key `{key}` ({}: {doc})", T::config_type())
    }
}

#[doc(hidden)]
pub fn __table_type(fields: &[&str]) -> String {
    format!("table {{{}}}", fields.join(", "))
}

/// Reads one key of a table: a known field's name, or serde's "unknown field" error,
/// raised while the key is read so the error points at the key in the text.
#[doc(hidden)]
pub struct __Key(pub &'static [&'static str]);

impl<'de> DeserializeSeed<'de> for __Key {
    type Value = &'static str;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_identifier(self)
    }
}

impl Visitor<'_> for __Key {
    type Value = &'static str;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a key name")
    }
    fn visit_str<E: de::Error>(self, key: &str) -> Result<Self::Value, E> {
        self.0
            .iter()
            .copied()
            .find(|field| *field == key)
            .ok_or_else(|| E::unknown_field(key, self.0))
    }
}

/// Declares a component's config struct, from which its parser and its described
/// keys are derived (see [`kit::config`](crate::kit::config)).
///
/// Each field is `/// doc` lines, then `name: Type = default,` for an optional key or
/// `name: Type,` for a required one. Field types implement serde's `Serialize` and
/// `Deserialize` and the kit's [`ConfigType`](crate::kit::ConfigType). Attributes on
/// the struct (`#[derive(Debug, Clone)]`, docs) are kept; a field takes doc comments
/// only. The macro implements `Deserialize`, `Serialize`,
/// [`ConfigTable`](crate::kit::ConfigTable), `ConfigType` (so the struct can be a
/// nested table of another) and, when every key has a default, `Default`: do not
/// derive those yourself.
///
/// ```
/// use drmas_plugin_api::{config_table, kit::ConfigTable, parse_config, ConfigKey};
///
/// config_table! {
///     /// The `[environment.config]` table of `acme/game`.
///     #[derive(Debug, PartialEq)]
///     pub struct GameConfig {
///         /// calculator calls per episode
///         pub max_calls: u32 = 4,
///         /// the tool's name
///         pub tool: String = "calculator".into(),
///         /// the puzzle file
///         pub puzzles: String,
///     }
/// }
///
/// assert_eq!(
///     GameConfig::config_keys(),
///     [
///         ConfigKey::optional("max_calls", "integer", "4", "calculator calls per episode"),
///         ConfigKey::optional("tool", "string", "\"calculator\"", "the tool's name"),
///         ConfigKey::required("puzzles", "string", "the puzzle file"),
///     ]
/// );
/// let config: GameConfig = parse_config("puzzles = \"p.jsonl\"\nmax_calls = 2").unwrap();
/// assert_eq!((config.max_calls, config.tool.as_str()), (2, "calculator"));
///
/// let err = parse_config::<GameConfig>("puzzles = \"p\"\nmax_call = 2").unwrap_err();
/// assert_eq!(
///     err.message(),
///     "unknown field `max_call`, expected one of `max_calls`, `tool`, `puzzles` (at `max_call`)"
/// );
/// let err = parse_config::<GameConfig>("").unwrap_err();
/// assert_eq!(err.message(), "missing required key `puzzles` (string: the puzzle file)");
/// ```
#[macro_export]
macro_rules! config_table {
    // Every key has a default: the table is `Default` too, built from the same values.
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident {
            $(
                $(#[doc = $doc:expr])*
                $fvis:vis $field:ident : $ty:ty = $default:expr
            ),* $(,)?
        }
    ) => {
        $crate::config_table! {
            @table [$(#[$meta])*] $vis $name
            [$( [$($doc),*] $fvis $field : $ty = [$default] )*]
        }

        impl ::core::default::Default for $name {
            fn default() -> Self {
                Self { $( $field: $default, )* }
            }
        }
    };
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident {
            $(
                $(#[doc = $doc:expr])*
                $fvis:vis $field:ident : $ty:ty $(= $default:expr)?
            ),* $(,)?
        }
    ) => {
        $crate::config_table! {
            @table [$(#[$meta])*] $vis $name
            [$( [$($doc),*] $fvis $field : $ty = [$($default)?] )*]
        }
    };
    (
        @table [$($meta:tt)*] $vis:vis $name:ident
        [$( [$($doc:expr),*] $fvis:vis $field:ident : $ty:ty = [$($default:expr)?] )*]
    ) => {
        $($meta)*
        $vis struct $name {
            $( $(#[doc = $doc])* $fvis $field: $ty, )*
        }

        impl $name {
            #[doc(hidden)]
            const __FIELDS: &'static [&'static str] = &[$(::core::stringify!($field)),*];
        }

        impl $crate::kit::ConfigTable for $name {
            fn config_keys() -> ::std::vec::Vec<$crate::ConfigKey> {
                ::std::vec![$(
                    $crate::kit::config::__key::<$ty>(
                        ::core::stringify!($field),
                        &[$($doc),*],
                        $crate::config_table!(@describe $name $field $ty [$($default)?]),
                    ),
                )*]
            }
        }

        impl $crate::kit::ConfigType for $name {
            fn config_type() -> ::std::string::String {
                $crate::kit::config::__table_type(Self::__FIELDS)
            }
        }

        impl $crate::serde::Serialize for $name {
            #[allow(unused_mut)]
            fn serialize<S>(&self, serializer: S) -> ::core::result::Result<S::Ok, S::Error>
            where
                S: $crate::serde::Serializer,
            {
                use $crate::serde::ser::SerializeStruct as _;
                let mut table = serializer
                    .serialize_struct(::core::stringify!($name), Self::__FIELDS.len())?;
                $( table.serialize_field(::core::stringify!($field), &self.$field)?; )*
                table.end()
            }
        }

        impl<'de> $crate::serde::Deserialize<'de> for $name {
            fn deserialize<D>(deserializer: D) -> ::core::result::Result<Self, D::Error>
            where
                D: $crate::serde::Deserializer<'de>,
            {
                #[allow(non_camel_case_types)]
                struct __Slots {
                    $( $field: ::core::option::Option<$ty>, )*
                }
                struct __Visitor;
                impl<'de> $crate::serde::de::Visitor<'de> for __Visitor {
                    type Value = $name;
                    fn expecting(
                        &self,
                        f: &mut ::core::fmt::Formatter,
                    ) -> ::core::fmt::Result {
                        f.write_str("a table")
                    }
                    #[allow(unused_mut, unused_variables)]
                    fn visit_map<A>(self, mut map: A) -> ::core::result::Result<$name, A::Error>
                    where
                        A: $crate::serde::de::MapAccess<'de>,
                    {
                        let mut slots = __Slots { $( $field: ::core::option::Option::None, )* };
                        while let ::core::option::Option::Some(key) =
                            map.next_key_seed($crate::kit::config::__Key($name::__FIELDS))?
                        {
                            $(
                                if key == ::core::stringify!($field) {
                                    if slots.$field.is_some() {
                                        return ::core::result::Result::Err(
                                            <A::Error as $crate::serde::de::Error>::duplicate_field(
                                                ::core::stringify!($field),
                                            ),
                                        );
                                    }
                                    slots.$field = ::core::option::Option::Some(map.next_value()?);
                                    continue;
                                }
                            )*
                            // `__Key` returns known names only.
                            let _ = key;
                        }
                        ::core::result::Result::Ok($name {
                            $(
                                $field: match slots.$field {
                                    ::core::option::Option::Some(value) => value,
                                    ::core::option::Option::None => $crate::config_table!(
                                        @absent A $field $ty [$($doc),*] [$($default)?]
                                    ),
                                },
                            )*
                        })
                    }
                }
                deserializer.deserialize_struct(
                    ::core::stringify!($name),
                    $name::__FIELDS,
                    __Visitor,
                )
            }
        }
    };
    (@describe $name:ident $field:ident $ty:ty [$default:expr]) => {
        ::core::option::Option::Some($crate::kit::config::__default_text::<$ty>(
            ::core::stringify!($name),
            ::core::stringify!($field),
            &$default,
        ))
    };
    (@describe $name:ident $field:ident $ty:ty []) => {
        ::core::option::Option::None
    };
    (@absent $a:ident $field:ident $ty:ty [$($doc:expr),*] [$default:expr]) => {
        $default
    };
    (@absent $a:ident $field:ident $ty:ty [$($doc:expr),*] []) => {
        return ::core::result::Result::Err(<$a::Error as $crate::serde::de::Error>::custom(
            $crate::kit::config::__missing::<$ty>(::core::stringify!($field), &[$($doc),*]),
        ))
    };
}

config_table! {
    /// The config of a component that takes no keys: an empty table, so a stray key is
    /// refused (`unknown field `x`, there are no fields`) instead of ignored.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct NoConfig {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ConfigKey, parse_config};

    config_table! {
        /// A nested table.
        #[derive(Debug, Clone, PartialEq)]
        pub struct Shot {
            /// the question
            pub question: String,
            /// the reply,
            /// over two lines
            pub reply: String = String::new(),
        }
    }

    config_table! {
        #[derive(Debug, Clone, PartialEq)]
        struct Every {
            /// a prompt with quotes and lines
            prompt: String = "say \"hi\"\n\tthen \\boxed{}".to_string(),
            /// an integer
            count: u32 = 4,
            /// a float
            scale: f64 = 1e-6,
            /// a small float
            weight: f32 = 0.1,
            /// a flag
            flag: bool = true,
            /// names
            names: Vec<String> = vec!["a".into(), "b c".into()],
            /// worked examples
            shots: Vec<Shot> = vec![Shot { question: "q?".into(), reply: "r".into() }],
            /// a map
            extra: BTreeMap<String, i64> = BTreeMap::from([("x".to_string(), 1), ("y z".to_string(), 2)]),
        }
    }

    #[test]
    fn keys_follow_the_fields_with_types_docs_and_toml_defaults() {
        let keys = Every::config_keys();
        let described: Vec<(&str, &str, Option<&str>, &str)> = keys
            .iter()
            .map(|k| {
                (
                    k.name.as_str(),
                    k.ty.as_str(),
                    k.default.as_deref(),
                    k.doc.as_str(),
                )
            })
            .collect();
        assert_eq!(
            described,
            [
                (
                    "prompt",
                    "string",
                    Some(r#""say \"hi\"\n\tthen \\boxed{}""#),
                    "a prompt with quotes and lines"
                ),
                ("count", "integer", Some("4"), "an integer"),
                ("scale", "float", Some("0.000001"), "a float"),
                ("weight", "float", Some("0.1"), "a small float"),
                ("flag", "boolean", Some("true"), "a flag"),
                (
                    "names",
                    "array of strings",
                    Some(r#"["a", "b c"]"#),
                    "names"
                ),
                (
                    "shots",
                    "array of tables {question, reply}",
                    Some(r#"[{ question = "q?", reply = "r" }]"#),
                    "worked examples"
                ),
                ("extra", "table", Some(r#"{ x = 1, "y z" = 2 }"#), "a map"),
            ]
        );
        assert_eq!(
            Shot::config_keys(),
            [
                ConfigKey::required("question", "string", "the question"),
                ConfigKey::optional("reply", "string", "\"\"", "the reply, over two lines"),
            ]
        );
    }

    #[test]
    fn every_described_default_parses_back_to_the_default() {
        // The table written from the descriptions is the struct's own `Default`.
        let text: String = Every::config_keys()
            .iter()
            .map(|k| format!("{} = {}\n", k.name, k.default.as_deref().unwrap()))
            .collect();
        assert_eq!(parse_config::<Every>(&text).unwrap(), Every::default());
        assert_eq!(parse_config::<Every>("").unwrap(), Every::default());
        for key in Every::config_keys() {
            crate::spec::check_config_key("test/every", &key).unwrap();
        }
    }

    #[test]
    fn given_keys_replace_defaults_and_nested_tables_parse() {
        let every: Every = parse_config(
            "count = 7\nshots = [{ question = \"a\" }, { question = \"b\", reply = \"c\" }]",
        )
        .unwrap();
        assert_eq!(every.count, 7);
        assert_eq!(
            every.shots,
            [
                Shot {
                    question: "a".into(),
                    reply: String::new()
                },
                Shot {
                    question: "b".into(),
                    reply: "c".into()
                },
            ]
        );
        assert_eq!(every.prompt, Every::default().prompt);
    }

    #[test]
    fn bad_tables_are_refused_with_the_key_and_its_position() {
        let err = parse_config::<Every>("count = 1\ncuont = 2").unwrap_err();
        assert_eq!(
            err.message(),
            "unknown field `cuont`, expected one of `prompt`, `count`, `scale`, `weight`, `flag`, \
             `names`, `shots`, `extra` (at `cuont`)"
        );
        let err = parse_config::<Every>("count = \"six\"").unwrap_err();
        assert_eq!(
            err.message(),
            "invalid type: string \"six\", expected u32 (at `\"six\"`)"
        );
        let err = parse_config::<Every>("shots = [{ reply = \"r\" }]").unwrap_err();
        assert_eq!(
            err.message(),
            "missing required key `question` (string: the question) (at `{ reply = \"r\" }`)"
        );
        let err = parse_config::<Every>("[count]").unwrap_err();
        assert!(
            err.message().starts_with("invalid type: map, expected u32"),
            "{err}"
        );
        // A key given twice is a TOML error before it reaches the table.
        let err = parse_config::<Every>("count = 1\ncount = 2").unwrap_err();
        assert!(err.message().contains("duplicate key"), "{err}");
    }

    #[test]
    fn no_config_refuses_every_key() {
        assert_eq!(parse_config::<NoConfig>("").unwrap(), NoConfig {});
        assert_eq!(NoConfig::config_keys(), []);
        let err = parse_config::<NoConfig>("x = 1").unwrap_err();
        assert_eq!(
            err.message(),
            "unknown field `x`, there are no fields (at `x`)"
        );
    }

    #[test]
    fn types_of_nested_values() {
        assert_eq!(<Vec<Vec<u8>>>::config_type(), "array of arrays of integers");
        assert_eq!(<HashMap<String, String>>::config_type(), "table");
        assert_eq!(PathBuf::config_type(), "string");
        assert_eq!(Shot::config_type(), "table {question, reply}");
    }

    #[test]
    fn a_default_toml_cannot_write_is_named() {
        assert_eq!(
            toml_text(&None::<u8>).unwrap_err(),
            "unsupported None value"
        );
        let panic = std::panic::catch_unwind(|| __default_text("T", "k", &None::<u8>)).unwrap_err();
        assert_eq!(
            panic.downcast_ref::<String>().map(String::as_str),
            Some(
                "config key `k` of T: its default cannot be written as TOML (unsupported None value)"
            )
        );
    }
}
