//! A Search-R1 retrieval server as a [`crate::Retriever`].
