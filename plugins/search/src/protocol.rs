//! Search-R1's retrieval protocol: the JSON of `POST /retrieve`.
