//! Apache Pulsar backend (in progress).
