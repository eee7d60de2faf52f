//! Reading the Arrow IPC streams that HF `datasets` saves (`data-00000-of-00001.arrow`)
//! with `arrow-ipc`'s `StreamReader`: a stream held in memory, and its string and
//! list-of-string columns by name, a struct's field written `answer.aliases`. Errors
//! name the member, the column and the row; rows count from 0 across record batches.

use crate::data::DataError;
use arrow_array::{Array, ArrayRef, RecordBatch, cast::AsArray};
use arrow_ipc::reader::StreamReader;
use arrow_schema::{DataType, SchemaRef};
use std::{
    io::Cursor,
    path::{Path, PathBuf},
};

/// One Arrow IPC stream, read whole.
pub struct ArrowTable {
    wheel: PathBuf,
    member: String,
    schema: SchemaRef,
    batches: Vec<RecordBatch>,
}

impl ArrowTable {
    /// Reads the stream in `bytes`, the member `member` of `wheel` (both only for
    /// messages).
    pub fn read(wheel: &Path, member: &str, bytes: &[u8]) -> Result<Self, DataError> {
        let layout = |message: String| DataError::Layout {
            wheel: wheel.to_path_buf(),
            at: member.to_string(),
            message,
        };
        let reader = StreamReader::try_new(Cursor::new(bytes), None)
            .map_err(|e| layout(format!("not an Arrow IPC stream: {e}")))?;
        let schema = reader.schema();
        let batches = reader
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| layout(format!("cannot read a record batch: {e}")))?;
        Ok(Self {
            wheel: wheel.to_path_buf(),
            member: member.to_string(),
            schema,
            batches,
        })
    }

    /// The number of rows in all batches.
    pub fn rows(&self) -> usize {
        self.batches.iter().map(RecordBatch::num_rows).sum()
    }

    /// An error about the member, or about one row of it.
    pub fn err(&self, row: Option<usize>, message: impl Into<String>) -> DataError {
        DataError::Layout {
            wheel: self.wheel.clone(),
            at: match row {
                Some(r) => format!("{}: row {r}", self.member),
                None => self.member.clone(),
            },
            message: message.into(),
        }
    }

    /// The values of a string column, `None` where the row (or a struct around the
    /// value) is null.
    pub fn strings(&self, column: &str) -> Result<Vec<Option<String>>, DataError> {
        let mut out = Vec::with_capacity(self.rows());
        for batch in &self.batches {
            let (leaf, parents) = self.resolve(batch, column)?;
            if !is_string(leaf.data_type()) {
                return Err(self.wrong_type(column, "a string", leaf.data_type()));
            }
            for i in 0..leaf.len() {
                let null = leaf.is_null(i) || parents.iter().any(|p| p.is_null(i));
                out.push(if null {
                    None
                } else {
                    string_at(leaf.as_ref(), i).map(str::to_string)
                });
            }
        }
        Ok(out)
    }

    /// The values of a list-of-strings column (HF's `Sequence(Value("string"))`), whole
    /// strings in their order; `None` where the row is null. A null string inside a
    /// list is an error.
    pub fn string_lists(&self, column: &str) -> Result<Vec<Option<Vec<String>>>, DataError> {
        let mut out = Vec::with_capacity(self.rows());
        let mut row0 = 0;
        for batch in &self.batches {
            let (leaf, parents) = self.resolve(batch, column)?;
            let item = match leaf.data_type() {
                DataType::List(f) | DataType::LargeList(f) => f.data_type(),
                other => return Err(self.wrong_type(column, "a list of strings", other)),
            };
            if !is_string(item) {
                return Err(self.wrong_type(column, "a list of strings", leaf.data_type()));
            }
            for i in 0..leaf.len() {
                if leaf.is_null(i) || parents.iter().any(|p| p.is_null(i)) {
                    out.push(None);
                    continue;
                }
                let items = match leaf.data_type() {
                    DataType::List(_) => leaf.as_list::<i32>().value(i),
                    _ => leaf.as_list::<i64>().value(i),
                };
                let mut list = Vec::with_capacity(items.len());
                for j in 0..items.len() {
                    match (!items.is_null(j))
                        .then(|| string_at(items.as_ref(), j))
                        .flatten()
                    {
                        Some(s) => list.push(s.to_string()),
                        None => {
                            return Err(self.err(
                                Some(row0 + i),
                                format!("column `{column}`: item {j} is null"),
                            ));
                        }
                    }
                }
                out.push(Some(list));
            }
            row0 += batch.num_rows();
        }
        Ok(out)
    }

    /// The array of `column` in `batch` and the struct arrays around it (outermost
    /// first), whose nulls make the row null.
    fn resolve(
        &self,
        batch: &RecordBatch,
        column: &str,
    ) -> Result<(ArrayRef, Vec<ArrayRef>), DataError> {
        let mut parts = column.split('.');
        let first = parts.next().unwrap_or_default();
        let mut cur = batch.column_by_name(first).cloned().ok_or_else(|| {
            let names: Vec<&str> = self
                .schema
                .fields()
                .iter()
                .map(|f| f.name().as_str())
                .collect();
            self.err(
                None,
                format!("no column `{column}` (columns: {})", names.join(", ")),
            )
        })?;
        let mut parents = Vec::new();
        let mut path = first.to_string();
        for part in parts {
            let Some(st) = cur.as_struct_opt() else {
                return Err(self.err(
                    None,
                    format!(
                        "column `{path}` must be a struct to have a field `{part}`, found {}",
                        cur.data_type()
                    ),
                ));
            };
            let child = st.column_by_name(part).cloned().ok_or_else(|| {
                self.err(
                    None,
                    format!(
                        "no column `{column}` (`{path}` has: {})",
                        st.column_names().join(", ")
                    ),
                )
            })?;
            parents.push(cur.clone());
            cur = child;
            path = format!("{path}.{part}");
        }
        Ok((cur, parents))
    }

    fn wrong_type(&self, column: &str, expected: &str, found: &DataType) -> DataError {
        self.err(
            None,
            format!("column `{column}` must be {expected}, found {found}"),
        )
    }
}

fn is_string(t: &DataType) -> bool {
    matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
}

/// The string at `i` of a string array of any of the three layouts.
fn string_at(array: &dyn Array, i: usize) -> Option<&str> {
    match array.data_type() {
        DataType::Utf8 => Some(array.as_string::<i32>().value(i)),
        DataType::LargeUtf8 => Some(array.as_string::<i64>().value(i)),
        DataType::Utf8View => Some(array.as_string_view().value(i)),
        _ => None,
    }
}
