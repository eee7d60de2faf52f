//! The on-disk BM25 index (tantivy).
