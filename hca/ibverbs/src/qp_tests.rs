//! Tests of QPs and posting.
