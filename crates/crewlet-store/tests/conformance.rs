//! Every conformance suite against every backend: memory, PostgreSQL (a
//! fresh database per test) and, for events, the composite store.

mod common;

use std::sync::Arc;

use crewlet_core::quota::ProviderQuotas;
use crewlet_store::*;

mod memory {
    use super::*;

    mod fleet {
        use super::*;
        crewlet_store::fleet_conformance!(|| async {
            let stores = Stores::memory();
            Some((
                crewlet_store::testsuite::fleet::Fleet {
                    leases: stores.leases,
                    completions: stores.completions,
                    journal: stores.journal,
                },
                (),
            ))
        });
    }

    crewlet_store::token_ledger_conformance!(|| async {
        Some((
            Arc::new(MemoryTokenLedger::new()) as Arc<dyn TokenLedger>,
            (),
        ))
    });
    crewlet_store::config_revisions_conformance!(|| async {
        Some((
            Arc::new(MemoryConfigRevisions::new()) as Arc<dyn ConfigRevisions>,
            (),
        ))
    });
    mod webhooks {
        use super::*;
        crewlet_store::webhook_deliveries_conformance!(|| async {
            Some((
                Arc::new(MemoryWebhookDeliveries::new()) as Arc<dyn WebhookDeliveries>,
                (),
            ))
        });
    }
    mod secrets {
        use super::*;
        crewlet_store::secret_values_conformance!(|| async {
            Some((
                Arc::new(MemorySecretValues::new()) as Arc<dyn SecretValues>,
                (),
            ))
        });
    }
    mod follows {
        use super::*;
        crewlet_store::thread_follows_conformance!(|| async {
            Some((
                Arc::new(MemoryThreadFollows::new()) as Arc<dyn ThreadFollows>,
                (),
            ))
        });
    }
    mod quotas {
        use super::*;
        crewlet_store::provider_quotas_conformance!(|| async {
            Some((
                Arc::new(MemoryProviderQuotas::new()) as Arc<dyn ProviderQuotas>,
                (),
            ))
        });
    }
    mod schedules {
        use super::*;
        crewlet_store::scheduled_runs_conformance!(|| async {
            Some((
                Arc::new(MemoryScheduledRuns::new()) as Arc<dyn ScheduledRuns>,
                (),
            ))
        });
    }
    mod events {
        use super::*;
        crewlet_store::event_store_conformance!(|| async {
            Some((Arc::new(MemoryEventStore::new()) as Arc<dyn EventStore>, ()))
        });
    }
    mod sandbox_runs {
        use super::*;
        crewlet_store::sandbox_runs_conformance!(|| async {
            Some((
                Arc::new(MemorySandboxRuns::new()) as Arc<dyn SandboxRuns>,
                (),
            ))
        });
    }
}

mod postgres {
    use super::*;

    mod fleet {
        use super::*;
        crewlet_store::fleet_conformance!(|| async {
            let (guard, db) = common::migrated().await?;
            Some((
                crewlet_store::testsuite::fleet::Fleet {
                    leases: Arc::new(PostgresLeases::new(db.clone())),
                    completions: Arc::new(PostgresCompletionLedger::new(db.clone())),
                    journal: Arc::new(PostgresEffectJournal::new(db)),
                },
                guard,
            ))
        });
    }

    crewlet_store::token_ledger_conformance!(|| async {
        let (guard, db) = common::migrated().await?;
        Some((
            Arc::new(PostgresTokenLedger::new(db)) as Arc<dyn TokenLedger>,
            guard,
        ))
    });
    crewlet_store::config_revisions_conformance!(|| async {
        let (guard, db) = common::migrated().await?;
        Some((
            Arc::new(PostgresConfigRevisions::new(db)) as Arc<dyn ConfigRevisions>,
            guard,
        ))
    });
    mod webhooks {
        use super::*;
        crewlet_store::webhook_deliveries_conformance!(|| async {
            let (guard, db) = common::migrated().await?;
            Some((
                Arc::new(PostgresWebhookDeliveries::new(db)) as Arc<dyn WebhookDeliveries>,
                guard,
            ))
        });
    }
    mod secrets {
        use super::*;
        crewlet_store::secret_values_conformance!(|| async {
            let (guard, db) = common::migrated().await?;
            Some((
                Arc::new(PostgresSecretValues::new(db)) as Arc<dyn SecretValues>,
                guard,
            ))
        });
    }
    mod quotas {
        use super::*;
        crewlet_store::provider_quotas_conformance!(|| async {
            let (guard, db) = common::migrated().await?;
            Some((
                Arc::new(PostgresProviderQuotas::new(db)) as Arc<dyn ProviderQuotas>,
                guard,
            ))
        });
    }
    mod follows {
        use super::*;
        crewlet_store::thread_follows_conformance!(|| async {
            let (guard, db) = common::migrated().await?;
            Some((
                Arc::new(PostgresThreadFollows::new(db)) as Arc<dyn ThreadFollows>,
                guard,
            ))
        });
    }
    mod schedules {
        use super::*;
        crewlet_store::scheduled_runs_conformance!(|| async {
            let (guard, db) = common::migrated().await?;
            Some((
                Arc::new(PostgresScheduledRuns::new(db)) as Arc<dyn ScheduledRuns>,
                guard,
            ))
        });
    }
    mod events {
        use super::*;
        crewlet_store::event_store_conformance!(|| async {
            let (guard, db) = common::migrated().await?;
            Some((
                Arc::new(PostgresEventStore::new(db)) as Arc<dyn EventStore>,
                guard,
            ))
        });
    }
    mod sandbox_runs {
        use super::*;
        crewlet_store::sandbox_runs_conformance!(|| async {
            let (guard, db) = common::migrated().await?;
            Some((
                Arc::new(PostgresSandboxRuns::new(db)) as Arc<dyn SandboxRuns>,
                guard,
            ))
        });
    }
}

mod composite {
    use super::*;

    mod over_postgres {
        use super::*;
        crewlet_store::event_store_conformance!(|| async {
            let (guard, db) = common::migrated().await?;
            let store = CompositeEventStore::new(
                Arc::new(MemoryEventStore::new()),
                Arc::new(PostgresEventStore::new(db)),
            );
            Some((Arc::new(store) as Arc<dyn EventStore>, guard))
        });
    }

    mod over_memory {
        use super::*;
        crewlet_store::event_store_conformance!(|| async {
            let store = CompositeEventStore::new(
                Arc::new(MemoryEventStore::new()),
                Arc::new(MemoryEventStore::with_capacity(100_000)),
            );
            Some((Arc::new(store) as Arc<dyn EventStore>, ()))
        });
    }
}
