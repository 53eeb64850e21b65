//! The conformance suite on the local backend with rlimits instead of
//! cgroups (cgroups set aside on purpose): pause and resume by signals,
//! kill by process group and pid namespace.

mod common;

use std::sync::Arc;

use crewlet_sandbox::local::{LimitPolicy, LocalOptions, LocalSandbox};

async fn rlimited() -> Option<Arc<LocalSandbox>> {
    let mut opts = LocalOptions::new(common::state_dir());
    opts.limits = LimitPolicy::Rlimits;
    match LocalSandbox::new(opts).await {
        Ok(sb) => Some(Arc::new(sb)),
        Err(e) => crewlet_sandbox::testsuite::skip(&e.to_string()),
    }
}

crewlet_sandbox::sandbox_conformance!(rlimited());
