//! Crewlet's outbound connections, built in one place.
