//! Small conversions between Rust and SQL values.

use crate::error::StoreError;

/// `u64` to a BIGINT column; values past `i64::MAX` are refused, not wrapped.
pub(crate) fn to_i64(what: &str, v: u64) -> Result<i64, StoreError> {
    i64::try_from(v).map_err(|_| StoreError::invalid(what, format!("{v} does not fit a BIGINT")))
}

/// A BIGINT column to `u64`; a negative value is bad data.
pub(crate) fn from_i64(what: &str, v: i64) -> Result<u64, StoreError> {
    u64::try_from(v).map_err(|_| StoreError::decode(what, format!("negative value {v}")))
}
