//! Plans resolved from fixtures.
